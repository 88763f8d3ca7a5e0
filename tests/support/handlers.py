"""Driving the FUSE handlers (zarrfs.fuse.operations.Operations) as the kernel would,
without a mount: lookups by path, opening and closing handles, expecting a FUSE errno."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyfuse3
import pytest
import trio

from tests.support.stores import CountingStore
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.write.writeback import WriteBack
from zarrfs.fuse.operations import OpenFile, Operations
from zarrfs.namespace.nodes import DirNode, FileNode
from zarrfs.namespace.tree import Tree

ROOT = pyfuse3.ROOT_INODE


def run(fn: Any, *args: Any) -> Any:
    return trio.run(fn, *args)


def dir_handle(opened: int | pyfuse3.FileInfo) -> int:
    """The handle number in what ``opendir`` returned (a FileInfo where the kernel
    may keep the listing)."""
    return opened.fh if isinstance(opened, pyfuse3.FileInfo) else opened


async def open_dir(ops: Operations, inode: int) -> int:
    return dir_handle(await ops.opendir(inode, None))


def lookup_path(ops: Operations, path: str) -> pyfuse3.EntryAttributes:
    inode = ROOT
    attr = None
    for part in path.split("/"):
        attr = run(ops.lookup, inode, part.encode())
        inode = attr.st_ino
    assert attr is not None
    return attr


def fuse_errno(fn: Any, *args: Any) -> int:
    with pytest.raises(pyfuse3.FUSEError) as info:
        run(fn, *args)
    return info.value.errno


def open_file(ops: Operations, path: str, flags: int = os.O_RDWR) -> int:
    return run(ops.open, lookup_path(ops, path).st_ino, flags, None).fh


def close(ops: Operations, fh: int) -> None:
    """close(): FUSE flush (which stores what the handle wrote), then release."""
    try:
        run(ops.flush, fh)
    finally:
        run(ops.release, fh)


def make_ops(root: Path, cache_bytes: int = 1 << 24) -> tuple[Operations, ChunkCache]:
    """Read-write handlers over a CountingStore of ``root``, with read-ahead on."""
    store = CountingStore(str(root))
    cache = ChunkCache(store, cache_bytes)
    cache.read_ahead = True
    writeback = WriteBack(store, cache, budget=1 << 30, interval=60)
    tree = Tree(store, cache, writeback)
    return Operations(tree, cache.counters, writeback, read_only=False), cache


def open_raw(ops: Operations) -> int:
    """A handle of the root array's array.raw, opened without the kernel."""
    node = ops.tree.resolve("array.raw")
    assert isinstance(node, FileNode)
    return ops.files.add(OpenFile(node, 99))


def walk(tree: Tree, node: DirNode) -> list[str]:
    """What `ls -R` plus `stat` of every file asks of the tree."""
    seen = []
    for name, child in tree.entries(node).items():
        path = f"{node.path}/{name}" if node.path else name
        seen.append(path)
        if isinstance(child, DirNode):
            seen.extend(walk(tree, child))
        else:
            assert isinstance(child, FileNode)
            assert child.view.size >= 0
    return seen


def read_key(ops: Operations, key: str) -> bytes:
    attr = lookup_path(ops, key)
    fh = run(ops.open, attr.st_ino, os.O_RDONLY, None).fh
    try:
        return bytes(run(ops.read, fh, 0, attr.st_size + 1))
    finally:
        run(ops.release, fh)


def lookup_errno(ops: Operations, path: str) -> int:
    with pytest.raises(pyfuse3.FUSEError) as info:
        lookup_path(ops, path)
    return info.value.errno
