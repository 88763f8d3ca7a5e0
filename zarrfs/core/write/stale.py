"""What a resize leaves stale in the store, and how write-back cleans it up.

``StaleUnits`` is part of ``ArrayState`` (core/arrays.py): the resize marks
(``low_rows``, ``high_rows``, ``rewritten``) it reads are set there by writes and
resizes, and write-back (core/write/writeback.py) asks it, at a metadata flush, which
stored units to delete or rewrite.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from zarrfs.core.write.chunkstate import Dirty
from zarrfs.formats.grid.layout import Index
from zarrfs.formats.model import ArrayMeta


class StaleUnits:
    """The resize bookkeeping of one array's live state (see ArrayState)."""

    meta: ArrayMeta
    dirty: Mapping[Index, Dirty]
    stored_rows: int
    low_rows: int
    high_rows: int
    rewritten: set[Index]
    shrinks: int

    def is_stale(self, index: Index) -> bool:
        raise NotImplementedError

    def stale_range(self) -> tuple[int, int] | None:
        """Chunk rows ``[start, stop)`` along axis 0 that a shrink or grow since the
        last flush may have left stale in the store, or None."""
        meta = self.meta
        if not meta.shape or self.low_rows >= self.high_rows:
            return None
        c0 = meta.chunks[0]
        start, stop = math.ceil(self.low_rows / c0), math.ceil(self.high_rows / c0)
        return (start, stop) if start < stop else None

    def stale_units(self, stored: Iterable[Index]) -> tuple[list[Index], list[Index]]:
        """Of the units (chunks, or shards) ``stored`` in the store, (those to delete,
        those to rewrite): a shrink left them beyond the end, or a grow brought them
        inside, and they still hold what was there before. A shard that also holds
        chunks still inside the array is rewritten without the stale ones.

        Taken from what the store holds, not from the grid: a write far past the end
        grows the grid by billions of chunks that were never stored.
        """
        span = self.stale_range()
        if span is None:
            return [], []
        meta = self.meta
        if meta.shards is None:
            stale = [
                index
                for index in stored
                if span[0] <= index[0] < span[1]
                and index not in self.dirty
                and index not in self.rewritten
            ]
            return stale, []
        per_shard = meta.shards.geometry.chunks_per_shard[0]
        delete, rewrite = [], []
        for shard in stored:
            first, stop = shard[0] * per_shard, (shard[0] + 1) * per_shard
            if stop <= span[0] or first >= span[1]:
                continue
            kept = [
                i
                for i in self._members_ever(shard)
                if i in self.dirty or i in self.rewritten or i[0] < span[0]
            ]
            (rewrite if kept else delete).append(shard)
        return delete, rewrite

    def _members_ever(self, shard: Index) -> list[Index]:
        """The inner chunks of a shard inside the array at its largest since the
        last flush."""
        meta = self.meta
        if meta.shape[0] >= self.high_rows:
            return meta.unit_members(shard)
        return meta.resized(self.high_rows).unit_members(shard)

    def dropped_positions(self, unit: Index) -> set[int]:
        """Positions in a shard's index of inner chunks that read as fill value
        because a shrink left them stale: a rewrite of the shard leaves them out."""
        shards = self.meta.shards
        if shards is None or self.stale_range() is None:
            return set()
        geometry = self.meta.resized(max(self.high_rows, self.meta.shape[0])).shards
        assert geometry is not None
        return {
            position
            for position, index in geometry.geometry.inner_chunks_in_array(unit)
            if self.is_stale(index) or index[0] * self.meta.chunks[0] >= self.meta.shape[0]
        }

    def mark_stored(self, rows: int, low_rows: int, high_rows: int, shrinks: int) -> None:
        """The store now holds ``shape[0] == rows``; stale chunks up to then are gone.

        The marks are those the flush took (``low_rows``, ``high_rows``, and the
        count of ``shrinks`` then): a shrink that happened while the flush ran
        keeps every mark, for the next flush, and so does a grow its own.
        """
        if not self.meta.shape:
            return
        self.stored_rows = rows
        if self.shrinks != shrinks:
            return
        if self.low_rows == low_rows:
            self.low_rows = self.meta.shape[0]
            self.rewritten.clear()
        if self.high_rows == high_rows:
            self.high_rows = self.meta.shape[0]
