"""Reads from a remote store (one that waits on a network for every request):
fetches run in a pool of their own, many at once, so a sequential reader's
read-ahead hides the latency; decoding stays on the decode workers. Without a
server: a directory store that says it is remote and waits 20 ms a request."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import trio

from tests.support.stores import zlib_array
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.fuse.operations import OpenFile, Operations
from zarrfs.namespace.nodes import FileNode
from zarrfs.namespace.tree import Tree
from zarrfs.stores.directory import DirectoryStore

ROWS, COLUMNS, CHUNK_ROWS = 512, 1024, 8  # 64 chunks of 32 KiB
LATENCY = 0.02


class SlowRemoteStore(DirectoryStore):
    remote = True

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0
        self.threads: set[str] = set()
        self.latency = LATENCY

    def get(self, key: str, *, limit: int | None = None) -> bytes | None:
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self.threads.add(threading.current_thread().name)
        try:
            time.sleep(self.latency)
            return super().get(key, limit=limit)
        finally:
            with self.lock:
                self.in_flight -= 1


def read_all(root: Path, store: DirectoryStore) -> tuple[bytes, float]:
    cache = ChunkCache(store, 1 << 28)
    cache.read_ahead = True
    ops = Operations(Tree(store, cache), cache.counters, read_only=True)
    node = ops.tree.resolve("array.raw")
    assert isinstance(node, FileNode)
    fh = ops.files.add(OpenFile(node, 1))
    size = node.view.size

    async def main() -> tuple[bytes, float]:
        started = time.perf_counter()
        out = bytearray()
        for offset in range(0, size, 128 << 10):
            out += bytes(await ops.read(fh, offset, 128 << 10))
        return bytes(out), time.perf_counter() - started

    return trio.run(main)


def test_fetches_overlap_and_hide_the_latency(tmp_path: Path) -> None:
    data = zlib_array(tmp_path, ROWS, COLUMNS, CHUNK_ROWS)
    store = SlowRemoteStore(str(tmp_path))
    got, _ = read_all(tmp_path, store)
    assert got == data.tobytes()
    # Many requests in flight at once (the speed itself is measured by bench/):
    # with the decode workers alone, at most two.
    assert store.most_in_flight >= 8, store.most_in_flight
    assert any(name.startswith("zarrfs-fetch") for name in store.threads), store.threads


def test_a_local_store_fetches_on_the_decode_workers(tmp_path: Path) -> None:
    data = zlib_array(tmp_path, 64, 256, 4)
    store = SlowRemoteStore(str(tmp_path))
    store.remote = False  # type: ignore[misc]
    store.latency = 0
    got, _ = read_all(tmp_path, store)
    assert got == data.tobytes()
    assert not any(name.startswith("zarrfs-fetch") for name in store.threads)
    assert np.frombuffer(got, "<f4")[-1] == data.reshape(-1)[-1]
