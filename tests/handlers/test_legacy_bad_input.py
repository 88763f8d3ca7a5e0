"""Bad input in the layouts before v2: pre-v1 ``__zmeta__`` and v1 ``meta``.

Requirement: a ``__zmeta__`` or ``meta`` that is not valid JSON, misses a required
key, has a negative or zero chunk length, a shape whose byte size overflows 2**63,
or an unknown compression name hides that array with one log line and the rest of
the mount works; a blosc chunk whose header claims more bytes than the chunk size
is an EIO for that read.

Every store is written by hand under tmp_path: a v2 root group holding one good
pre-v1 array, one good v1 array and the damaged one. A damaged document is the
good document with exactly one change, so the array can only be hidden for that
change. These tests drive ``Tree`` directly; test_legacy_bad_input_mount.py (under
tests/mount/faults) checks the same through the kernel.
"""

from __future__ import annotations

import errno
import logging
import math
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import trio

from tests.support.legacy import (
    BAD,
    CASES,
    CHUNKS,
    DTYPE,
    GOOD,
    SHAPE,
    V0,
    V1,
    VALUES,
    Index,
    Layout,
    claim_nbytes,
    write_array,
    write_bad_array,
    write_root_with_good_arrays,
)
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.errors import ChunkError, NotFoundError
from zarrfs.namespace.nodes import DirNode, FileNode
from zarrfs.namespace.tree import Tree
from zarrfs.stores.directory import DirectoryStore


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
        shown = [".zgroup", *GOOD, "group.nc"]
        assert list(tree.entries(tree.root)) == shown
        with pytest.raises(NotFoundError):
            tree.resolve(BAD)
        with pytest.raises(NotFoundError):
            tree.resolve(f"{BAD}/array.raw")
        assert list(tree.entries(tree.root)) == shown  # listed again: no new line
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
    assert list(tree.entries(tree.root)) == [*names, "group.nc"]
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
    assert list(tree.entries(tree.root)) == [".zgroup", "corrupt", *GOOD, "group.nc"]

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
