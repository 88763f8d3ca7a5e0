"""What the FUSE layer is given and asks: the mount's counters and write-back,
passed where the mount is built, and what each view declares (views/base.py)."""

from __future__ import annotations

import errno
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyfuse3
import pytest
import trio
import zarr

from zarrfs.core.counters import Counters
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.write.writeback import WriteBack
from zarrfs.daemon.build import MountOptions, build_operations
from zarrfs.fuse.operations import Operations
from zarrfs.namespace.nodes import FileNode
from zarrfs.namespace.tree import Tree
from zarrfs.stores.directory import DirectoryStore
from zarrfs.views.base import ArrayView, View
from zarrfs.views.xattrs import array_xattrs

ARRAY = "foo/bar"  # of the example store: (100, 60) float32 in (32, 32) chunks
ARRAY_BYTES = 100 * 60 * 4


def call(fn: Any, *args: Any) -> Any:
    return trio.run(fn, *args)


def inode_of(ops: Operations, path: str) -> int:
    inode = pyfuse3.ROOT_INODE
    for part in path.split("/"):
        inode = call(ops.lookup, inode, part.encode()).st_ino
    return inode


def file_view(ops: Operations, path: str) -> View:
    node = ops.tree.resolve(path)
    assert isinstance(node, FileNode)
    return node.view


def read_through(ops: Operations, path: str) -> bytes:
    fh = call(ops.open, inode_of(ops, path), os.O_RDONLY, None).fh
    try:
        return bytes(call(ops.read, fh, 0, 1 << 20))
    finally:
        call(ops.release, fh)


@pytest.fixture
def writable_store(example_store: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "example.zarr"
    shutil.copytree(example_store, copy)
    return copy


def test_operations_count_on_the_counters_they_are_given(example_store: Path) -> None:
    store = DirectoryStore(str(example_store))
    cache = ChunkCache(store, 1 << 24)
    counters = Counters()  # not the cache's: the handlers count on what they are given
    ops = Operations(Tree(store, cache), counters)
    assert len(read_through(ops, f"{ARRAY}/array.raw")) == ARRAY_BYTES
    assert read_through(ops, f"{ARRAY}/.zarray")  # a document: no array bytes
    assert counters.bytes_read == ARRAY_BYTES and cache.counters.bytes_read == 0
    with pytest.raises(pyfuse3.FUSEError):
        call(ops.lookup, pyfuse3.ROOT_INODE, b"absent")  # the caller's: not counted
    assert counters.errors == 0
    with pytest.raises(pyfuse3.FUSEError) as refused:
        call(ops.getattr, 1 << 40)  # no such inode: ENOENT, the caller's too
    assert refused.value.errno == errno.ENOENT and counters.errors == 0


def test_without_a_write_back_the_handlers_are_read_only(example_store: Path) -> None:
    store = DirectoryStore(str(example_store))
    cache = ChunkCache(store, 1 << 20)
    ops = Operations(Tree(store, cache), Counters(), read_only=False)
    assert ops.read_only and ops.writeback is None
    inode = inode_of(ops, f"{ARRAY}/array.raw")
    with pytest.raises(pyfuse3.FUSEError) as refused:
        call(ops.open, inode, os.O_WRONLY, None)
    assert refused.value.errno == errno.EROFS


def test_the_build_hands_one_write_back_to_tree_operations_and_views(
    writable_store: Path,
) -> None:
    ops = build_operations(str(writable_store), MountOptions(flush_interval=3600))
    assert isinstance(ops.writeback, WriteBack) and ops.tree.writeback is ops.writeback
    for name in ("array.raw", "array.npy"):
        view = file_view(ops, f"{ARRAY}/{name}")
        assert isinstance(view, ArrayView) and view.writeback is ops.writeback
    read_only = build_operations(str(writable_store), MountOptions(read_only=True))
    assert read_only.writeback is None
    view = file_view(read_only, f"{ARRAY}/array.raw")
    assert isinstance(view, ArrayView) and view.writeback is None


def test_views_declare_what_the_fuse_layer_asks(example_store: Path) -> None:
    ops = build_operations(str(example_store), MountOptions(read_only=True))
    raw = file_view(ops, f"{ARRAY}/array.raw")
    npy = file_view(ops, f"{ARRAY}/array.npy")
    header = file_view(ops, f"{ARRAY}/array.hdr")
    document = file_view(ops, f"{ARRAY}/.zarray")
    info = file_view(ops, f"{ARRAY}/info")
    assert isinstance(raw, ArrayView)
    meta = raw.state.meta
    assert raw.reads_counted and npy.reads_counted
    assert not (header.reads_counted or document.reads_counted or info.reads_counted)
    assert document.document and not (raw.document or header.document or info.document)
    # An array's files carry the array's attributes; documents and info none.
    for view in (raw, npy, header):
        assert view.xattrs() == array_xattrs(meta)
    assert document.xattrs() == {} and info.xattrs() == {}
    assert raw.unstored() is None and document.unstored() is None
    raw_inode = inode_of(ops, f"{ARRAY}/array.raw")
    names = call(ops.listxattr, raw_inode, None)
    assert {os.fsdecode(n) for n in names} == set(array_xattrs(meta))


def test_fsync_stores_what_the_array_view_holds(writable_store: Path) -> None:
    ops = build_operations(str(writable_store), MountOptions(flush_interval=3600))
    fh = call(ops.open, inode_of(ops, f"{ARRAY}/array.raw"), os.O_RDWR, None).fh
    try:
        row = np.full(60, 7.5, dtype="<f4").tobytes()
        assert call(ops.write, fh, 0, row) == len(row)
        assert ops.writeback is not None and ops.writeback.dirty_bytes > 0
        call(ops.fsync, fh, False)
        assert ops.writeback.dirty_bytes == 0
    finally:
        call(ops.release, fh)
    stored = zarr.open_array(str(writable_store / ARRAY), mode="r")[0]
    assert (stored == 7.5).all()


def test_close_logs_the_partial_row_it_leaves(
    writable_store: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ops = build_operations(str(writable_store), MountOptions(flush_interval=3600))
    fh = call(ops.open, inode_of(ops, f"{ARRAY}/array.raw"), os.O_WRONLY, None).fh
    try:
        call(ops.write, fh, ARRAY_BYTES, b"\x01\x02\x03")  # past the end: a partial row
        view = file_view(ops, f"{ARRAY}/array.raw")
        assert view.unstored() == f"{ARRAY}: 3 bytes of an incomplete row"
        with caplog.at_level(logging.WARNING), pytest.raises(pyfuse3.FUSEError) as failed:
            call(ops.flush, fh)
    finally:
        call(ops.release, fh)
    assert failed.value.errno == errno.EINVAL
    lines = [r.getMessage() for r in caplog.records if "pending after close" in r.getMessage()]
    assert lines == [
        f"{ARRAY}: 3 bytes of an incomplete row are pending after close; complete the "
        "row, or they are dropped at unmount"
    ]
