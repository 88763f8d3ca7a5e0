"""Invalidation of the kernel's page cache, with the handlers called directly.

A read that fills pages of ``array.raw`` may have fetched the old bytes before a write
lands and answer after it. The kernel holds those pages locked until the answer, and
the write's invalidation waits for them, so they are dropped, but only if the write
knows that a read is under way at all.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pyfuse3
import pytest
import trio
import zarr

from tests.support.stores import zlib_array
from zarrfs.daemon.build import MountOptions, build_operations
from zarrfs.fuse import kernel
from zarrfs.fuse.operations import Operations
from zarrfs.stores.directory import DirectoryStore

ROWS, COLUMNS, CHUNK_ROWS = 8, 16, 4
CHUNK = CHUNK_ROWS * COLUMNS * 4


def lookup(ops: Operations, *names: str) -> int:
    inode = pyfuse3.ROOT_INODE
    for name in names:
        inode = trio.run(ops.lookup, inode, name.encode()).st_ino
    return inode


def test_a_write_during_a_read_invalidates_the_pages_that_read_fills(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    zarr.open_group(str(tmp_path), mode="w", zarr_format=2)
    zlib_array(tmp_path / "arr", ROWS, COLUMNS, CHUNK_ROWS)
    loading, release = threading.Event(), threading.Event()
    real_get = DirectoryStore.get

    def slow_get(self: DirectoryStore, key: str, *, limit: int | None = None) -> bytes | None:
        if key == "arr/0.0":  # the read's chunk load waits for the write
            loading.set()
            release.wait(10)
        return real_get(self, key, limit=limit)

    invalidated: list[int] = []
    monkeypatch.setattr(DirectoryStore, "get", slow_get)
    monkeypatch.setattr(kernel, "invalidate", lambda i, _: invalidated.append(i))
    ops = build_operations(str(tmp_path), MountOptions())
    ops.mounted = True
    raw = lookup(ops, "arr", "array.raw")
    new = np.full(CHUNK // 4, -1.0, "<f4").tobytes()

    async def main() -> None:
        reader = await ops.open(raw, os.O_RDONLY)
        writer = await ops.open(raw, os.O_WRONLY)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ops.read, reader.fh, 0, CHUNK)
            await trio.to_thread.run_sync(loading.wait, 10)
            assert loading.is_set()
            await ops.write(writer.fh, 0, new)  # a whole chunk: no load of its own
            release.set()
        await ops.release(reader.fh)
        await ops.release(writer.fh)

    trio.run(main)
    assert raw in invalidated, "the pages the read filled may hold the old bytes"
