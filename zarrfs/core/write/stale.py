"""What a resize leaves stale in the store, and how write-back cleans it up.

Resizing changes only ``shape[0]``. Chunks that a shrink left beyond the end are
*stale* until the next metadata flush deletes them: reads and writes treat them as
missing, and a write that starts one again starts it from fill value. A grow brings
such chunks back inside the array before that flush: they are stale too.

``StaleUnits`` holds the marks (the smallest and largest ``shape[0]`` since the last
flush, the stale chunks written again since, the count of shrinks); the writers
(core/write/writing.py, core/write/chunkwrites.py) set them, and write-back
(core/write/resizes.py) asks, at a metadata flush, which stored units to delete
or rewrite, then settles them with ``mark_stored``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from zarrfs.core.livemeta import LiveMeta
from zarrfs.core.write.chunkstate import Dirty
from zarrfs.formats.grid.layout import Index


class StaleUnits:
    """The resize bookkeeping of one array."""

    def __init__(self, live: LiveMeta, dirty: Mapping[Index, Dirty]) -> None:
        self._live = live
        self._dirty = dirty
        meta = live.meta
        self.stored_rows = meta.shape[0] if meta.shape else 0  # shape[0] in the store
        self.low_rows = self.stored_rows  # smallest shape[0] since the last flush
        self.high_rows = self.stored_rows  # largest shape[0] since the last flush
        self.rewritten: set[Index] = set()  # stale chunks written again since the shrink
        # Shrinks so far: a resize's flush settles the marks only if none came since
        # it took them (a second shrink to the same size leaves low_rows unchanged).
        self.shrinks = 0

    @property
    def metadata_changed(self) -> bool:
        """``shape[0]`` differs from the stored one."""
        meta = self._live.meta
        return bool(meta.shape) and meta.shape[0] != self.stored_rows

    def is_stale(self, index: Index) -> bool:
        """Left beyond the end by a shrink, not written since: reads as fill."""
        return (
            bool(index)
            and index[0] * self._live.meta.chunks[0] >= self.low_rows
            and index not in self.rewritten
        )

    def rewrite(self, index: Index) -> bool:
        """A write starts chunk ``index`` anew: True if it starts from fill value (a
        shrink left the chunk stale), which it no longer is."""
        if not self.is_stale(index):
            return False
        self.rewritten.add(index)
        return True

    def resized(self, old_rows: int, rows: int) -> None:
        """``shape[0]`` goes from ``old_rows`` to ``rows``."""
        if rows < old_rows:
            c0 = self._live.meta.chunks[0]
            self.rewritten = {i for i in self.rewritten if i[0] * c0 < rows}
            self.low_rows = min(self.low_rows, rows)
            self.shrinks += 1
        self.high_rows = max(self.high_rows, rows)

    def marks(self) -> tuple[int, int, int]:
        """(low_rows, high_rows, shrinks) as a flush takes them for ``mark_stored``."""
        return self.low_rows, self.high_rows, self.shrinks

    def stale_range(self) -> tuple[int, int] | None:
        """Chunk rows ``[start, stop)`` along axis 0 that a shrink or grow since the
        last flush may have left stale in the store, or None."""
        meta = self._live.meta
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
        meta = self._live.meta
        if meta.shards is None:
            stale = [
                index
                for index in stored
                if span[0] <= index[0] < span[1]
                and index not in self._dirty
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
                if i in self._dirty or i in self.rewritten or i[0] < span[0]
            ]
            (rewrite if kept else delete).append(shard)
        return delete, rewrite

    def _members_ever(self, shard: Index) -> list[Index]:
        """The inner chunks of a shard inside the array at its largest since the
        last flush."""
        meta = self._live.meta
        if meta.shape[0] >= self.high_rows:
            return meta.unit_members(shard)
        return meta.resized(self.high_rows).unit_members(shard)

    def dropped_positions(self, unit: Index) -> set[int]:
        """Positions in a shard's index of inner chunks that read as fill value
        because a shrink left them stale: a rewrite of the shard leaves them out."""
        meta = self._live.meta
        if meta.shards is None or self.stale_range() is None:
            return set()
        geometry = meta.resized(max(self.high_rows, meta.shape[0])).shards
        assert geometry is not None
        return {
            position
            for position, index in geometry.geometry.inner_chunks_in_array(unit)
            if self.is_stale(index) or index[0] * meta.chunks[0] >= meta.shape[0]
        }

    def mark_stored(self, rows: int, low_rows: int, high_rows: int, shrinks: int) -> None:
        """The store now holds ``shape[0] == rows``; stale chunks up to then are gone.

        The marks are those the flush took (``low_rows``, ``high_rows``, and the
        count of ``shrinks`` then): a shrink that happened while the flush ran
        keeps every mark, for the next flush, and so does a grow its own.
        """
        meta = self._live.meta
        if not meta.shape:
            return
        self.stored_rows = rows
        if self.shrinks != shrinks:
            return
        if self.low_rows == low_rows:
            self.low_rows = meta.shape[0]
            self.rewritten.clear()
        if self.high_rows == high_rows:
            self.high_rows = meta.shape[0]
