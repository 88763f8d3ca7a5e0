"""Store wrappers for tests."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from zarrfs.stores.base import Fetched, Listing, Version
from zarrfs.stores.directory import DirectoryStore


class CountingStore(DirectoryStore):
    """A directory store that counts reads per key (as zarr-python's test_accessed_chunks)
    and listings per prefix.

    ``gets`` counts whole-value reads only (each taking ``delay`` seconds more, if
    given); ``range_calls`` counts get_range and get_ranges calls per key, and
    ``ranges`` records every range they asked for, as (key, start, length) in order, so
    a test can prove that a shard was read as its index and one chunk's bytes and never
    whole. ``sizes`` counts size calls."""

    def __init__(self, root: str, delay: float = 0.0) -> None:
        super().__init__(root)
        self.delay = delay
        self._lock = threading.Lock()  # worker threads read at once
        self.gets: Counter[str] = Counter()
        self.lists: Counter[str] = Counter()
        self.range_calls: Counter[str] = Counter()
        self.ranges: list[tuple[str, int, int]] = []
        self.sizes: Counter[str] = Counter()

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        self.range_calls[key] += 1
        self.ranges.append((key, start, length))
        return super().get_range(key, start, length)

    def get_ranges(self, key: str, ranges: list[tuple[int, int]]) -> list[bytes] | None:
        self.range_calls[key] += 1
        self.ranges.extend((key, start, length) for start, length in ranges)
        return super().get_ranges(key, ranges)

    def size(self, key: str) -> int | None:
        self.sizes[key] += 1
        return super().size(key)

    def list_dir(self, prefix: str) -> Listing:
        self.lists[prefix] += 1
        return super().list_dir(prefix)

    def get(self, key: str, *, limit: int | None = None) -> bytes | None:
        with self._lock:
            self.gets[key] += 1
        if self.delay:
            time.sleep(self.delay)
        return super().get(key, limit=limit)

    def fetch(
        self, key: str, *, limit: int | None = None, unless: Version | None = None
    ) -> Fetched | None:
        """Counted as a whole-value read (``gets``): one read of the value."""
        with self._lock:
            self.gets[key] += 1
        if self.delay:
            time.sleep(self.delay)
        return super().fetch(key, limit=limit, unless=unless)


def zlib_array(root: Path, rows: int, columns: int, chunk_rows: int) -> np.ndarray:
    """A v2 float32 array ``arange`` in row-spanning chunks (zlib-1), written by
    zarr-python; returns its data."""
    data = np.arange(rows * columns, dtype="<f4").reshape(rows, columns)
    z = zarr.create_array(
        store=str(root),
        shape=data.shape,
        chunks=(chunk_rows, columns),
        dtype="<f4",
        zarr_format=2,
        compressors=[{"id": "zlib", "level": 1}],
    )
    z[...] = data
    return data


PLAIN_BYTES = 60 * 40 * 4  # array.raw of plain_and_sharded's "plain"


def plain_and_sharded(store: Any, *, consolidate: bool = False) -> dict[str, np.ndarray]:
    """A zarr-python 3 group in ``store`` (a path or a zarr store) holding ``plain``
    (60x40 float32 in chunks of 16 rows) and ``sharded`` (64x48 int32, shards of 32x24
    holding chunks of 8x12); returns their data."""
    arrays = {
        "plain": np.arange(60 * 40, dtype="<f4").reshape(60, 40),
        "sharded": np.arange(64 * 48, dtype="<i4").reshape(64, 48),
    }
    if isinstance(store, Path):
        store = str(store)
    group = zarr.open_group(store, mode="w")
    group.create_array("plain", shape=(60, 40), chunks=(16, 40), dtype="<f4")[...] = arrays["plain"]
    group.create_array("sharded", shape=(64, 48), chunks=(8, 12), shards=(32, 24), dtype="<i4")[
        ...
    ] = arrays["sharded"]
    if consolidate:
        zarr.consolidate_metadata(store)
    return arrays


def v2_zarray(shape: list[int], chunks: list[int], dtype: object = "<i4", **extra: object) -> dict:
    """A .zarray document: uncompressed, fill 0, order C, plus ``extra`` keys."""
    return {
        "zarr_format": 2,
        "shape": shape,
        "chunks": chunks,
        "dtype": dtype,
        "compressor": None,
        "fill_value": 0,
        "order": "C",
        "filters": None,
        **extra,
    }


PROMPT = 5.0  # seconds a refusal may take at most (a regression would block forever)


def run_promptly(function: Callable[[], Any]) -> Any:
    """``function()``'s result or exception; fails (not hangs) if it blocks longer
    than PROMPT seconds (a FIFO opened without O_NONBLOCK waits for a writer)."""
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append(function())
        except BaseException as e:
            outcome.append(e)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(PROMPT)
    assert not thread.is_alive(), f"blocked for more than {PROMPT}s"
    return outcome[0]
