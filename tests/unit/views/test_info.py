"""The ``info`` file: chunk-key parsing, fixed-width summaries, no chunk reads (handlers
without a mount; tests/mount/reads/test_info_mount.py reads it through the kernel)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import trio
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.info import (
    METAS,
    ScanCountingStore,
    assert_no_chunk_read,
    bytes_stored,
    field,
    info_node,
    initialized,
    make_tree,
    meta_of,
    read_info,
    write_json,
)
from tests.support.stores import v2_zarray
from zarrfs.formats.grid.layout import Index
from zarrfs.formats.model import ArrayMeta, chunk_key_parser
from zarrfs.namespace.nodes import FileNode
from zarrfs.stores.directory import TEMP_MARKER, DirectoryStore
from zarrfs.views.info import INFO_NAME, InfoView, Stored, info_text, summarise

zarray = v2_zarray


# -- chunk_key_parser -----------------------------------------------------------------

DOT, SLASH, BOTH = ["."], ["/"], [".", "/"]
PARSE_CASES = [
    # (id, prefix, separators, suffix, ndim, key, expected)
    ("v2-dot", "a", DOT, "", 2, "a/1.2", (1, 2)),
    ("v2-dot-big", "g/a", DOT, "", 3, "g/a/10.0.123", (10, 0, 123)),
    ("v2-dot-root", "", DOT, "", 2, "3.4", (3, 4)),
    ("v2-dot-1d", "a", DOT, "", 1, "a/7", (7,)),
    ("v2-dot-refuses-slash", "a", DOT, "", 2, "a/1/2", None),
    ("v2-slash", "a", SLASH, "", 2, "a/1/2", (1, 2)),
    ("v2-slash-3d", "a", SLASH, "", 3, "a/0/5/6", (0, 5, 6)),
    ("v2-slash-root", "", SLASH, "", 2, "1/2", (1, 2)),
    ("v2-slash-refuses-dot", "a", SLASH, "", 2, "a/1.2", None),
    ("unknown-dot", "a", BOTH, "", 2, "a/1.2", (1, 2)),
    ("unknown-slash", "a", BOTH, "", 2, "a/1/2", (1, 2)),
    ("unknown-1d", "a", BOTH, "", 1, "a/4", (4,)),
    ("unknown-mixed", "a", BOTH, "", 3, "a/1.2/3", None),
    ("unknown-1d-nested", "a", BOTH, "", 1, "a/1/0", None),
    ("pre-v1", "a/__zdata__", DOT, ".blosc", 2, "a/__zdata__/3.4.blosc", (3, 4)),
    ("pre-v1-root", "__zdata__", DOT, ".blosc", 2, "__zdata__/0.11.blosc", (0, 11)),
    ("pre-v1-no-suffix", "a/__zdata__", DOT, ".blosc", 2, "a/__zdata__/3.4", None),
    ("pre-v1-outside-zdata", "a/__zdata__", DOT, ".blosc", 2, "a/3.4.blosc", None),
    ("pre-v1-meta", "a/__zdata__", DOT, ".blosc", 2, "a/__zmeta__", None),
    ("v1", "a", DOT, "", 2, "a/2.1", (2, 1)),
    ("v1-meta", "a", DOT, "", 2, "a/meta", None),
    ("v1-attrs", "a", DOT, "", 2, "a/attrs", None),
    ("0d", "a", DOT, "", 0, "a/0", ()),
    ("0d-root", "", BOTH, "", 0, "0", ()),
    ("0d-pre-v1", "__zdata__", DOT, ".blosc", 0, "__zdata__/0.blosc", ()),
    ("0d-not-1", "a", DOT, "", 0, "a/1", None),
    ("0d-not-0.0", "a", DOT, "", 0, "a/0.0", None),
    ("zarray", "a", BOTH, "", 2, "a/.zarray", None),
    ("zarray-root", "", BOTH, "", 2, ".zarray", None),
    ("zattrs-1d", "", BOTH, "", 1, ".zattrs", None),
    ("letter", "a", BOTH, "", 2, "a/1.x", None),
    ("too-many", "a", BOTH, "", 2, "a/1.2.3", None),
    ("too-few", "a", BOTH, "", 2, "a/1", None),
    ("negative", "a", BOTH, "", 2, "a/-1.0", None),
    ("plus", "a", BOTH, "", 2, "a/+1.0", None),
    ("space", "a", BOTH, "", 2, "a/ 1.0", None),
    ("empty-part", "a", BOTH, "", 2, "a/1.", None),
    ("empty", "a", BOTH, "", 2, "a/", None),
    ("arabic-indic", "a", BOTH, "", 2, "a/\u0661.\u0662", None),
    ("superscript", "a", BOTH, "", 2, "a/1.\u00b2", None),
    ("fullwidth", "a", BOTH, "", 1, "a/\uff11", None),
    ("other-array", "a", BOTH, "", 2, "b/1.2", None),
    ("prefix-of-name", "a", BOTH, "", 2, "ab/1.2", None),
    ("nested-array", "a", BOTH, "", 2, "a/b/1.2", None),
    ("temporary", "a", BOTH, "", 2, f"a/.1.2{TEMP_MARKER}0a1b2c3d", None),
    # Writers form chunk keys with str(int): "01" names no chunk, and zarrfs reads
    # chunk (1, 2) from "a/1.2" only.
    ("leading-zero", "a", BOTH, "", 2, "a/01.2", None),
]


@pytest.mark.parametrize(
    "prefix,separators,suffix,ndim,key,expected",
    [case[1:] for case in PARSE_CASES],
    ids=[case[0] for case in PARSE_CASES],
)
def test_chunk_key_parser(
    prefix: str, separators: list[str], suffix: str, ndim: int, key: str, expected: Index | None
) -> None:
    assert chunk_key_parser(prefix, separators, suffix, ndim)(key) == expected


@pytest.mark.parametrize(
    "separator,ndim", [(None, 2), (".", 2), ("/", 2), (None, 1), ("/", 3), (None, 0)]
)
def test_chunk_index_inverts_chunk_keys(separator: str | None, ndim: int) -> None:
    extra = {"dimension_separator": separator} if separator else {}
    meta = meta_of("g/a", zarray([7] * ndim, [2] * ndim, **extra))
    for index in np.ndindex(*(4,) * ndim):
        for key in meta.chunk_keys(index):
            assert meta.chunk_index(key) == index, key


# -- info_text: a width fixed by the metadata -----------------------------------------


@settings(max_examples=400, deadline=None)
@given(data=st.data(), meta=st.sampled_from(METAS))
def test_info_text_reads_naturally(data: st.DataObject, meta: ArrayMeta) -> None:
    chunks = data.draw(st.integers(0, meta.n_chunks), label="chunks")
    dirty = data.draw(st.integers(0, meta.n_chunks), label="dirty")
    nbytes = data.draw(
        st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 1, 1023, 1024, 2**64 - 1])),
        label="nbytes",
    )
    empty = info_text(meta, None, 0)
    text = info_text(meta, Stored(chunks, nbytes), dirty)
    assert text.splitlines()[0] == empty.splitlines()[0]  # the name line
    for line in text.splitlines():  # no padding: one space after the colon
        value = line.partition(": ")[2]
        assert value == value.lstrip(), line
    assert initialized(text) == (chunks, meta.n_chunks)
    assert bytes_stored(text) == nbytes
    assert int(field(text, "Chunks not stored")) == dirty


class _Untouchable:
    """A store that fails any use: what stat may not do."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"info's size touched the store ({name})")


def test_info_has_size_zero_without_touching_the_store() -> None:
    for meta in METAS:
        view = InfoView(meta, {}, None, _Untouchable())  # type: ignore[arg-type]
        assert view.size == 0 and view.volatile, meta.path


def test_info_text_contents() -> None:
    meta = METAS[7]  # "dims": (10, 12) in (3, 5) chunks, int32
    text = info_text(meta, Stored(5, 350), 2)
    assert field(text, "Name") == "/dims"
    assert field(text, "Zarr format") == "2"
    assert field(text, "Shape") == "(10, 12)"
    assert field(text, "Chunk shape") == "(3, 5)"
    assert "int32" in field(text, "Data type")
    assert field(text, "Order") == "C"
    assert field(text, "Fill value") == "0"
    assert field(text, "Dimension names") == "y, x"
    assert field(text, "No. bytes").startswith("480 ")
    assert bytes_stored(text) == 350
    assert initialized(text) == (5, 12)
    assert int(field(text, "Chunks not stored")) == 2
    assert float(field(text, "Storage ratio")) == pytest.approx(480 / 350, rel=1e-2)


# -- summarise ------------------------------------------------------------------------


def test_summarise_counts_in_grid_chunks_once() -> None:
    meta = METAS[7]  # path "dims", grid (4, 3), no separator recorded: "." and "/"
    keys = [
        ("dims/0.0", 10),
        ("dims/0/0", 11),  # chunk (0, 0) again, in the other separator
        ("dims/0.0", 10),  # and the same key twice
        ("dims/3.2", 5),  # the last chunk of the grid
        ("dims/4.0", 100),  # out of the grid (a shrunk array's leftover)
        ("dims/0.3", 100),
        ("dims/.zarray", 50),  # metadata, counted through ``documents``
        ("dims/.zattrs", 30),
        (f"dims/.1.1{TEMP_MARKER}0a1b2c3d", 9),
        ("dims/1.x", 7),
        ("dims/1.2.3", 7),
        ("dims/-1.0", 7),
        ("dims/\u0661.\u0662", 7),
        ("other/1.1", 3),
        ("dims/sub/1.1", 3),
    ]
    assert summarise(meta, keys, documents=80) == Stored(2, 80 + 10 + 5)


def test_summarise_edge_shapes() -> None:
    scalar, zero_axis = METAS[1], METAS[3]
    assert summarise(scalar, [("scalar/0", 8), ("scalar/0.0", 8)], 4) == Stored(1, 12)
    assert summarise(zero_axis, [("g/zero_axis/0.0", 6)], 4) == Stored(0, 4)
    assert summarise(METAS[5], [], 0) == Stored(0, 0)


# -- handler level: Tree over a counting store ----------------------------------------


def chunked_store(root: Path, chunks: list[str]) -> int:
    """A group with one v2 array "arr" (10, 12) in (3, 5) chunks; returns its stored bytes."""
    write_json(root / ".zgroup", {"zarr_format": 2})
    write_json(root / "arr" / ".zarray", zarray([10, 12], [3, 5]))
    write_json(root / "arr" / ".zattrs", {"_ARRAY_DIMENSIONS": ["y", "x"]})
    for i, key in enumerate(chunks):
        (root / "arr" / key).parent.mkdir(parents=True, exist_ok=True)
        (root / "arr" / key).write_bytes(np.full((3, 5), i + 1, "<i4").tobytes())
    return sum(p.stat().st_size for p in (root / "arr").rglob("*") if p.is_file())


def test_stat_and_listing_read_no_chunk(tmp_path: Path) -> None:
    chunked_store(tmp_path, ["0.0", "1.2", "3.1"])
    tree = make_tree(tmp_path)
    store = tree.store
    assert isinstance(store, ScanCountingStore)
    info = info_node(tree)
    for name in tree.entries(tree.resolve("arr")):  # what `ls -l` asks of every entry
        entry = tree.resolve(f"arr/{name}")
        assert isinstance(entry, FileNode)
        assert (entry.view.size > 0) == (name != INFO_NAME), name
    assert info.view.size == 0 and info.view.volatile
    assert_no_chunk_read(store)
    assert not store.scans, "stat or listing listed the array's keys"


def test_reading_info_lists_but_reads_no_chunk(tmp_path: Path) -> None:
    written = ["0.0", "1.2", "3.1", "3.2"]
    stored = chunked_store(tmp_path, written)
    (tmp_path / "arr" / "4.0").write_bytes(bytes(60))  # outside the (4, 3) grid
    (tmp_path / "arr" / "notes.txt").write_bytes(b"not a chunk")
    tree = make_tree(tmp_path)
    store = tree.store
    assert isinstance(store, ScanCountingStore)
    info = info_node(tree)
    text = read_info(info)
    size = len(text.encode())
    assert initialized(text) == (len(written), 12)
    assert bytes_stored(text) == stored
    assert int(field(text, "Chunks not stored")) == 0
    assert field(text, "Name") == "/arr"
    assert field(text, "Dimension names") == "y, x"
    assert_no_chunk_read(store)
    assert store.scans == Counter({"arr": 1})
    # A read past the start continues the same summary: no new listing.
    assert trio.run(info.view.read, size - 10, 100) == text.encode()[-10:]
    assert store.scans == Counter({"arr": 1})
    # A read from the start sees a chunk added meanwhile; stat still lists nothing.
    (tmp_path / "arr" / "2.0").write_bytes(bytes(60))
    again = read_info(info)
    assert initialized(again) == (len(written) + 1, 12)
    assert bytes_stored(again) == stored + 60
    assert info.view.size == 0
    assert store.scans == Counter({"arr": 2})
    assert_no_chunk_read(store)


def test_stray_files_count_as_in_zarr_python(tmp_path: Path) -> None:
    """Files zarr-python does not read as chunks are not initialised chunks either."""
    a = zarr.create_array(
        store=str(tmp_path), name="arr", shape=(10, 12), chunks=(3, 5), dtype="<i4", zarr_format=2
    )
    a[0:3, 0:5] = 1
    a[9, 11] = 2
    arr = tmp_path / "arr"
    copy = (arr / "0.0").read_bytes()
    (arr / "01.0").write_bytes(copy)  # zero-padded: zarr-python and zarrfs read "1.0"
    (arr / "1.0.bak").write_bytes(copy)
    (arr / "4.0").write_bytes(copy)  # outside the (4, 3) grid
    (arr / f".1.1{TEMP_MARKER}0a1b2c3d").write_bytes(copy)
    reopened = zarr.open_array(str(arr), mode="r")
    assert not reopened[3:6, 0:5].any()  # zarr-python reads chunk (1, 0) as fill
    text = read_info(info_node(make_tree(tmp_path)))
    assert initialized(text) == (reopened.nchunks_initialized, reopened.nchunks) == (2, 12)


def test_nested_chunks_and_root_array(tmp_path: Path) -> None:
    write_json(tmp_path / ".zarray", zarray([4, 4], [2, 2], dimension_separator="/"))
    for key in ("0/0", "1/1", "1/0"):
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_bytes(bytes(16))
    (tmp_path / "0.1").write_bytes(bytes(16))  # the wrong separator: not read by zarrfs
    tree = make_tree(tmp_path)
    info = tree.resolve(INFO_NAME)
    assert isinstance(info, FileNode)
    text = read_info(info)
    assert initialized(text) == (3, 4)
    assert bytes_stored(text) == 3 * 16 + (tmp_path / ".zarray").stat().st_size
    assert field(text, "Name") == "/"
    assert_no_chunk_read(tree.store)


def test_dirty_chunks_are_not_stored_until_flushed(tmp_path: Path) -> None:
    chunked_store(tmp_path, ["0.0"])
    tree = make_tree(tmp_path, writeback=True)
    info = info_node(tree)
    raw = tree.resolve("arr/array.raw")
    assert isinstance(raw, FileNode)
    row = 12 * 4
    # rows 3..5, columns 0..4: all of chunk (1, 0), one dirty chunk
    for r in range(3, 6):
        trio.run(raw.view.write, r * row, np.full(5, 7, "<i4").tobytes())
    text = read_info(info)
    assert initialized(text) == (1, 12)
    assert int(field(text, "Chunks not stored")) == 1
    state = tree.resolve("arr").state
    assert state is not None and tree.writeback is not None
    trio.run(tree.writeback.flush_array, state)
    text = read_info(info)
    assert initialized(text) == (2, 12)
    assert int(field(text, "Chunks not stored")) == 0
    assert (tmp_path / "arr" / "1.0").is_file()


def test_directory_scan_skips_temporary_files(tmp_path: Path) -> None:
    write_json(tmp_path / "arr" / ".zarray", zarray([4, 4], [2, 2]))
    (tmp_path / "arr" / "0.0").write_bytes(b"x" * 3)
    (tmp_path / "arr" / f".0.1{TEMP_MARKER}0a1b2c3d").write_bytes(b"x" * 5)
    (tmp_path / "arr" / "sub").mkdir()
    (tmp_path / "arr" / "sub" / "1").write_bytes(b"x" * 7)
    (tmp_path / "arr" / "sub" / f".1{TEMP_MARKER}deadbeef").write_bytes(b"x" * 11)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "1.1").write_bytes(b"x")
    store = DirectoryStore(str(tmp_path))
    zarray_size = (tmp_path / "arr" / ".zarray").stat().st_size
    assert dict(store.scan("arr")) == {".zarray": zarray_size, "0.0": 3, "sub/1": 7}
    assert sorted(store.scan("")) == sorted(
        [("arr/.zarray", zarray_size), ("arr/0.0", 3), ("arr/sub/1", 7), ("other/1.1", 1)]
    )
    assert list(store.scan("missing")) == []
    # A temporary file left by a write in flight is not counted by info either.
    tree_root = tmp_path / "t"
    chunked_store(tree_root, ["0.0"])
    (tree_root / "arr" / f".1.0{TEMP_MARKER}0a1b2c3d").write_bytes(bytes(60))
    (tree_root / "arr" / f"1.0{TEMP_MARKER}0a1b2c3d").write_bytes(bytes(60))
    text = read_info(info_node(make_tree(tree_root)))
    assert initialized(text) == (1, 12)
