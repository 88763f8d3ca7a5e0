"""Decoded-chunk cache: store reads and decoding in worker threads, LRU bounded in bytes.

Concurrency rules (see docs/concurrency.md): every attribute here is touched only
from the trio thread; worker threads run ``_load`` and see nothing but the store
and the immutable ``ArrayMeta``. Between two awaits the cache is consistent, so a
lookup followed by an insert cannot interleave with another task's. One load per
chunk is in flight at a time (single-flight): later requesters wait for it.
"""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import trio

from zarrfs.core.layout import Index
from zarrfs.errors import ChunkError, ZarrfsError
from zarrfs.formats.model import ArrayMeta
from zarrfs.stores.base import Store

log = logging.getLogger(__name__)

# A chunk that failed to decode is not retried (nor logged again) for this long;
# after that a read tries again, in case the store was repaired.
FAILURE_TTL = 30.0

# A missing chunk is remembered too, at a nominal cost, so a sparse array is not
# re-probed on every read.
_MISSING_COST = 64

ChunkKey = tuple[str, Index]
_ABSENT = object()


@dataclass
class _Flight:
    done: trio.Event = field(default_factory=trio.Event)
    value: np.ndarray | None = None
    error: BaseException | None = None


class ChunkCache:
    def __init__(self, store: Store, max_bytes: int, threads: int | None = None) -> None:
        self.store = store
        self.max_bytes = max_bytes
        self._entries: OrderedDict[ChunkKey, np.ndarray | None] = OrderedDict()
        self._bytes = 0
        self._flights: dict[ChunkKey, _Flight] = {}
        self._failures: dict[ChunkKey, tuple[float, ChunkError]] = {}
        self._limiter = trio.CapacityLimiter(threads or max(2, os.cpu_count() or 2))
        self.loads = 0  # store reads + decodes performed; tests count them

    @property
    def nbytes(self) -> int:
        return self._bytes

    async def get(self, meta: ArrayMeta, index: Index) -> np.ndarray | None:
        """The decoded chunk (read-only, chunk shape), or ``None`` if it is not stored."""
        key = (meta.path, index)
        while True:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]
            failure = self._failures.get(key)
            if failure is not None:
                if time.monotonic() < failure[0]:
                    raise failure[1]
                del self._failures[key]
            flight = self._flights.get(key)
            if flight is None:
                return await self._load_once(meta, index, key)
            await flight.done.wait()
            if flight.error is None:
                return flight.value
            if not isinstance(flight.error, trio.Cancelled):
                raise flight.error
            # the loading task was cancelled, not failed: try again ourselves

    async def _load_once(self, meta: ArrayMeta, index: Index, key: ChunkKey) -> np.ndarray | None:
        flight = _Flight()
        self._flights[key] = flight
        self.loads += 1
        try:
            value = await trio.to_thread.run_sync(self._load, meta, index, limiter=self._limiter)
            flight.value = value
            self._insert(key, value)
            return value
        except ChunkError as e:
            log.error("%s", e)
            e.logged = True
            self._failures[key] = (time.monotonic() + FAILURE_TTL, e)
            flight.error = e
            raise
        except BaseException as e:
            flight.error = e
            raise
        finally:
            del self._flights[key]
            flight.done.set()

    def _load(self, meta: ArrayMeta, index: Index) -> np.ndarray | None:
        """Worker thread: fetch and decode one chunk."""
        keys = meta.chunk_keys(index)
        for key in keys:
            data = self.store.get(key)
            if data is not None:
                break
        else:
            return None
        try:
            arr = meta.codecs.decode(data, meta.dtype, meta.chunks, meta.order)
        except ZarrfsError:
            raise
        except Exception as e:
            raise ChunkError(meta.display_name, key, f"{type(e).__name__}: {e}") from e
        arr.flags.writeable = False
        return arr

    def _insert(self, key: ChunkKey, value: np.ndarray | None) -> None:
        cost = _MISSING_COST if value is None else value.nbytes
        if cost > self.max_bytes:
            return
        self._entries[key] = value
        self._bytes += cost
        while self._bytes > self.max_bytes:
            _, old = self._entries.popitem(last=False)
            self._bytes -= _MISSING_COST if old is None else old.nbytes

    def forget(self, path: str, index: Index) -> None:
        """Drop one chunk (a write is about to supersede it)."""
        key = (path, index)
        self._failures.pop(key, None)
        old = self._entries.pop(key, _ABSENT)
        if old is not _ABSENT:
            self._bytes -= _MISSING_COST if old is None else old.nbytes

    def put(self, path: str, index: Index, value: np.ndarray | None) -> None:
        """Remember a chunk as it was just stored (``None``: deleted, reads as fill)."""
        self.forget(path, index)
        self._insert((path, index), value)

    def invalidate(self, path: str) -> None:
        """Forget every cached chunk (and remembered failure) of the array at ``path``."""
        for key in [k for k in self._failures if k[0] == path]:
            del self._failures[key]
        for key in [k for k in self._entries if k[0] == path]:
            old = self._entries.pop(key)
            self._bytes -= _MISSING_COST if old is None else old.nbytes


def parse_size(text: str) -> int:
    """'512M', '1G', '4096' → bytes (binary units, as rclone and s3ql take them)."""
    units = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    s = text.strip().upper().removesuffix("B").removesuffix("I")
    num, unit = (s[:-1], s[-1]) if s and s[-1] in units else (s, "")
    try:
        value = float(num)
        if not 0 <= value < 2**63:
            raise ValueError
        return int(value * units[unit])
    except (ValueError, OverflowError):
        raise ValueError(f"invalid size {text!r}") from None
