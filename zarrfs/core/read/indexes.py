"""Where a sharded array's inner chunks are, and how write-back replaces a shard.

A shard's index is loaded once (single-flight, by ``Loads``) and cached in the
decoded-chunk LRU beside the chunks, so one budget bounds both. While write-back
replaces a shard (``begin_replace`` .. ``end_replace``), reads of its inner chunks
wait, and loads already under way are asked again by whoever waits for them: they
may have read the new shard at the old index's offsets. Trio thread only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import trio

from zarrfs.core.pool import BACKGROUND
from zarrfs.core.read.flights import Loads
from zarrfs.core.read.lru import CacheKey, ChunkKey, DecodedLru, Entry, ShardIndexKey
from zarrfs.core.read.shardread import Where
from zarrfs.formats.grid.layout import Index
from zarrfs.formats.grid.shards import ShardIndex, inner_range
from zarrfs.formats.model import ArrayMeta


class ShardIndexes:
    def __init__(self, lru: DecodedLru, loads: Loads) -> None:
        self.lru = lru
        self.loads = loads
        # Shards being replaced by write-back: their inner chunks wait to be read
        # until the new shard (and its index) is in place.
        self._replacing: dict[ShardIndexKey, trio.Event] = {}

    async def where(self, meta: ArrayMeta, index: Index, priority: int) -> Where | None:
        """(shard key, offset, nbytes) of an inner chunk, from its shard's index
        (cached, loaded once); None when the chunk or its shard is not stored."""
        shard, position, key = _locate(meta, index)
        found = await self._index(meta, shard, key, priority)
        return _inner_place(meta, shard, position, found)

    async def _index(
        self, meta: ArrayMeta, shard: Index, key: ShardIndexKey, priority: int
    ) -> Entry:
        while True:
            replacing = self._replacing.get(key)
            if replacing is not None:
                await replacing.wait()
                continue
            cached, found = self.lru.use(key)
            if cached:
                return found
            self.loads.check_failure(key)
            flight = self.loads.flight(key) or self.loads.start_index(meta, shard, priority)
            found = await self.loads.wait(flight)
            if not flight.stale:
                return found

    async def load(self, meta: ArrayMeta, indices: list[Index], priority: int) -> None:
        """The indexes of the shards holding ``indices``, loaded at once (those that
        fail are not raised here: reading the chunk raises it)."""
        shards = {}
        for index in indices:
            shard, _, key = _locate(meta, index)
            shards[key] = shard

        async def one(key: ShardIndexKey, shard: Index) -> None:
            with contextlib.suppress(Exception):
                await self._index(meta, shard, key, priority)

        async with trio.open_nursery() as nursery:
            for key, shard in shards.items():
                nursery.start_soon(one, key, shard)

    def placed(self, meta: ArrayMeta, index: Index) -> tuple[bool, Where | None]:
        """(True, where the inner chunk is, or None: not stored) if its shard's index
        is cached and not being replaced; else (False, None). Loads nothing."""
        shard, position, key = _locate(meta, index)
        if key in self._replacing:
            return False, None
        cached, found = self.lru.peek(key)
        return (True, _inner_place(meta, shard, position, found)) if cached else (False, None)

    def where_at_hand(self, meta: ArrayMeta, index: Index) -> tuple[bool, Where | None]:
        """(True, where the inner chunk is, or None: not stored) if its shard's index
        is cached; else (False, None), and the index is loaded in the background."""
        shard, position, key = _locate(meta, index)
        cached, found = self.lru.peek(key)
        if not cached:
            if not self.loads.known(key):
                self.loads.start_index(meta, shard, BACKGROUND)
            return False, None
        return True, _inner_place(meta, shard, position, found)

    def begin_replace(self, meta: ArrayMeta, shard: Index) -> None:
        """Write-back is about to replace a shard: reads of its inner chunks wait
        until ``end_replace``, and loads under way (which may read the new shard at
        the old index's offsets) are asked again by whoever waits for them."""
        assert meta.shards is not None
        key = ShardIndexKey(meta.path, shard)
        self._replacing.setdefault(key, trio.Event())
        locate = meta.shards.geometry.locate

        def stale(loading: CacheKey) -> bool:
            if loading == key:
                return True
            return (
                isinstance(loading, ChunkKey)
                and loading.path == meta.path
                and _in_shard(locate, loading.index, shard)
            )

        self.loads.supersede(stale)
        self.loads.forget_failure(key)
        self.lru.drop(key)

    def end_replace(self, path: str, shard: Index, stored: ShardIndex | object | None) -> None:
        """The shard is replaced: its index as stored (None: deleted; anything else:
        unknown, read again when needed)."""
        key = ShardIndexKey(path, shard)
        self.lru.drop(key)
        if stored is None or isinstance(stored, ShardIndex):
            self.lru.insert(key, stored)
        replacing = self._replacing.pop(key, None)
        if replacing is not None:
            replacing.set()


def _locate(meta: ArrayMeta, index: Index) -> tuple[Index, int, ShardIndexKey]:
    """(shard, position in it, key of its index) of an inner chunk."""
    assert meta.shards is not None
    shard, _, position = meta.shards.geometry.locate(index)
    return shard, position, ShardIndexKey(meta.path, shard)


def _inner_place(meta: ArrayMeta, shard: Index, position: int, found: Entry) -> Where | None:
    """Where the inner chunk at ``position`` is, by its shard's index (None: the
    shard is not stored)."""
    if found is None:
        return None
    assert isinstance(found, ShardIndex) and meta.shards is not None
    span = inner_range(found, position)
    return None if span is None else (meta.shards.shard_keys(shard)[0], *span)


def _in_shard(
    locate: Callable[[Index], tuple[Index, Index, int]], index: Index, shard: Index
) -> bool:
    try:
        return locate(index)[0] == shard
    except IndexError:  # outside the grid (a resize since): not of this shard
        return False
