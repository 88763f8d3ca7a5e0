"""The decoded-chunk cache: what the read path asks for chunks, and what writes tell it.

``ChunkCache`` composes the parts of the read path and adds the policy between
them: a chunk is answered from the LRU (core/read/lru.py), else from the load in
flight or a new one (core/read/flights.py), an inner chunk of a shard once its
shard's index says where it is (core/read/indexes.py); read-ahead loads a few
chunks at background priority, and a stream gives back what it has read past.
Writes reach every part through ``forget``, ``put``, ``invalidate`` and the
shard-replace calls.

Concurrency rules (see docs/concurrency.md): every attribute here is touched only
from the trio thread; worker threads see nothing but the store and the immutable
``ArrayMeta``. Between two awaits the cache is consistent, so a lookup followed by
an insert cannot interleave with another task's.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from zarrfs.core.counters import Counters
from zarrfs.core.pool import BACKGROUND, FETCH_THREADS, URGENT, LoadPools
from zarrfs.core.read.buffers import MAX_SPARE_BYTES, SpareBuffers
from zarrfs.core.read.byteorder import big_endian, twin_path
from zarrfs.core.read.flights import Loads, Sink
from zarrfs.core.read.indexes import ShardIndexes
from zarrfs.core.read.lru import CacheKey, ChunkKey, DecodedLru, Entry, ShardIndexKey, StripeKey
from zarrfs.core.read.stripes import Stripes
from zarrfs.formats.codecs.pipeline import size_bound
from zarrfs.formats.grid.layout import Index
from zarrfs.formats.grid.runs import coalesce
from zarrfs.formats.grid.shards import ShardIndex
from zarrfs.formats.model import ArrayMeta
from zarrfs.stores.base import Store

# Read-ahead loads queued at once: enough to keep the workers busy between requests
# (a remote store's, enough to keep requests in flight over a network's latency).
MAX_READ_AHEAD_LOADS = 8
MAX_REMOTE_READ_AHEAD_LOADS = FETCH_THREADS
# Inner chunks of a shard that lie together are fetched with one request of at most
# this many bytes (formats/grid/runs.py), from remote stores: a request costs a round
# trip, and several runs of a shard still arrive over several connections at once.
MAX_RUN_BYTES = 4 * 2**20
MAX_RUN_GAP = 64 * 2**10


class ChunkCache:
    """Owns the LRU, the spare buffers, the loads, the shard indexes and the stripes
    of one mount; the pools and the counters are given (or made here)."""

    def __init__(
        self,
        store: Store,
        max_bytes: int,
        threads: int | None = None,
        *,
        pools: LoadPools | None = None,
        counters: Counters | None = None,
    ) -> None:
        self.counters = Counters() if counters is None else counters  # for .zarrfs/stats
        pools = LoadPools.create(remote=store.remote, threads=threads) if pools is None else pools
        self.pool = pools.decoders
        self.fetch_pool = pools.fetchers
        self.lru = DecodedLru(max_bytes, self._left)
        # Spare buffers: up to a quarter of the cache (a stream's stripes ahead and
        # their chunks are in flight at once: docs/benchmarks.md, network).
        self.buffers = SpareBuffers(self.counters, max(MAX_SPARE_BYTES, max_bytes // 4))
        self.loader = Loads(store, pools, self.buffers, self.counters, self._loaded)
        self.indexes = ShardIndexes(self.lru, self.loader)
        self.stripes = Stripes(self, self.lru, self.buffers, self.pool, self.counters)
        self.read_ahead = False  # the mount turns it on; handler tests choose
        self._read_ahead: set[CacheKey] = set()  # loaded ahead, not yet given back
        self._twinned: set[str] = set()  # arrays whose big-endian twin is read

    def twin(self, meta: ArrayMeta) -> ArrayMeta:
        """The big-endian twin of ``meta`` (core/read/byteorder.py), which from now
        on is told of every change to the array."""
        self._twinned.add(meta.path)
        return big_endian(meta)

    def network_bound(self) -> bool:
        """Loads wait on a network now: a remote store's, unless local copies (a disk
        cache's files) answer its reads at the moment."""
        return self.fetch_pool is not None and not self.loader.store.serves_locally()

    @property
    def max_bytes(self) -> int:
        return self.lru.max_bytes

    @property
    def nbytes(self) -> int:
        return self.lru.nbytes

    async def get(
        self, meta: ArrayMeta, index: Index, *, priority: int = URGENT, sink: Sink | None = None
    ) -> np.ndarray | None:
        """The decoded chunk (read-only, chunk shape), or ``None`` if it is not stored.

        ``sink``: if a load starts here, its worker gives it the chunk as decoded
        (a chunk cached, in flight or not stored never reaches it)."""
        key = ChunkKey((meta.path, index))
        loader = self.loader
        while True:
            cached, value = self.lru.use(key)
            if cached:
                self.counters.cache_hits += 1
                return value  # type: ignore[return-value]
            loader.check_failure(key)
            flight = loader.flight(key)
            if flight is not None:
                break
            if meta.shards is None:
                flight = loader.start_chunk(meta, index, priority, sink=sink)
                break
            where = await self.indexes.where(meta, index, priority)
            if key in self.lru or loader.known(key):
                continue  # another reader got it while we read the index
            if where is None:  # not in the shard (or no shard): fill value
                self.lru.insert(key, None)
                self.counters.cache_misses += 1
                return None
            flight = loader.start_chunk(meta, index, priority, where, sink=sink)
            break
        self.counters.cache_misses += 1
        value = await loader.wait(flight)
        if flight.stale:  # read from a shard that was being replaced: again
            return await self.get(meta, index, priority=priority, sink=sink)
        return value  # type: ignore[return-value]

    async def start_runs(self, meta: ArrayMeta, indices: list[Index], priority: int) -> None:
        """Many inner chunks of a remote store's shards are wanted at once: load
        those that lie together in runs, one request each (``get`` then finds them
        in flight; it loads whatever this left). Other chunks of the same shards
        that lie between them come along (their bytes are fetched anyway)."""
        if meta.shards is None or self.fetch_pool is None or len(indices) < 2:
            return
        wanted = [i for i in indices if not self.has(meta.path, i)]
        if len(wanted) < 2:
            return
        await self.indexes.load(meta, wanted, priority)
        geometry = meta.shards.geometry
        places = self._places(meta, wanted)
        if len(places) < 2:
            return
        chosen = {place[0] for place in places}
        shards = {geometry.locate(index)[0] for index in chosen}
        others = [
            index
            for shard in shards
            for _, index in geometry.inner_chunks_in_array(shard)
            if index not in chosen
        ]
        extras = self._places(meta, others)
        for run in coalesce(places, MAX_RUN_BYTES, MAX_RUN_GAP, extras):
            if len(run.members) > 1:
                self.loader.start_run(meta, run, priority)

    def _places(self, meta: ArrayMeta, indices: list[Index]) -> list[tuple[Index, str, int, int]]:
        """(index, shard key, offset, nbytes) of the inner chunks that are stored
        (their shard's index at hand), fit the size bound, and are neither cached nor
        loading; the others are left to ``get``, which says why alone."""
        limit = size_bound(meta.chunk_nbytes)
        places = []
        for index in indices:
            known, where = self.indexes.placed(meta, index)
            stored = known and where is not None and where[2] <= limit
            if stored and not self.has(meta.path, index):
                places.append((index, *where))  # type: ignore[misc]
        return places

    def ready(self, path: str, index: Index) -> tuple[bool, np.ndarray | None]:
        """(True, chunk) if it is cached (counts as a use), else (False, None)."""
        cached, value = self.lru.use(ChunkKey((path, index)))
        if cached:
            self.counters.cache_hits += 1
        return cached, value  # type: ignore[return-value]

    def has(self, path: str, index: Index) -> bool:
        """Cached, being loaded, or known to fail: a read-ahead would add nothing."""
        key = ChunkKey((path, index))
        return key in self.lru or self.loader.known(key)

    def prefetch(self, meta: ArrayMeta, index: Index) -> bool:
        """Start loading a chunk in the background; False when there is no room now.

        At most MAX_READ_AHEAD_LOADS are queued, and a reader's own requests go
        before them. Loads start in the order asked, so the stream's next chunk first.
        """
        queued = MAX_REMOTE_READ_AHEAD_LOADS if self.network_bound() else MAX_READ_AHEAD_LOADS
        if not self.read_ahead or self.loader.prefetching >= queued:
            return False
        if self.has(meta.path, index):
            return True
        where = None
        if meta.shards is not None:
            # The chunk's place may not be known yet: then its index loads now, the
            # chunk on a later call (the reader's next request asks again).
            known, where = self.indexes.where_at_hand(meta, index)
            if not known:
                return False
            if where is None:
                self.lru.insert(ChunkKey((meta.path, index)), None)
                return True
        self.loader.start_chunk(meta, index, BACKGROUND, where, prefetched=True)
        return True

    def prefetch_indexes(self, meta: ArrayMeta, indices: Iterable[Index]) -> None:
        """Start loading, in the background, the indexes of the shards holding
        ``indices`` that are neither cached nor loading."""
        if not self.read_ahead or meta.shards is None:
            return
        seen = set()
        for index in indices:
            shard = meta.shards.geometry.locate(index)[0]
            if shard not in seen:
                seen.add(shard)
                self.indexes.where_at_hand(meta, index)

    def release(self, meta: ArrayMeta, index: Index) -> None:
        """A streaming reader has gone past a chunk it had read ahead: the kernel's
        page cache holds those bytes now, so the decoded chunk makes room (use-once)."""
        key = ChunkKey((meta.path, index))
        if key in self._read_ahead:
            self.lru.drop(key)
            return
        self.loader.pass_by(key)

    # -- what writes tell the cache ---------------------------------------------------------

    def forget(self, path: str, index: Index) -> None:
        """Drop one chunk (a write is about to supersede it)."""
        key = ChunkKey((path, index))
        self.loader.forget(key)  # a load under way brings the old chunk: not cached
        self.lru.drop(key)
        self.stripes.chunk_changed(path, index)
        if path in self._twinned:
            self.forget(twin_path(path), index)

    def put(self, path: str, index: Index, value: np.ndarray | None) -> None:
        """Remember a chunk as it was just stored (``None``: deleted, reads as fill)."""
        self.forget(path, index)
        self.lru.insert(ChunkKey((path, index)), value)

    def begin_replace(self, meta: ArrayMeta, shard: Index) -> None:
        """Write-back is about to replace a shard (see ShardIndexes.begin_replace)."""
        self.indexes.begin_replace(meta, shard)
        if meta.path in self._twinned:
            self.indexes.begin_replace(big_endian(meta), shard)

    def end_replace(self, path: str, shard: Index, stored: ShardIndex | object | None) -> None:
        """The shard is replaced: its index as stored (None: deleted; anything else:
        unknown, read again when needed)."""
        self.indexes.end_replace(path, shard, stored)
        if path in self._twinned:  # (the same stored bytes: the same index)
            self.indexes.end_replace(twin_path(path), shard, stored)

    def invalidate(self, path: str) -> None:
        """Forget every cached chunk and shard index (and remembered failure) of the
        array at ``path``, and its stripes."""
        self.loader.forget_array(path)
        for key in self.lru.keys_of(path, ChunkKey, ShardIndexKey):
            self.lru.drop(key)
        self.stripes.drop_array(path)
        if path in self._twinned:
            self.invalidate(twin_path(path))

    # -- between the parts -------------------------------------------------------------------

    def _loaded(
        self, key: CacheKey, value: Entry, buffer: np.ndarray | None, background: bool
    ) -> None:
        """A load ended and nothing superseded it meanwhile: its value is cached."""
        self.lru.insert(key, value)
        if buffer is not None and key in self.lru:
            self.buffers.back(key, buffer)
            if background:
                self._read_ahead.add(key)

    def _left(self, key: CacheKey) -> None:
        """An entry left the LRU: whatever else refers to it lets go too."""
        self._read_ahead.discard(key)
        if isinstance(key, StripeKey):
            self.stripes.evicted(key)
        self.buffers.give_back(key)
