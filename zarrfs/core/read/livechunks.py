"""Each chunk of one array as reads see it now.

That is, in this order: the dirty version (completed from the stored chunk first
where a write covered it only in part), nothing where a shrink left the chunk
stale (it reads as fill value), the version a flush holds (frozen), or the stored
one through the decoded-chunk cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from zarrfs.core.pool import URGENT
from zarrfs.formats.grid.layout import Index
from zarrfs.formats.model import ArrayMeta

if TYPE_CHECKING:
    from zarrfs.core.livemeta import LiveMeta
    from zarrfs.core.read.chunks import ChunkCache
    from zarrfs.core.write.chunkstate import ChunkStates
    from zarrfs.core.write.stale import StaleUnits


class LiveChunks:
    def __init__(
        self, live: LiveMeta, chunks: ChunkStates, stale: StaleUnits, cache: ChunkCache
    ) -> None:
        self._live = live
        self._chunks = chunks
        self._stale = stale
        self._cache = cache

    async def get(self, meta: ArrayMeta, index: Index) -> np.ndarray | None:
        """The chunk as reads must see it (None: fill value)."""
        dirty = self._chunks.dirty.get(index)
        if dirty is not None:
            if dirty.mask is not None:
                await self.materialise(index)
            if index in self._chunks.dirty:
                return self._chunks.dirty[index].data
            return await self.get(meta, index)
        if self._stale.is_stale(index):
            return None
        frozen = self._chunks.frozen.get(index)
        if frozen is not None:
            return frozen
        return await self._cache.get(meta, index)

    def ready(self, index: Index) -> tuple[bool, np.ndarray | None]:
        """(True, chunk) when ``get`` would answer without waiting, else (False, None)."""
        dirty = self._chunks.dirty.get(index)
        if dirty is not None:
            return (True, dirty.data) if dirty.mask is None else (False, None)
        if self._stale.is_stale(index):
            return True, None
        frozen = self._chunks.frozen
        if index in frozen:
            return True, frozen[index]
        return self._cache.ready(self._live.meta.path, index)

    async def materialise(self, index: Index) -> None:
        """Merge the stored chunk (or fill) under the elements not yet written."""
        live = self._live
        base = None if self._stale.is_stale(index) else await self._cache.get(live.meta, index)
        dirty = self._chunks.dirty.get(index)  # may have been flushed or replaced meanwhile
        if dirty is None or dirty.mask is None:
            return
        target = dirty.writable(live.meta.order).view(live.void)
        missing = ~dirty.mask
        if base is None:
            target[missing] = live.fill
        else:
            target[missing] = base.view(live.void)[missing]
        dirty.mask = None

    async def start_runs(self, meta: ArrayMeta, indices: list[Index]) -> None:
        """Those of ``indices`` read from the store start loading together, in runs
        where their bytes lie together (a remote store's shards: ChunkCache)."""
        await self._cache.start_runs(meta, [i for i in indices if self.stored(i)], URGENT)

    def stored(self, index: Index) -> bool:
        """Reads see the stored chunk: it is not dirty, frozen or stale."""
        chunks = self._chunks
        return not (index in chunks.dirty or index in chunks.frozen or self._stale.is_stale(index))

    def untouched_before(self, end_row: int) -> bool:
        """Reads see the stored version of every chunk before row ``end_row``: no
        chunk is dirty or held by a flush, and no shrink reached that far."""
        chunks = self._chunks
        return not chunks.dirty and not chunks.frozen and end_row <= self._stale.low_rows
