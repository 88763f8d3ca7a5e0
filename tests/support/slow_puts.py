"""A remote store stand-in whose every PUT takes ``latency`` seconds: a directory
store that says it is remote, counts the PUTs in flight (the most at once, and per
key) and fails the PUTs of chosen keys; with an array and its write-back over it,
for tests of how write-back sends PUTs. No mount."""

from __future__ import annotations

import errno
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from tests.support.stores import zlib_array
from zarrfs.core.arrays import ArrayState
from zarrfs.core.pool import WorkerPool
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.write.documents import Documents
from zarrfs.core.write.writeback import WriteBack
from zarrfs.errors import StoreError
from zarrfs.formats.metadata.v2 import parse_array
from zarrfs.formats.metadata.v3 import parse_node
from zarrfs.formats.model import ArrayMeta
from zarrfs.stores.directory import DirectoryStore


class SlowPutStore(DirectoryStore):
    """Each value put in place (``commit``, ``set``) takes ``latency`` seconds, and
    one whose key is in ``failing`` fails with EIO after it, the old value kept.
    ``events`` records ("put", key) and ("set", key) as each ends, in order."""

    remote = True

    def __init__(self, root: str, latency: float) -> None:
        super().__init__(root)
        self.latency = latency
        self.failing: set[str] = set()
        self.events: list[tuple[str, str]] = []
        self.puts: Counter[str] = Counter()  # PUTs answered, per key
        self.in_flight = 0
        self.most_in_flight = 0
        self.per_key: Counter[str] = Counter()
        self.most_per_key = 0
        self._lock = threading.Lock()

    def _begin(self, keys: list[str]) -> None:
        with self._lock:
            self.in_flight += len(keys)
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            for key in keys:
                self.per_key[key] += 1
                self.most_per_key = max(self.most_per_key, self.per_key[key])

    def _end(self, keys: list[str], what: str) -> None:
        with self._lock:
            self.in_flight -= len(keys)
            for key in keys:
                self.per_key[key] -= 1
                self.events.append((what, key))

    def commit(self, staged: list[Any]) -> None:
        """One PUT after the other, as S3's commit: at the first failure the rest
        are not put."""
        for done, item in enumerate(staged):
            self._begin([item.key])
            try:
                time.sleep(self.latency)
                if item.key in self.failing:
                    for left in staged[done:]:
                        Path(left.temp).unlink()
                    raise StoreError(f"writing {item.key}: HTTP 500", errno.EIO)
                DirectoryStore.commit(self, [item])
                with self._lock:
                    self.puts[item.key] += 1
            finally:
                self._end([item.key], "put")

    def set(self, key: str, value: bytes, *, durable: bool = True) -> None:
        self._begin([key])
        try:
            time.sleep(self.latency)
            if key in self.failing:
                raise StoreError(f"writing {key}: HTTP 500", errno.EIO)
            # Not through ``commit``: that would count it as a second value.
            DirectoryStore.commit(self, [self.stage(key, value)])
            if durable:
                self.sync([key])
        finally:
            self._end([key], "set")

    def delete(self, key: str, *, durable: bool = True) -> None:
        self._begin([key])
        try:
            time.sleep(self.latency)
            if key in self.failing:
                raise StoreError(f"deleting {key}: HTTP 500", errno.EIO)
            super().delete(key, durable=durable)
        finally:
            self._end([key], "delete")


def v2_array(
    root: Path, rows: int, columns: int, chunk_rows: int, latency: float, threads: int
) -> tuple[ArrayState, WriteBack, SlowPutStore, np.ndarray]:
    """A v2 float32 array (zlib, chunks of ``chunk_rows`` whole rows) over a
    ``SlowPutStore``, with write-back putting at most ``threads`` values at once."""
    data = zlib_array(root, rows, columns, chunk_rows)
    store = SlowPutStore(str(root), latency)
    writeback = _writeback(store, threads)
    return open_v2(store, writeback, ""), writeback, store, data


def open_v2(store: SlowPutStore, writeback: WriteBack, path: str) -> ArrayState:
    """The state of the v2 array at ``path`` of ``store``, flushed by ``writeback``."""
    zarray = (Path(store.root) / path / ".zarray").read_bytes()
    meta = parse_array(path, zarray, None)
    return ArrayState(meta, Documents({".zarray": zarray}), writeback.cache, writeback)


def v3_array(
    root: Path, latency: float, threads: int
) -> tuple[ArrayState, WriteBack, SlowPutStore]:
    """The v3 array in ``root`` (made by the caller) over a ``SlowPutStore``."""
    store = SlowPutStore(str(root), latency)
    document = (root / "zarr.json").read_bytes()
    meta = parse_node("", document)
    assert isinstance(meta, ArrayMeta)
    writeback = _writeback(store, threads)
    state = ArrayState(meta, Documents({"zarr.json": document}), writeback.cache, writeback)
    return state, writeback, store


def _writeback(store: SlowPutStore, threads: int) -> WriteBack:
    """Write-back over ``store``, putting at most ``threads`` values at once."""
    writeback = WriteBack(store, ChunkCache(store, 1 << 22), budget=1 << 30, interval=3600)
    writeback.storing.put_pool = WorkerPool(threads, "test-put")
    return writeback


def slow_store(root: Path, latency: float, threads: int) -> tuple[SlowPutStore, WriteBack]:
    """A ``SlowPutStore`` of ``root`` and write-back over it; arrays by ``open_v2``."""
    store = SlowPutStore(str(root), latency)
    return store, _writeback(store, threads)
