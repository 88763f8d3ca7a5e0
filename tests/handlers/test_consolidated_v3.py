"""zarr-python 3's consolidated metadata: the hierarchy listed from the root zarr.json alone."""

from __future__ import annotations

import errno
import json
import logging
import os
import tracemalloc
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import trio
import zarr

from tests.support.consolidated import (
    ARRAY,
    GROUP,
    NESTED,
    counting_tree,
    hierarchy_entries,
    root_document,
    write_store,
    write_v2_hierarchy,
)
from tests.support.handlers import walk
from zarrfs.errors import InvalidValueError, MetadataError
from zarrfs.formats.metadata import hierarchy
from zarrfs.formats.metadata.consolidated import parse_consolidated, parse_v3_consolidated
from zarrfs.namespace import tree as tree_module
from zarrfs.namespace.nodes import DirNode, FileNode
from zarrfs.namespace.tree import Tree


def shown(tree: Tree, key: str) -> bytes:
    node = tree.resolve(key)
    assert isinstance(node, FileNode)
    return node.view.documents[node.view.name]  # type: ignore[attr-defined]


# -- parsing (pure) -------------------------------------------------------------------


@pytest.mark.parametrize(
    "doc",
    [GROUP, {**GROUP, "consolidated_metadata": None}],
    ids=["absent", "null"],
)
def test_no_consolidated_metadata(doc: dict) -> None:
    assert parse_v3_consolidated(json.dumps(doc).encode()) is None


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({**GROUP, "consolidated_metadata": []}, "is not a JSON object"),
        (root_document({}, kind="remote"), "kind is 'remote'"),
        ({**GROUP, "consolidated_metadata": {"kind": "inline"}}, "'metadata' is not"),
        (root_document({"a": 3}), "entry 'a' is not a JSON object"),
        ({**ARRAY, "consolidated_metadata": NESTED}, "no Zarr v3 group"),
        ({**root_document({}), "zarr_format": 2}, "no Zarr v3 group"),
    ],
    ids=["not-object", "kind", "no-metadata", "entry", "array-root", "format"],
)
def test_unusable_consolidated_metadata(doc: dict, message: str) -> None:
    with pytest.raises(MetadataError, match=message):
        parse_v3_consolidated(json.dumps(doc).encode())


def test_children_documents_and_unsafe_paths() -> None:
    entries = {
        "a": {**GROUP, "consolidated_metadata": NESTED},
        "a/b/c": ARRAY,
        "": GROUP,
        "../escape": ARRAY,
        "x//y": ARRAY,
        "./z": ARRAY,
        "/abs": ARRAY,
    }
    data = json.dumps(root_document(entries), indent=2).encode()
    parsed = parse_v3_consolidated(data)
    assert parsed is not None
    assert parsed.key == "zarr.json"
    assert parsed.children == {"": ("a",), "a": ("b",), "a/b": ("c",)}
    assert sorted(parsed.documents) == ["a/b/c/zarr.json", "a/zarr.json", "zarr.json"]
    assert parsed.documents["zarr.json"] == data  # the root as stored
    # A group entry's own consolidated view is not part of its zarr.json.
    assert json.loads(parsed.documents["a/zarr.json"]) == GROUP
    assert parsed.documents["a/b/c/zarr.json"] == json.dumps(ARRAY, indent=2).encode()
    one_line = json.dumps(root_document(entries)).encode()
    assert (
        parse_v3_consolidated(one_line).documents["a/b/c/zarr.json"] == json.dumps(ARRAY).encode()
    )  # type: ignore[union-attr]


@pytest.mark.parametrize("layout", ["v2", "v3"])
def test_a_deep_path_costs_its_length_not_its_square(layout: str) -> None:
    """Every prefix of a 20 000-component path as a string would be 400 MB."""
    deep = "/".join(["a"] * 20_000)
    if layout == "v2":
        metadata = {".zgroup": {"zarr_format": 2}, f"{deep}/.zgroup": {"zarr_format": 2}}
        doc: dict = {"zarr_consolidated_format": 1, "metadata": metadata}
        parse = parse_consolidated
    else:
        doc, parse = root_document({deep: GROUP}), parse_v3_consolidated
    data = json.dumps(doc).encode()
    tracemalloc.start()
    try:
        parsed = parse(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 40 * len(data) + (8 << 20), peak
    assert parsed is not None
    assert parsed.children[""] == ("a",)
    assert parsed.children[deep[:-2]] == ("a",)
    assert parsed.children.get(deep) is None and deep[:-2] in parsed.children


def test_a_root_zarr_json_is_opened_in_a_few_times_its_size(tmp_path: Path) -> None:
    """The root document is read entry by entry, the root group's own metadata from
    it without the listing: opening never holds it parsed whole."""
    root = tmp_path / "big.zarr"
    write_store(root, hierarchy_entries(groups=10, arrays=1000))
    size = (root / "zarr.json").stat().st_size
    assert size > 6 << 20
    tracemalloc.start()
    try:
        tree, _ = counting_tree(root)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert tree.consolidated is not None and "g9" in tree.entries(tree.root)
    assert peak < 3 * size + (4 << 20), peak / size


def test_the_newest_layout_at_the_root_owns_the_listing() -> None:
    assert hierarchy.ROOT_KEYS == ("zarr.json", ".zmetadata")
    assert not hierarchy.shown_at_root("zarr.json") and hierarchy.shown_at_root(".zmetadata")
    assert hierarchy.open_listing("zarr.json", json.dumps(GROUP).encode()).listing is None


# -- listing through the tree ---------------------------------------------------------


def test_a_thousand_arrays_are_listed_from_the_root_zarr_json(tmp_path: Path) -> None:
    root = tmp_path / "big.zarr"
    write_store(root, hierarchy_entries(groups=10, arrays=100))
    tree, store = counting_tree(root)
    assert tree.consolidated is not None and tree.consolidated.key == "zarr.json"
    seen = walk(tree, tree.root)
    assert sum(p.endswith("/array.raw") for p in seen) == 1000
    assert store.gets == Counter({"zarr.json": 1}), "only the root zarr.json may be read"
    assert not store.lists, "consolidated listing must not list the store"
    mtime = os.stat(root / "zarr.json").st_mtime
    node = tree.resolve("g3/a7")
    assert isinstance(node, DirNode) and node.mtime == mtime


def test_zarr_python_store_is_listed_from_one_key_and_shown_byte_for_byte(tmp_path: Path) -> None:
    root = tmp_path / "zp.zarr"
    group = zarr.open_group(str(root), mode="w", attributes={"title": "t"})
    arr = group.create_array("sub/arr", shape=(6, 4), chunks=(3, 4), dtype="f4")
    arr.attrs["units"] = "K\u00e9"
    arr[:] = np.arange(24, dtype="f4").reshape(6, 4)
    group.create_group("sub/deep/er", attributes={"x": [1, 2]})
    with pytest.warns(UserWarning, match="Consolidated metadata"):
        zarr.consolidate_metadata(str(root))
    tree, store = counting_tree(root)
    keys = ["zarr.json", "sub/zarr.json", "sub/arr/zarr.json", "sub/deep/er/zarr.json"]
    assert sorted(walk(tree, tree.root)) == sorted(
        [*keys, "sub", "sub/arr", "sub/deep", "sub/deep/zarr.json", "sub/deep/er", "sub/group.nc"]
        + [f"sub/arr/{n}" for n in ("array.hdr", "array.nhdr", "array.npy", "array.raw")]
        + ["sub/arr/array.tif", "sub/arr/info"]
    )
    for key in keys:
        assert shown(tree, key) == (root / key).read_bytes(), key
    raw = tree.resolve("sub/arr/array.raw")
    assert isinstance(raw, FileNode)
    data = trio.run(raw.view.read, 0, raw.view.size)
    assert data == np.arange(24, dtype="<f4").tobytes()
    assert store.gets["zarr.json"] == 1
    assert [k for k in store.gets if k.endswith("zarr.json")] == ["zarr.json"]


def test_corpus_consolidated_stores(corpus: Path) -> None:
    for name in (
        "generated/v3-zarr-python-3.1.6/consolidated.zarr",
        "zarrita.js-v3/data.zarr/consolidated",
    ):
        root = corpus / "data" / name
        tree, store = counting_tree(root)
        assert tree.consolidated is not None, name
        for key in tree.consolidated.documents:
            stored = json.loads((root / key).read_bytes())
            if stored.get("consolidated_metadata", 0) is None:
                del stored["consolidated_metadata"]  # zarrita.js writes null into subgroups
            assert json.loads(shown(tree, key)) == stored, (name, key)
        walk(tree, tree.root)
        assert store.gets == Counter({"zarr.json": 1}), name
    # zarr-python 3 wrote this one: every document byte for byte.
    root = corpus / "data" / "generated/v3-zarr-python-3.1.6/consolidated.zarr"
    tree, _ = counting_tree(root)
    assert tree.consolidated is not None
    for key in tree.consolidated.documents:
        assert shown(tree, key) == (root / key).read_bytes(), key


def test_nodes_missing_from_the_listing_are_not_shown(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    write_store(root, hierarchy_entries(groups=1, arrays=2))
    (root / "g0" / "late").mkdir()
    (root / "g0" / "late" / "zarr.json").write_text(json.dumps(ARRAY))
    tree, _ = counting_tree(root)
    assert list(tree.entries(tree.resolve("g0"))) == ["a0", "a1", "group.nc", "zarr.json"]  # type: ignore[arg-type]
    plain, store = counting_tree(root, consolidated=False)
    assert "late" in plain.entries(plain.resolve("g0"))  # type: ignore[arg-type]
    assert plain.consolidated is None and store.lists
    # The root's own document is still read once.
    assert store.gets["zarr.json"] == 1


def test_a_malformed_entry_fails_that_node_with_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Listing a group parses none of its children: a malformed entry is listed, and
    fails at every use (EIO), said once; the others are served."""
    root = tmp_path / "s.zarr"
    entries = hierarchy_entries(groups=1, arrays=2)
    entries["g0/bad"] = {**ARRAY, "shape": [-1]}
    entries["g0/odd"] = {**ARRAY, "node_type": "table"}
    write_store(root, entries)
    with caplog.at_level(logging.WARNING):
        tree, store = counting_tree(root)
        group = tree.resolve("g0")
        names = list(tree.entries(group))  # type: ignore[arg-type]
        for _ in range(2):
            for name in ("bad", "odd"):
                with pytest.raises(MetadataError) as failed:
                    tree.entries(tree.lookup(group, name))  # type: ignore[arg-type]
                assert failed.value.errno == errno.EIO and failed.value.logged
        assert "array.raw" in tree.entries(tree.resolve("g0/a1"))  # type: ignore[arg-type]
    assert names == ["a0", "a1", "bad", "group.nc", "odd", "zarr.json"]
    assert len([r for r in caplog.records if "g0/bad" in r.getMessage()]) == 1
    assert len([r for r in caplog.records if "g0/odd" in r.getMessage()]) == 1
    assert store.gets == Counter({"zarr.json": 1})


@pytest.mark.parametrize(
    "member",
    [{"kind": "remote"}, {"metadata": [1, 2]}],
    ids=["kind", "metadata-list"],
)
def test_unusable_consolidated_metadata_falls_back_to_listing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, member: dict
) -> None:
    root = tmp_path / "s.zarr"
    write_store(root, hierarchy_entries(groups=1, arrays=1), **member)
    with caplog.at_level(logging.WARNING):
        tree, store = counting_tree(root)
    assert tree.consolidated is None
    lines = [r for r in caplog.records if "consolidated" in r.getMessage()]
    assert len(lines) == 1, caplog.text
    assert "a0" in tree.entries(tree.resolve("g0"))  # type: ignore[arg-type]
    assert store.gets["zarr.json"] == 1  # the root's document, read once all the same
    assert shown(tree, "zarr.json") == (root / "zarr.json").read_bytes()


def test_a_root_zarr_json_may_be_as_large_as_consolidated_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "s.zarr"
    write_store(root, hierarchy_entries(groups=2, arrays=2))
    size = (root / "zarr.json").stat().st_size
    monkeypatch.setattr(hierarchy, "NODE_LIMIT", size - 1)
    tree, _ = counting_tree(root)  # larger than a node's document: still read whole
    assert tree.consolidated is not None and "g1" in tree.entries(tree.root)
    monkeypatch.setattr(hierarchy, "ROOT_LIMIT", size - 1)
    with pytest.raises(InvalidValueError):
        counting_tree(root)


def _counting_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of the nodes parsed from here on."""
    parsed: list[str] = []
    real = hierarchy.node_in

    def node_in(listing: object, path: str, documents: dict[str, bytes]) -> object:
        parsed.append(path)
        return real(listing, path, documents)  # type: ignore[arg-type]

    monkeypatch.setattr(hierarchy, "node_in", node_in)
    return parsed


@pytest.mark.parametrize("layout", ["v2", "v3"])
def test_listing_a_group_parses_none_of_its_arrays_until_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    """The group's listing makes its children from the listing's names alone (but
    the first array, which says that group.nc is there); an array is parsed at its
    first use, once, with the siblings after it that were never parsed (up to
    PARSE_AHEAD: a walk uses them next)."""
    root = tmp_path / "s.zarr"
    if layout == "v2":
        write_v2_hierarchy(root, groups=1, arrays=50)
    else:
        write_store(root, hierarchy_entries(groups=1, arrays=50))
    tree, _ = counting_tree(root)
    parsed = _counting_parses(monkeypatch)
    group = tree.lookup(tree.root, "g0")
    names = list(tree.entries(group))  # type: ignore[arg-type]
    assert [n for n in names if n.startswith("a")] == sorted(f"a{i}" for i in range(50))
    assert "group.nc" in names
    assert parsed == ["g0", "g0/a0"], parsed
    monkeypatch.setattr(tree_module, "PARSE_AHEAD", 20)
    for name in ("a7", "a7", "a8", "a3", "a2"):
        assert "array.raw" in tree.entries(tree.lookup(group, name))  # type: ignore[arg-type]
    in_order = sorted(f"a{i}" for i in range(50))  # as listed: a0, a1, a10, ...
    expected = ["g0", "g0/a0"]
    for name in ("a7", "a8", "a3", "a2"):
        if f"g0/{name}" not in expected:
            at = in_order.index(name)
            ahead = [f"g0/{n}" for n in in_order[at + 1 : at + 21]]
            expected += [f"g0/{name}", *(p for p in ahead if p not in expected)]
    assert parsed == expected, parsed
    assert len(set(parsed)) == len(parsed)  # none twice


def test_group_nc_is_listed_where_a_later_child_has_a_netcdf_type(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Children are parsed up to the first array of a netCDF type; a group with none
    has no group.nc, and its children are not parsed again at its next listing."""
    root = tmp_path / "s.zarr"
    booleans = {**ARRAY, "data_type": "bool", "fill_value": False}
    entries = {"g0": GROUP, "g1": GROUP}
    entries |= {f"g0/b{i}": booleans for i in range(3)} | {"g0/c": ARRAY}
    entries |= {f"g1/b{i}": booleans for i in range(3)}
    write_store(root, entries)
    tree, _ = counting_tree(root)
    parsed = _counting_parses(monkeypatch)
    assert "group.nc" in tree.entries(tree.resolve("g0"))  # type: ignore[arg-type]
    assert "group.nc" not in tree.entries(tree.resolve("g1"))  # type: ignore[arg-type]
    assert sorted(parsed) == ["g0", "g0/b0", "g0/b1", "g0/b2", "g0/c", "g1"] + [
        f"g1/b{i}" for i in range(3)
    ]
    shown = tree.resolve("g0/group.nc")
    assert isinstance(shown, FileNode) and shown.view.size > 0
