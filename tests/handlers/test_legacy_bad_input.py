"""Bad input in the layouts before v2: pre-v1 ``__zmeta__`` and v1 ``meta``.

Requirement: a ``__zmeta__`` or ``meta`` that is not valid JSON, misses a required
key, has a negative or zero chunk length, a shape whose byte size overflows 2**63,
or an unknown compression name hides that array with one log line and the rest of
the mount works; a blosc chunk whose header claims more bytes than the chunk size
is an EIO for that read.

Every store is written by hand under tmp_path: a v2 root group holding one good
pre-v1 array, one good v1 array and the damaged one. A damaged document is the
good document with exactly one change, so the array can only be hidden for that
change. The handler-level tests drive ``Tree`` directly; one real mount checks the
same through the kernel.
"""

from __future__ import annotations

import errno
import itertools
import json
import logging
import math
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import trio

from tests.support.mounting import mounted, read_range
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.errors import ChunkError, NotFoundError
from zarrfs.namespace.tree import DirNode, FileNode, Tree
from zarrfs.stores.directory import DirectoryStore

DTYPE = "<i4"
SHAPE, CHUNKS = (10, 12), (4, 5)  # edge chunks on both axes
VALUES = (np.arange(math.prod(SHAPE), dtype=DTYPE).reshape(SHAPE) * 7 - 300).astype(DTYPE)
BLOSC = {"cname": "lz4", "clevel": 5, "shuffle": 1}
GOOD = ("good_v0", "good_v1")
BAD = "broken"

Index = tuple[int, ...]
Document = dict[str, Any]


# -- writing stores by hand ----------------------------------------------------------------


def v0_document(shape: tuple[int, ...], chunks: tuple[int, ...]) -> Document:
    """A pre-v1 ``__zmeta__`` as zarr 0.4 wrote it (persistence.rst)."""
    return {
        "chunks": list(chunks),
        **BLOSC,
        "dtype": DTYPE,
        "fill_value": 0,
        "shape": list(shape),
    }


def v1_document(shape: tuple[int, ...], chunks: tuple[int, ...]) -> Document:
    """A v1 ``meta`` as zarr 1.x wrote it (spec_v1.rst)."""
    return {
        "chunks": list(chunks),
        "compression": "blosc",
        "compression_opts": dict(BLOSC),
        "dtype": DTYPE,
        "fill_value": 0,
        "order": "C",
        "shape": list(shape),
        "zarr_format": 1,
    }


@dataclass(frozen=True)
class Layout:
    name: str
    meta_key: str
    attrs_key: str
    chunk_prefix: str
    chunk_suffix: str
    document: Callable[[tuple[int, ...], tuple[int, ...]], Document]
    required: tuple[str, ...]  # the keys the spec says MUST be present

    def chunk_key(self, index: Index) -> str:
        return self.chunk_prefix + ".".join(str(i) for i in index) + self.chunk_suffix


V0 = Layout(
    "pre-v1",
    "__zmeta__",
    "__zattr__",
    "__zdata__/",
    ".blosc",
    v0_document,
    ("shape", "chunks", "dtype", "fill_value", "cname", "clevel", "shuffle"),
)
V1 = Layout(
    "v1",
    "meta",
    "attrs",
    "",
    "",
    v1_document,
    (
        "zarr_format",
        "shape",
        "chunks",
        "dtype",
        "compression",
        "compression_opts",
        "fill_value",
        "order",
    ),
)


def dump(doc: Any) -> bytes:
    return json.dumps(doc, indent=4, sort_keys=True).encode()


def chunk_indices(shape: tuple[int, ...], chunks: tuple[int, ...]) -> Iterator[Index]:
    return itertools.product(*(range(-(-s // c)) for s, c in zip(shape, chunks)))


def chunk_of(values: np.ndarray, index: Index, chunks: tuple[int, ...]) -> np.ndarray:
    """The full-shape chunk at ``index``; the part overhanging the array is zero."""
    box = np.zeros(chunks, dtype=values.dtype)
    part = values[tuple(slice(i * c, (i + 1) * c) for i, c in zip(index, chunks))]
    box[tuple(slice(0, n) for n in part.shape)] = part
    return box


def write_array(
    directory: Path,
    layout: Layout,
    values: np.ndarray,
    chunks: tuple[int, ...],
    document: bytes | None = None,
) -> None:
    """An array in ``layout`` with every chunk stored, blosc-compressed with numcodecs."""
    directory.mkdir(parents=True)
    meta = dump(layout.document(values.shape, chunks)) if document is None else document
    (directory / layout.meta_key).write_bytes(meta)
    (directory / layout.attrs_key).write_text("{}")
    codec = numcodecs.Blosc(**BLOSC)
    for index in chunk_indices(values.shape, chunks):
        path = directory / layout.chunk_key(index)
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(bytes(codec.encode(chunk_of(values, index, chunks))))


def claim_nbytes(chunk_file: Path, nbytes: int) -> None:
    """Rewrite the blosc header's nbytes field (bytes 4..8, little-endian uint32)."""
    data = bytearray(chunk_file.read_bytes())
    assert len(data) >= 16 and data[0] in (1, 2), "not a blosc frame"
    data[4:8] = nbytes.to_bytes(4, "little")
    chunk_file.write_bytes(bytes(data))


def write_root_with_good_arrays(root: Path) -> None:
    root.mkdir(exist_ok=True)
    (root / ".zgroup").write_text('{"zarr_format": 2}')
    write_array(root / "good_v0", V0, VALUES, CHUNKS)
    write_array(root / "good_v1", V1, VALUES, CHUNKS)


# -- the damaged documents -----------------------------------------------------------------

Mutation = Callable[[Document], bytes]


def truncated(doc: Document) -> bytes:
    text = dump(doc)
    return text[: len(text) // 2]


def empty(doc: Document) -> bytes:
    return b""


def not_utf8(doc: Document) -> bytes:
    return dump(doc).replace(b"{", b'{\n    "note": "\xff\xfe",', 1)


def not_an_object(doc: Document) -> bytes:
    return dump(sorted(doc.items()))


def without(key: str) -> Mutation:
    return lambda doc: dump({k: v for k, v in doc.items() if k != key})


def setting(key: str, value: Any) -> Mutation:
    return lambda doc: dump({**doc, key: value})


def setting_opts(key: str, value: Any) -> Mutation:
    return lambda doc: dump({**doc, "compression_opts": {**doc["compression_opts"], key: value}})


def cases_for(layout: Layout) -> dict[str, tuple[Layout, Mutation]]:
    mutations: dict[str, Mutation] = {
        "truncated-json": truncated,
        "empty": empty,
        "not-utf8": not_utf8,
        "not-an-object": not_an_object,
        **{f"missing-{key}": without(key) for key in layout.required},
        "chunk-zero": setting("chunks", [CHUNKS[0], 0]),
        "chunk-negative": setting("chunks", [-CHUNKS[0], CHUNKS[1]]),
        # 2**61 elements fit an int64, their 2**63 bytes do not
        "nbytes-2to63": setting("shape", [2**31, 2**30]),
        "nbytes-2to82": setting("shape", [2**40, 2**40]),
    }
    if layout is V0:
        mutations["unknown-cname"] = setting("cname", "nosuchcodec")
    else:
        mutations["unknown-compression"] = setting("compression", "nosuchcodec")
        mutations["unknown-blosc-cname"] = setting_opts("cname", "nosuchcodec")
    return {f"{layout.name}-{label}": (layout, m) for label, m in mutations.items()}


CASES = {**cases_for(V0), **cases_for(V1)}


def write_bad_array(directory: Path, case: str) -> None:
    layout, mutate = CASES[case]
    write_array(directory, layout, VALUES, CHUNKS, mutate(layout.document(SHAPE, CHUNKS)))


# -- handler level -------------------------------------------------------------------------


def make_tree(root: Path) -> Tree:
    store = DirectoryStore(str(root))
    return Tree(store, ChunkCache(store, 2**20))


def read(tree: Tree, path: str, offset: int, size: int) -> bytes:
    node = tree.resolve(path)
    assert isinstance(node, FileNode)
    return trio.run(node.view.read, offset, size)


def read_all(tree: Tree, path: str) -> bytes:
    node = tree.resolve(path)
    assert isinstance(node, FileNode)
    return trio.run(node.view.read, 0, node.view.size)


def assert_good_arrays_read(tree: Tree) -> None:
    for name in GOOD:
        assert read_all(tree, f"{name}/array.raw") == VALUES.tobytes(), name
        npy = read_all(tree, f"{name}/array.npy")
        assert npy.endswith(VALUES.tobytes()), name


def naming(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    """Records at WARNING or above whose message names ``name`` as a path component."""
    pattern = re.compile(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])")
    return [
        r for r in caplog.records if r.levelno >= logging.WARNING and pattern.search(r.getMessage())
    ]


@pytest.mark.parametrize("case", list(CASES))
def test_bad_document_hides_only_that_array(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    write_root_with_good_arrays(tmp_path)
    write_bad_array(tmp_path / BAD, case)
    with caplog.at_level(logging.WARNING):
        tree = make_tree(tmp_path)
        assert list(tree.entries(tree.root)) == [".zgroup", *GOOD]
        with pytest.raises(NotFoundError):
            tree.resolve(BAD)
        with pytest.raises(NotFoundError):
            tree.resolve(f"{BAD}/array.raw")
        assert list(tree.entries(tree.root)) == [".zgroup", *GOOD]  # listed again: no new line
        assert_good_arrays_read(tree)
    lines = naming(caplog, BAD)
    assert [r.levelname for r in lines] == ["WARNING"], caplog.text
    assert "\n" not in lines[0].getMessage()
    for name in GOOD:
        assert naming(caplog, name) == [], caplog.text


def test_the_unchanged_documents_show_the_array(tmp_path: Path) -> None:
    """Control: the documents the cases start from are good, in both layouts."""
    write_root_with_good_arrays(tmp_path)
    for layout in (V0, V1):
        write_array(tmp_path / f"copy_{layout.name}", layout, VALUES, CHUNKS)
    tree = make_tree(tmp_path)
    names = [".zgroup", "copy_pre-v1", "copy_v1", *GOOD]
    assert list(tree.entries(tree.root)) == names
    for name in names[1:]:
        node = tree.resolve(name)
        assert isinstance(node, DirNode) and node.is_array
        assert read_all(tree, f"{name}/array.raw") == VALUES.tobytes(), name


CORRUPT_INDEX = (1, 1)
CHUNK_NBYTES = math.prod(CHUNKS) * np.dtype(DTYPE).itemsize
CLAIMS = {
    "one-more": CHUNK_NBYTES + 1,
    "double": 2 * CHUNK_NBYTES,
    "4GiB": 2**32 - 1,
}


def row_pieces() -> Iterator[tuple[Index, int, int, slice]]:
    """(chunk index, byte offset, byte length, columns) of every row piece of one chunk."""
    itemsize = np.dtype(DTYPE).itemsize
    for row in range(SHAPE[0]):
        for j in range(-(-SHAPE[1] // CHUNKS[1])):
            cols = slice(j * CHUNKS[1], min((j + 1) * CHUNKS[1], SHAPE[1]))
            offset = (row * SHAPE[1] + cols.start) * itemsize
            yield (row // CHUNKS[0], j), offset, (cols.stop - cols.start) * itemsize, cols


@pytest.mark.parametrize("claim", list(CLAIMS.values()), ids=list(CLAIMS))
@pytest.mark.parametrize("layout", [V0, V1], ids=lambda layout: layout.name)
def test_blosc_header_claiming_more_than_the_chunk_is_eio(
    tmp_path: Path, layout: Layout, claim: int
) -> None:
    write_root_with_good_arrays(tmp_path)
    write_array(tmp_path / "corrupt", layout, VALUES, CHUNKS)
    key = f"corrupt/{layout.chunk_key(CORRUPT_INDEX)}"
    claim_nbytes(tmp_path / key, claim)
    tree = make_tree(tmp_path)
    assert list(tree.entries(tree.root)) == [".zgroup", "corrupt", *GOOD]

    itemsize = np.dtype(DTYPE).itemsize
    row, col = CORRUPT_INDEX[0] * CHUNKS[0] + 1, CORRUPT_INDEX[1] * CHUNKS[1] + 2
    element = (row * SHAPE[1] + col) * itemsize
    for offset, size in ((element, itemsize), (0, VALUES.nbytes), (element - 3, 10)):
        with pytest.raises(ChunkError) as info:
            read(tree, "corrupt/array.raw", offset, size)
        assert info.value.errno == errno.EIO
        assert info.value.key == key

    # the other chunks of the same array, row piece by row piece, and the other arrays
    for index, offset, size, cols in row_pieces():
        if index == CORRUPT_INDEX:
            continue
        expected = VALUES[offset // itemsize // SHAPE[1], cols].tobytes()
        assert read(tree, "corrupt/array.raw", offset, size) == expected, index
    assert_good_arrays_read(tree)


# -- through a real mount ------------------------------------------------------------------

# Corrupt arrays whose chunks are whole rows of 32 KiB: each chunk has its own pages
# of array.raw, so the kernel's page-sized reads of a good chunk never touch a bad one.
GRID_SHAPE, GRID_CHUNKS = (64, 1024), (8, 1024)
GRID_VALUES = (np.arange(math.prod(GRID_SHAPE), dtype=DTYPE).reshape(GRID_SHAPE) * 3 - 5).astype(
    DTYPE
)
GRID_CHUNK_BYTES = math.prod(GRID_CHUNKS) * np.dtype(DTYPE).itemsize
CORRUPT_ROW_CHUNK = 3
MOUNT_CORRUPT = {"corrupt_v0": (V0, GRID_CHUNK_BYTES + 1), "corrupt_v1": (V1, 2**32 - 1)}
MOUNT_BAD = (
    "pre-v1-truncated-json",
    "pre-v1-missing-dtype",
    "pre-v1-chunk-zero",
    "pre-v1-nbytes-2to63",
    "v1-not-utf8",
    "v1-missing-shape",
    "v1-chunk-negative",
    "v1-unknown-compression",
)


@pytest.mark.mount
def test_mount_with_bad_arrays(tmp_path: Path) -> None:
    store = tmp_path / "store.zarr"
    write_root_with_good_arrays(store)
    for case in MOUNT_BAD:
        write_bad_array(store / case, case)
    for name, (layout, claim) in MOUNT_CORRUPT.items():
        write_array(store / name, layout, GRID_VALUES, GRID_CHUNKS)
        claim_nbytes(store / name / layout.chunk_key((CORRUPT_ROW_CHUNK, 0)), claim)

    with mounted(store, "--read-only", log_dir=tmp_path) as m:
        names = [".zarrfs", ".zgroup", *sorted(MOUNT_CORRUPT), *GOOD]
        assert sorted(os.listdir(m.path)) == names
        for case in MOUNT_BAD:
            with pytest.raises(FileNotFoundError):
                os.stat(m / case)
        expected = GRID_VALUES.tobytes()
        start = CORRUPT_ROW_CHUNK * GRID_CHUNK_BYTES
        for name in MOUNT_CORRUPT:
            raw = m / name / "array.raw"
            assert os.stat(raw).st_size == len(expected)
            for offset, length in ((start + 4100, 8), (start, GRID_CHUNK_BYTES)):
                with pytest.raises(OSError) as info:
                    read_range(raw, offset, length)
                assert info.value.errno == errno.EIO, info.value
            # right after the failure: the neighbouring chunks and the other arrays
            for chunk in (CORRUPT_ROW_CHUNK - 1, CORRUPT_ROW_CHUNK + 1, 0):
                offset = chunk * GRID_CHUNK_BYTES
                got = read_range(raw, offset, GRID_CHUNK_BYTES)
                assert got == expected[offset : offset + GRID_CHUNK_BYTES], (name, chunk)
            for good in GOOD:
                assert (m / good / "array.raw").read_bytes() == VALUES.tobytes(), good
                assert np.array_equal(np.load(m / good / "array.npy"), VALUES), good
        assert m.process.poll() is None, "the daemon keeps serving"
        log = m.log()
    for case in MOUNT_BAD:
        pattern = re.compile(rf"(?<![\w.-]){re.escape(case)}(?![\w.-])")
        lines = [line for line in log.splitlines() if pattern.search(line)]
        assert len(lines) == 1 and "WARNING" in lines[0], f"{case}:\n{log}"
    assert "Traceback" not in log
