"""Consolidated metadata: the hierarchy listed from .zmetadata alone, and kept current."""

from __future__ import annotations

import errno
import json
import logging
import tracemalloc
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import zarr
from hypothesis import given
from hypothesis import strategies as st

from tests.support.consolidated import counting_tree, write_v2_hierarchy
from tests.support.handlers import walk
from tests.support.stores import v2_zarray
from zarrfs.errors import MetadataError
from zarrfs.formats.metadata.consolidated import dump_document, parse_consolidated, replace_entry
from zarrfs.namespace.nodes import FileNode

ZARRAY = v2_zarray([4], [2])


# What listing a v2 consolidated store reads: the root's zarr.json is looked for
# first (absent here), then .zmetadata lists everything.
ROOT_READS = {"zarr.json": 1, ".zmetadata": 1}


# -- parsing (pure) -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"zarr_consolidated_format": 2, "metadata": {}}', "expected 1"),
        (b'{"metadata": {}}', "zarr_consolidated_format is None"),
        (b'{"zarr_consolidated_format": 1}', "'metadata' is not a JSON object"),
        (b'{"zarr_consolidated_format": 1, "metadata": []}', "'metadata' is not a JSON object"),
        (b'{"zarr_consolidated_format": 1, "metadata": {"a/.zarray": 3}}', "'a/.zarray'"),
    ],
)
def test_invalid_consolidated_metadata(data: bytes, message: str) -> None:
    with pytest.raises(MetadataError, match=message):
        parse_consolidated(data)


def test_children_and_unsafe_keys() -> None:
    doc = {
        "zarr_consolidated_format": 1,
        "metadata": {
            ".zgroup": {"zarr_format": 2},
            "a/b/c/.zarray": ZARRAY,
            "a/.zgroup": {"zarr_format": 2},
            "../escape/.zarray": ZARRAY,
            "x//y/.zarray": ZARRAY,
            "a/b/c/0.0": {},  # not a metadata document
        },
    }
    parsed = parse_consolidated(json.dumps(doc).encode())
    assert parsed.children == {"": ("a",), "a": ("b",), "a/b": ("c",)}
    assert sorted(parsed.documents) == [".zgroup", "a/.zgroup", "a/b/c/.zarray"]
    assert parsed.read("a/b/c", (".zarray", ".zattrs")).keys() == {".zarray"}


names = st.text(alphabet="abc", min_size=1, max_size=2)


@given(st.lists(st.lists(names, min_size=1, max_size=4), max_size=20))
def test_every_document_is_reachable_from_the_root(paths: list[list[str]]) -> None:
    metadata = {"/".join([*p, ".zarray"]): ZARRAY for p in paths}
    parsed = parse_consolidated(
        json.dumps({"zarr_consolidated_format": 1, "metadata": metadata}).encode()
    )
    for p in paths:
        for depth in range(len(p)):
            assert p[depth] in parsed.children["/".join(p[:depth])]
    listed = {f"{parent}/{c}".lstrip("/") for parent, cs in parsed.children.items() for c in cs}
    assert listed == {"/".join(p[: d + 1]) for p in paths for d in range(len(p))}


@pytest.mark.parametrize("zarr2_style", [True, False])
def test_replace_entry_keeps_the_writers_style(zarr2_style: bool) -> None:
    doc = {"zarr_consolidated_format": 1, "metadata": {"a/.zarray": ZARRAY, ".zgroup": {}}}
    original = (
        json.dumps(doc, indent=4, sort_keys=True) if zarr2_style else json.dumps(doc)
    ).encode()
    new = dict(ZARRAY, shape=[9])
    updated = replace_entry(original, "a/.zarray", json.dumps(new).encode())
    assert updated is not None
    assert json.loads(updated) == {**doc, "metadata": {**doc["metadata"], "a/.zarray": new}}
    assert updated.startswith(b"{\n") == zarr2_style
    assert replace_entry(original, "b/.zarray", b"{}") is None


json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False)
    | st.text(max_size=6)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(
    entries=st.dictionaries(
        st.sampled_from(["a", "b/c", "\u00e9t\u00e9", "d\U0001f600"]),
        st.dictionaries(st.text(max_size=4), json_values, max_size=3),
        max_size=3,
    ),
    indent=st.sampled_from([None, 0, 2, 4]),
    ascii=st.booleans(),
    encoding=st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "utf-32-le"]),
)
def test_entries_are_read_as_json_loads_reads_them(
    entries: dict[str, dict], indent: int | None, ascii: bool, encoding: str
) -> None:
    """Each entry is found where it lies in the document and read from there: the
    same value json.loads reads, whatever the document's spacing, escaping or
    encoding; shown as the writer's style makes it."""
    metadata: dict[str, object] = {".zgroup": {"zarr_format": 2}}
    for path, value in entries.items():
        metadata[f"{path}/.zattrs"] = value
        metadata[f"{path}/.zgroup"] = {"zarr_format": 2, "consolidated_metadata": value}
    doc = {"zarr_consolidated_format": 1, "metadata": metadata}
    data = json.dumps(doc, indent=indent, ensure_ascii=ascii).encode(encoding)
    parsed = parse_consolidated(data)
    expected = json.loads(data)["metadata"]
    assert sorted(parsed.documents) == sorted(expected)
    for key, value in expected.items():
        if key.endswith(".zgroup"):
            value.pop("consolidated_metadata", None)
        shown = parsed.documents[key]
        assert json.loads(shown) == value, key
        assert shown == dump_document(value, parsed.indent, parsed.sort_keys), key


def test_the_last_of_duplicate_names_wins_as_in_json() -> None:
    data = (
        b'{"metadata": 1, "zarr_consolidated_format": 1, "metadata": {'
        b'".zgroup": {"zarr_format": 2}, "a/.zarray": 3, "b/.zgroup": {"zarr_format": 2},'
        b' "a/.zarray": {"zarr_format": 2, "x": [1, 2]}}}'
    )
    parsed = parse_consolidated(data)
    assert sorted(parsed.documents) == [".zgroup", "a/.zarray", "b/.zgroup"]
    assert json.loads(parsed.documents["a/.zarray"]) == {"zarr_format": 2, "x": [1, 2]}


def test_a_document_json_refuses_is_refused_wherever_it_breaks() -> None:
    doc = {
        "zarr_consolidated_format": 1,
        "metadata": {".zgroup": {"zarr_format": 2}, "a/.zarray": ZARRAY},
    }
    text = json.dumps(doc, indent=1)
    for cut in range(len(text.rstrip())):
        broken = text[:cut]
        with pytest.raises(ValueError):
            json.loads(broken)
        with pytest.raises(MetadataError):
            parse_consolidated(broken.encode())
    with pytest.raises(MetadataError, match="not valid JSON"):
        parse_consolidated(text.encode() + b" x")
    with pytest.raises(MetadataError, match="not valid JSON"):
        parse_consolidated(text.replace('"a/.zarray"', "'a/.zarray'").encode())
    with pytest.raises(MetadataError, match="not valid JSON"):
        parse_consolidated(text.encode().replace(b"zarr_format", b"zarr\xff_format"))


def test_an_entry_too_large_once_indented_fails_its_node(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Indenting multiplies a deeply nested entry (here 400 KB become 100 MB): its
    node is listed (the listing parses no entry) and fails at every use (EIO) with
    one log line, and no more than the bound of a node's document is made of it."""
    root = tmp_path / "s.zarr"
    value: object = [0] * 200_000
    for _ in range(250):
        value = [value]
    metadata = {
        ".zgroup": {"zarr_format": 2},
        "a/.zarray": ZARRAY,
        "a/.zattrs": {"x": value},
        "b/.zarray": ZARRAY,
    }
    root.mkdir()
    (root / ".zgroup").write_text('{"zarr_format": 2}')
    (root / ".zmetadata").write_text(
        json.dumps({"zarr_consolidated_format": 1, "metadata": metadata})
    )
    assert (root / ".zmetadata").stat().st_size < 1 << 20
    tracemalloc.start()
    try:
        with caplog.at_level(logging.WARNING):
            tree, _ = counting_tree(root)
            names = list(tree.entries(tree.root))
            for _ in range(2):
                with pytest.raises(MetadataError, match="16777216 bytes") as failed:
                    tree.entries(tree.resolve("a"))  # type: ignore[arg-type]
                assert failed.value.errno == errno.EIO and failed.value.logged
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert names == [".zgroup", ".zmetadata", "a", "b", "group.nc"]
    said = [r.getMessage() for r in caplog.records if "cannot show a" in r.getMessage()]
    assert len(said) == 1 and "16777216 bytes" in said[0], caplog.text
    assert peak < 64 << 20, peak


# -- listing through the tree ---------------------------------------------------------


def test_ten_thousand_arrays_are_listed_from_one_key(tmp_path: Path) -> None:
    root = tmp_path / "big.zarr"
    write_v2_hierarchy(root, groups=100, arrays=100)
    tree, store = counting_tree(root)
    seen = walk(tree, tree.root)
    assert sum(p.endswith("/array.raw") for p in seen) == 10_000
    # .zmetadata alone, after looking for a root zarr.json (the newer layout would win)
    assert store.gets == Counter(ROOT_READS), "only .zmetadata may be read"
    assert not store.lists, "consolidated listing must not list the store"


def test_documents_of_a_zarr_python_store_are_shown_byte_for_byte(tmp_path: Path) -> None:
    root = tmp_path / "zp.zarr"
    group = zarr.open_group(str(root), mode="w", zarr_format=2, attributes={"title": "t"})
    arr = group.create_array("sub/arr", shape=(6, 4), chunks=(3, 4), dtype="f4")
    arr.attrs["units"] = "K\u00e9"
    arr[:] = np.arange(24, dtype="f4").reshape(6, 4)
    zarr.consolidate_metadata(str(root))
    tree, store = counting_tree(root)
    for key in (".zgroup", ".zattrs", "sub/.zgroup", "sub/arr/.zarray", "sub/arr/.zattrs"):
        node = tree.resolve(key)
        assert isinstance(node, FileNode)
        shown = node.view.documents[node.view.name]  # type: ignore[attr-defined]
        assert shown == (root / key).read_bytes(), key
    assert store.gets == Counter(ROOT_READS)


def test_zarr2_written_corpus_store_is_shown_byte_for_byte(corpus: Path) -> None:
    root = corpus / "data" / "zarrita.js" / "data.zarr"
    tree, store = counting_tree(root)
    assert tree.consolidated is not None
    checked = 0
    for key in tree.consolidated.documents:
        node = tree.resolve(key)
        assert isinstance(node, FileNode)
        assert node.view.documents[node.view.name] == (root / key).read_bytes(), key  # type: ignore[attr-defined]
        checked += 1
    assert checked > 10
    assert store.gets[".zmetadata"] == 1


def test_array_missing_from_zmetadata_needs_no_consolidated(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    write_v2_hierarchy(root, groups=1, arrays=2)
    late = root / "g0" / "late"
    late.mkdir()
    (late / ".zarray").write_text(json.dumps(ZARRAY))
    tree, _ = counting_tree(root)
    assert sorted(tree.entries(tree.resolve("g0"))) == [".zgroup", "a0", "a1", "group.nc"]  # type: ignore[arg-type]
    plain, store = counting_tree(root, consolidated=False)
    assert "late" in plain.entries(plain.resolve("g0"))  # type: ignore[arg-type]
    assert plain.consolidated is None and store.lists


@pytest.mark.parametrize(
    "content",
    [b"{broken", b'{"zarr_consolidated_format": 1, "metadata": {"a/.zarray": {}}}'],
    ids=["invalid", "no-root-group"],
)
def test_unusable_zmetadata_falls_back_to_listing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes
) -> None:
    root = tmp_path / "s.zarr"
    write_v2_hierarchy(root, groups=1, arrays=1)
    (root / ".zmetadata").write_bytes(content)
    with caplog.at_level(logging.WARNING):
        tree, _ = counting_tree(root)
    assert tree.consolidated is None
    assert [r for r in caplog.records if ".zmetadata" in r.getMessage()], caplog.text
    assert "a0" in tree.entries(tree.resolve("g0"))  # type: ignore[arg-type]
