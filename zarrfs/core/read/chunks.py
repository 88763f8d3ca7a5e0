"""Decoded-chunk cache: store reads and decoding in worker threads, LRU bounded in bytes.

Concurrency rules (see docs/concurrency.md): every attribute here is touched only
from the trio thread; worker threads run ``_load`` and see nothing but the store
and the immutable ``ArrayMeta``. Between two awaits the cache is consistent, so a
lookup followed by an insert cannot interleave with another task's. One load per
chunk is in flight at a time (single-flight): later requesters wait for it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType

import numpy as np
import outcome
import trio

from zarrfs.core.counters import Counters
from zarrfs.core.pool import BACKGROUND, URGENT, WorkerPool
from zarrfs.core.read.loading import Failure, Fetched, decode_fetched, drop_tracebacks, fetch_chunk
from zarrfs.core.read.shardread import Where, load_index
from zarrfs.core.read.stripes import STRIPE, Stripes
from zarrfs.errors import ChunkError, ZarrfsError
from zarrfs.formats.grid.layout import Index
from zarrfs.formats.grid.shards import ShardIndex, inner_range
from zarrfs.formats.model import ArrayMeta
from zarrfs.stores.base import Store

log = logging.getLogger(__name__)

# A chunk that failed to decode, or whose stored value may not be read, is not
# retried (nor logged again) for this long; after that a read tries again, in case
# the store was repaired.
FAILURE_TTL = 30.0

# A missing chunk is remembered too, at a nominal cost, so a sparse array is not
# re-probed on every read.
_MISSING_COST = 64

# Unreferenced decode buffers kept per size for the next loads.
MAX_SPARE_BUFFERS = 16

# Read-ahead loads queued at once: enough to keep the workers busy between requests
# (a remote store's, enough to keep requests in flight over a network's latency).
MAX_READ_AHEAD_LOADS = 8
MAX_REMOTE_READ_AHEAD_LOADS = 32

# Requests in flight to a remote store (threads that mostly wait on the network).
FETCH_THREADS = 32

ChunkKey = tuple[str, Index]
_ABSENT = object()
# A shard's index is cached beside the chunks, under its array's path with this
# prefix (no store key holds a NUL): one LRU and one budget for both.
_INDEX = "\0"


def index_key(path: str, shard: Index) -> ChunkKey:
    return (_INDEX + path, shard)


def _cost(value: np.ndarray | ShardIndex | None) -> int:
    if value is None:
        return _MISSING_COST
    if isinstance(value, ShardIndex):
        return value.entries.nbytes
    return value.nbytes


@dataclass
class _Flight:
    done: trio.Event = field(default_factory=trio.Event)
    value: np.ndarray | ShardIndex | None = None
    failure: Failure | None = None  # the chunk is bad
    error: Exception | None = None  # anything else (a store fault): not remembered
    traceback: TracebackType | None = None  # the error's, as the worker raised it
    background: bool = False  # loaded ahead of a reader
    passed: bool = False  # the stream went past it while it loaded: do not keep it
    stale: bool = False  # its shard was replaced meanwhile: whoever waits asks again


class ChunkCache:
    def __init__(self, store: Store, max_bytes: int, threads: int | None = None) -> None:
        self.store = store
        self.max_bytes = max_bytes
        self._entries: OrderedDict[ChunkKey, np.ndarray | ShardIndex | None] = OrderedDict()
        self._bytes = 0
        self._flights: dict[ChunkKey, _Flight] = {}
        self._failures: dict[ChunkKey, tuple[float, Failure]] = {}
        self.pool = WorkerPool(threads or max(2, os.cpu_count() or 2), "zarrfs-decode")
        self.fetch_pool = WorkerPool(FETCH_THREADS, "zarrfs-fetch") if store.remote else None
        self.loads = 0  # store reads + decodes performed; tests count them
        self.read_ahead = False  # the mount turns it on; handler tests choose
        self._prefetching = 0
        self.prefetches = 0  # loads started by read-ahead; tests count them
        # Decoding into fresh memory costs a page fault per 4 KiB, which on a VM
        # is ~40% of decoding: chunks decoded into buffers of ours give them back
        # when they leave the cache unreferenced, for the next decode.
        self._backing: dict[ChunkKey, np.ndarray] = {}
        self._spare: dict[int, list[np.ndarray]] = {}
        self._read_ahead_keys: set[ChunkKey] = set()  # loaded ahead, not yet read
        self.recycled = 0  # buffers reused; tests count them
        # Shards being replaced by write-back: their inner chunks wait to be read
        # until the new shard (and its index) is in place.
        self._replacing: dict[ChunkKey, trio.Event] = {}
        self.stripes = Stripes(self)
        self.counters = Counters()  # the mount's, for .zarrfs/stats

    @property
    def nbytes(self) -> int:
        return self._bytes

    async def get(
        self, meta: ArrayMeta, index: Index, *, priority: int = URGENT
    ) -> np.ndarray | None:
        """The decoded chunk (read-only, chunk shape), or ``None`` if it is not stored."""
        key = (meta.path, index)
        while True:
            if key in self._entries:
                self._entries.move_to_end(key)
                self.counters.cache_hits += 1
                return self._entries[key]  # type: ignore[return-value]
            self._check_failure(key)
            flight = self._flights.get(key)
            if flight is not None:
                break
            if meta.shards is None:
                flight = self._start(meta, index, priority)
                break
            where = await self._where(meta, index, priority)
            if key in self._entries or key in self._flights or key in self._failures:
                continue  # another reader got it while we read the index
            if where is None:  # not in the shard (or no shard): fill value
                self._insert(key, None)
                self.counters.cache_misses += 1
                return None
            flight = self._start(meta, index, priority, where)
            break
        self.counters.cache_misses += 1
        value = await self._wait(flight)
        if flight.stale:  # read from a shard that was being replaced: again
            return await self.get(meta, index, priority=priority)
        return value  # type: ignore[return-value]

    def _check_failure(self, key: ChunkKey) -> None:
        failure = self._failures.get(key)
        if failure is not None:
            if time.monotonic() < failure[0]:
                raise failure[1].error()
            del self._failures[key]

    @staticmethod
    async def _wait(flight: _Flight) -> np.ndarray | ShardIndex | None:
        await flight.done.wait()
        if flight.stale:
            return None
        if flight.failure is not None:
            raise flight.failure.error()
        if flight.error is not None:
            # from the worker's traceback each time, not one that grows per waiter
            raise flight.error.with_traceback(flight.traceback)
        return flight.value

    async def _where(self, meta: ArrayMeta, index: Index, priority: int) -> Where | None:
        """(shard key, offset, nbytes) of an inner chunk, from its shard's index
        (cached, loaded once); None when the chunk or its shard is not stored."""
        layout = meta.shards
        assert layout is not None
        shard, _, position = layout.geometry.locate(index)
        key = index_key(meta.path, shard)
        while True:
            replacing = self._replacing.get(key)
            if replacing is not None:
                await replacing.wait()
                continue
            if key in self._entries:
                self._entries.move_to_end(key)
                found = self._entries[key]
                break
            self._check_failure(key)
            flight = self._flights.get(key) or self._start_index(meta, shard, priority)
            found = await self._wait(flight)
            if not flight.stale:
                break
        if found is None:
            return None
        assert isinstance(found, ShardIndex)
        span = inner_range(found, position)
        return None if span is None else (layout.shard_keys(shard)[0], *span)

    def _start_index(self, meta: ArrayMeta, shard: Index, priority: int) -> _Flight:
        key = index_key(meta.path, shard)
        flight = _Flight(background=priority == BACKGROUND)
        self._flights[key] = flight
        finish = self._finisher(key, flight, priority, counted=False)
        pool = self.fetch_pool or self.pool
        pool.submit(self._load_index, meta, shard, priority=priority, on_done=finish)
        return flight

    def _start(
        self,
        meta: ArrayMeta,
        index: Index,
        priority: int,
        where: Where | None = None,
        *,
        prefetched: bool = False,
    ) -> _Flight:
        """Queue one load; it runs to its end even if nobody waits for it any more."""
        key = (meta.path, index)
        out = None
        if meta.codecs.decodes_into:
            spare = self._spare.get(meta.chunk_nbytes)
            out = spare.pop() if spare else None
        # Nothing between registering the flight and queueing its job may raise:
        # waiters would wait for a load that never comes.
        flight = _Flight(background=priority == BACKGROUND)
        self._flights[key] = flight
        self.loads += 1
        finish = self._finisher(key, flight, priority, counted=prefetched)
        # The buffer goes in a list that the load empties: a worker thread holds its
        # last job's arguments until it takes the next, and must not hold the buffer.
        spare = [out] if out is not None else []
        if self.fetch_pool is None:
            self.pool.submit(
                self._load, meta, index, spare, where, priority=priority, on_done=finish
            )
            return flight

        token = trio.lowlevel.current_trio_token()
        decoders = self.pool

        def fetch() -> None:  # in a fetch thread
            try:
                data = self._fetch(meta, index, where)
            except BaseException as e:  # the flight must end, whatever went wrong
                # Handed over as an outcome, as a pool hands any job's exception.
                failed = outcome.Error(e)
                del e
                with contextlib.suppress(trio.RunFinishedError):
                    token.run_sync_soon(finish, failed)
                return
            # Straight to the decoders, from this thread: the trio loop sees the
            # chunk once, decoded.
            decoders.submit_from_thread(
                token,
                self._decode_fetched,
                meta,
                index,
                data,
                spare,
                priority=priority,
                on_done=finish,
            )

        # A remote store's requests wait on the network: many at once, in a pool of
        # their own, and the decode workers take each as it arrives.
        self.fetch_pool.submit(fetch, priority=priority, on_done=_ignore)
        return flight

    def _finisher(
        self, key: ChunkKey, flight: _Flight, priority: int, *, counted: bool
    ) -> Callable[[outcome.Outcome], None]:
        """``counted``: a load prefetch() started (and counts until it ends)."""

        def finish(result: outcome.Outcome) -> None:  # in the trio thread
            if counted:
                self._prefetching -= 1
            if self._flights.get(key) is flight:
                del self._flights[key]
                current = True
            else:
                current = False  # a write superseded the chunk while it loaded
            buffer = None
            # The error is taken from the outcome, not re-raised here: a raise would
            # add this frame, which holds the outcome, to its traceback.
            error = result.error if isinstance(result, outcome.Error) else None
            if isinstance(error, ZarrfsError):
                drop_tracebacks(error)  # its message says it all
            if isinstance(error, ChunkError) and not flight.stale:
                self.counters.decode_failures += 1
                log.error("%s", str(error))  # a record keeps its args: not the exception
                flight.failure = Failure(error.array, error.key, error.reason)
                if current:
                    self._failures[key] = (time.monotonic() + FAILURE_TTL, flight.failure)
            elif isinstance(error, Exception):
                if not isinstance(error, ChunkError):  # (stale: the shard was replaced)
                    self.counters.store_failed(error)
                flight.error, flight.traceback = error, error.__traceback__
            else:
                flight.value, buffer = result.unwrap()
                if isinstance(flight.value, np.ndarray):  # a chunk (not an index), stored
                    self.counters.chunks_decoded += 1
                if current and not flight.passed:
                    self._insert(key, flight.value)
                    if buffer is not None and key in self._entries:
                        self._backing[key] = buffer
                        if priority == BACKGROUND:
                            self._read_ahead_keys.add(key)
            flight.done.set()

        return finish

    def ready(self, path: str, index: Index) -> tuple[bool, np.ndarray | None]:
        """(True, chunk) if it is cached (counts as a use), else (False, None)."""
        key = (path, index)
        if key in self._entries:
            self._entries.move_to_end(key)
            self.counters.cache_hits += 1
            return True, self._entries[key]
        return False, None

    def lookup(self, key: ChunkKey, *, touch: bool = True) -> object | None:
        """The entry cached under ``key`` (a use, unless not ``touch``), else None."""
        found = self._entries.get(key)
        if found is not None and touch:
            self._entries.move_to_end(key)
        return found

    def take_buffer(self, nbytes: int) -> np.ndarray | None:
        """A spare buffer of ``nbytes`` to assemble or decode into, if one is free."""
        spare = self._spare.get(nbytes)
        return spare.pop() if spare else None

    def keep(self, key: ChunkKey, value: np.ndarray, buffer: np.ndarray | None) -> None:
        """Cache ``value`` (living in ``buffer``, one of ours, given back when the
        entry goes unreferenced)."""
        self._drop(key)
        self._insert(key, value)
        if buffer is not None and key in self._entries:
            self._backing[key] = buffer

    def drop(self, key: ChunkKey) -> None:
        self._drop(key)

    def has(self, path: str, index: Index) -> bool:
        """Cached, being loaded, or known to fail: a read-ahead would add nothing."""
        key = (path, index)
        return key in self._entries or key in self._flights or key in self._failures

    def prefetch(self, meta: ArrayMeta, index: Index) -> bool:
        """Start loading a chunk in the background; False when there is no room now.

        At most MAX_READ_AHEAD_LOADS are queued, and a reader's own requests go
        before them. Loads start in the order asked, so the stream's next chunk first.
        """
        queued = MAX_READ_AHEAD_LOADS if self.fetch_pool is None else MAX_REMOTE_READ_AHEAD_LOADS
        if not self.read_ahead or self._prefetching >= queued:
            return False
        if self.has(meta.path, index):
            return True
        where = None
        if meta.shards is not None:
            shard, _, position = meta.shards.geometry.locate(index)
            key = index_key(meta.path, shard)
            found = self._entries.get(key, _ABSENT)
            if found is _ABSENT:
                # The chunk's place is not known yet: load the index now, the
                # chunk on a later call (the reader's next request asks again).
                if key not in self._flights and key not in self._failures:
                    self._start_index(meta, shard, BACKGROUND)
                return False
            span = None if found is None else inner_range(found, position)  # type: ignore[arg-type]
            if span is None:
                self._insert((meta.path, index), None)
                return True
            where = (meta.shards.shard_keys(shard)[0], *span)
        self._prefetching += 1
        self.prefetches += 1
        self._start(meta, index, BACKGROUND, where, prefetched=True)
        return True

    def _load_index(self, meta: ArrayMeta, shard: Index) -> tuple[ShardIndex | None, None]:
        """Worker thread: the index of one shard (None when it is not stored)."""
        return load_index(self.store, meta, shard), None

    def _load(
        self,
        meta: ArrayMeta,
        index: Index,
        spare: list[np.ndarray] | None = None,
        where: Where | None = None,
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Worker thread: fetch and decode one chunk, into the buffer in ``spare`` if
        there is one; (chunk, the buffer it lives in when that is one of ours)."""
        return self._decode_fetched(meta, index, self._fetch(meta, index, where), spare)

    def _fetch(self, meta: ArrayMeta, index: Index, where: Where | None) -> Fetched:
        """Worker thread: (key, stored bytes) of a chunk, None when not stored."""
        return fetch_chunk(self.store, meta, index, where)

    def _decode_fetched(
        self, meta: ArrayMeta, index: Index, fetched: Fetched, spare: list[np.ndarray] | None
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Worker thread: the fetched chunk decoded (into the buffer in ``spare``)."""
        return decode_fetched(meta, index, fetched, spare)

    def _insert(self, key: ChunkKey, value: np.ndarray | ShardIndex | None) -> None:
        cost = _cost(value)
        if cost > self.max_bytes:
            return
        self._entries[key] = value
        self._bytes += cost
        while self._bytes > self.max_bytes:
            old_key, old = self._entries.popitem(last=False)
            self._bytes -= _cost(old)
            del old
            self._recycle(old_key)

    def _recycle(self, key: ChunkKey) -> None:
        """The chunk at ``key`` left the cache: keep its buffer if nobody holds it.

        Every view of the chunk (a reader's slice, a chunk being assembled across an
        await, a flight's value) references the buffer, so a buffer whose only
        references are ours is free (CPython reference counts are exact).
        """
        self._read_ahead_keys.discard(key)
        if key[0][:1] == STRIPE:
            self.stripes.evicted(key)
        buffer = self._backing.pop(key, None)
        if buffer is None:
            return
        spare = self._spare.setdefault(buffer.nbytes, [])
        if sys.getrefcount(buffer) == 2 and len(spare) < MAX_SPARE_BUFFERS:
            spare.append(buffer)
            self.recycled += 1

    def release(self, meta: ArrayMeta, index: Index) -> None:
        """A streaming reader has gone past a chunk it had read ahead: the kernel's
        page cache holds those bytes now, so the decoded chunk makes room (use-once)."""
        key = (meta.path, index)
        if key in self._read_ahead_keys:
            self._drop(key)
            return
        flight = self._flights.get(key)
        if flight is not None and flight.background:
            flight.passed = True  # whoever waits for it still gets it

    def forget(self, path: str, index: Index) -> None:
        """Drop one chunk (a write is about to supersede it)."""
        key = (path, index)
        self._failures.pop(key, None)
        self._flights.pop(key, None)  # a load under way brings the old chunk: not cached
        self._drop(key)
        self.stripes.chunk_changed(path, index)

    def _drop(self, key: ChunkKey) -> None:
        old = self._entries.pop(key, _ABSENT)
        if old is not _ABSENT:
            self._bytes -= _cost(old)  # type: ignore[arg-type]
            del old
            self._recycle(key)

    def put(self, path: str, index: Index, value: np.ndarray | None) -> None:
        """Remember a chunk as it was just stored (``None``: deleted, reads as fill)."""
        self.forget(path, index)
        self._insert((path, index), value)

    def begin_replace(self, meta: ArrayMeta, shard: Index) -> None:
        """Write-back is about to replace a shard: reads of its inner chunks wait
        until ``end_replace``, and loads under way (which may read the new shard at
        the old index's offsets) are asked again by whoever waits for them."""
        assert meta.shards is not None
        key = index_key(meta.path, shard)
        self._replacing.setdefault(key, trio.Event())
        locate = meta.shards.geometry.locate
        for flight_key, flight in list(self._flights.items()):
            if flight_key == key or (
                flight_key[0] == meta.path and _in_shard(locate, flight_key[1], shard)
            ):
                flight.stale = True
                del self._flights[flight_key]
        self._failures.pop(key, None)
        self._drop(key)

    def end_replace(self, path: str, shard: Index, stored: ShardIndex | object | None) -> None:
        """The shard is replaced: its index as stored (None: deleted; anything else:
        unknown, read again when needed)."""
        key = index_key(path, shard)
        self._drop(key)
        if stored is None or isinstance(stored, ShardIndex):
            self._insert(key, stored)
        replacing = self._replacing.pop(key, None)
        if replacing is not None:
            replacing.set()

    def invalidate(self, path: str) -> None:
        """Forget every cached chunk and shard index (and remembered failure) of the
        array at ``path``."""
        paths = (path, _INDEX + path)
        for key in [k for k in self._failures if k[0] in paths]:
            del self._failures[key]
        for key in [k for k in self._flights if k[0] in paths]:
            del self._flights[key]
        for key in [k for k in self._entries if k[0] in paths]:
            self._drop(key)
        self.stripes.drop_array(path)


def _ignore(result: outcome.Outcome) -> None:
    """The end of a job that hands its result on by itself."""


def _in_shard(
    locate: Callable[[Index], tuple[Index, Index, int]], index: Index, shard: Index
) -> bool:
    try:
        return locate(index)[0] == shard
    except IndexError:  # outside the grid (a resize since): not of this shard
        return False
