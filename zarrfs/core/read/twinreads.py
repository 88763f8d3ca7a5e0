"""Reads of an array's bytes big-endian (``group.nc``), through its twin
(core/read/byteorder.py): ``array.raw``'s read path over the twin's metadata, whose
chunks the decoders turn round as they decode them.

A chunk reads see as stored is the twin's, from the cache; one that is not
(dirty, held by a flush, or stale after a shrink) is the array's as its reads see
it, turned round by a decoder thread, and turned again if the array was written
meanwhile. The twin follows the array's metadata at each read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from zarrfs.core.livemeta import LiveMeta
from zarrfs.core.pool import URGENT
from zarrfs.core.read.readahead import ReadAhead
from zarrfs.core.read.reading import ArrayReader, Buffer
from zarrfs.formats.grid.layout import Index
from zarrfs.formats.model import ArrayMeta

if TYPE_CHECKING:
    from zarrfs.core.read.chunks import ChunkCache
    from zarrfs.core.read.livechunks import LiveChunks

# A chunk written while a decoder turned it round is turned again, this many times
# at most; then the reader is answered with what the last turn saw.
TURNS = 3


def _turned(chunk: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The chunk's elements in ``dtype``'s byte order, in a new array (worker thread)."""
    turned = chunk.astype(dtype, order="K")
    turned.flags.writeable = False
    return turned


class TwinChunks:
    """What the twin's reader asks of chunks (as ``LiveChunks`` answers the array's)."""

    def __init__(
        self,
        twin: LiveMeta,
        source: LiveMeta,
        visible: LiveChunks,
        cache: ChunkCache,
        changes: Callable[[], int],
    ) -> None:
        self._twin = twin
        self._source = source
        self._visible = visible
        self._cache = cache
        self._changes = changes

    async def get(self, meta: ArrayMeta, index: Index) -> np.ndarray | None:
        if self._visible.stored(index):
            return await self._cache.get(meta, index)
        for _ in range(TURNS):
            changes = self._changes()
            chunk = await self._visible.get(self._source.meta, index)
            if chunk is None:
                return None
            turned = await self._cache.pool.run(_turned, chunk, meta.dtype)
            if self._changes() == changes:
                break
        return turned

    def ready(self, index: Index) -> tuple[bool, np.ndarray | None]:
        if self._visible.stored(index):
            return self._cache.ready(self._twin.meta.path, index)
        return False, None

    async def start_runs(self, meta: ArrayMeta, indices: list[Index]) -> None:
        await self._cache.start_runs(meta, [i for i in indices if self.stored(i)], URGENT)

    def stored(self, index: Index) -> bool:
        return self._visible.stored(index)

    def untouched_before(self, end_row: int) -> bool:
        return self._visible.untouched_before(end_row)


class BigEndianReads:
    """``read`` and ``prefetch`` of an array's bytes, each element big-endian."""

    def __init__(
        self, source: LiveMeta, visible: LiveChunks, cache: ChunkCache, changes: Callable[[], int]
    ) -> None:
        self._source = source
        self._cache = cache
        self._made_from = source.meta
        self.live = LiveMeta(cache.twin(source.meta))
        chunks = TwinChunks(self.live, source, visible, cache, changes)
        self._reader = ArrayReader(self.live, chunks, cache)  # type: ignore[arg-type]
        self._read_ahead = ReadAhead(self.live, chunks, self._reader, cache)  # type: ignore[arg-type]

    def _follow(self) -> ArrayMeta:
        """The twin of the array's metadata as it is now."""
        meta = self._source.meta
        if meta is not self._made_from:
            self.live.replace(self._cache.twin(meta))
            self._made_from = meta
        return self.live.meta

    async def read(self, offset: int, size: int) -> Buffer:
        """Bytes ``[offset, offset + size)`` of the stored rows, big-endian; what lies
        past them (a shrink since the caller looked) reads as zeros."""
        stored = self._follow().nbytes
        data: Buffer = b""
        if offset < stored:
            data = await self._reader.read(offset, min(size, stored - offset))
        if len(data) < size:
            data = bytes(data) + bytes(size - len(data))
        return data

    def prefetch(self, offset: int) -> None:
        self._follow()
        self._read_ahead.prefetch(offset)
