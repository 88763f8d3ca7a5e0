"""Writes inside an array's stored rows, merged into its decoded dirty chunks.

Writes never wait for the store: they merge into decoded dirty chunks on the trio
thread, so two writers of one chunk cannot lose each other's update (code between
awaits is atomic). A chunk that a write covers only in part records which elements
it has (``mask``); the old chunk is read and merged under them only when the chunk
is read back or flushed ("materialised": core/read/livechunks.py), so a chunk
written whole, even in many small pieces, is never read.

A write that continues the previous one is a stream: a unit it has finished is
handed to write-back at once (``WriteNotices.behind``), to be stored behind it.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Protocol

import numpy as np

from zarrfs.core.write.chunkstate import Dirty
from zarrfs.formats.grid.layout import Index, RangePlan, contiguous_runs, plan_range
from zarrfs.formats.model import ArrayMeta

if TYPE_CHECKING:
    from zarrfs.core.livemeta import LiveMeta
    from zarrfs.core.read.chunks import ChunkCache
    from zarrfs.core.read.livechunks import LiveChunks
    from zarrfs.core.write.chunkstate import ChunkStates
    from zarrfs.core.write.stale import StaleUnits


class WriteNotices(Protocol):
    """What write-back hears from one array's writers."""

    def behind(self, index: Index) -> None:
        """A stream has finished the unit holding chunk ``index``: store it now."""

    def resized(self) -> None:
        """``shape[0]`` changed, or a partial row is pending: a metadata flush is due."""


class ChunkWriter:
    def __init__(
        self,
        live: LiveMeta,
        chunks: ChunkStates,
        visible: LiveChunks,
        stale: StaleUnits,
        cache: ChunkCache,
        notices: WriteNotices | None,
    ) -> None:
        self._live = live
        self._chunks = chunks
        self._visible = visible  # materialises partly written chunks
        self._stale = stale
        self._cache = cache
        self._notices = notices
        self._write_end = -1  # where the last write ended (a stream continues there)

    async def write(self, offset: int, data: bytes | memoryview) -> bool:
        """Write inside the stored rows (``offset + len(data) <= meta.nbytes``).

        False if the array was resized while the write waited: nothing was
        written, and the caller writes again as if it came after the resize."""
        live = self._live
        meta = live.meta
        run = live.run
        if run is not None and not offset % meta.itemsize and not len(data) % meta.itemsize:
            self._write_runs(run, offset, data)
            return True
        plan = plan_range(meta.shape, meta.chunks, meta.itemsize, offset, len(data))
        if plan.nbytes == 0:
            return True
        streaming = offset == self._write_end and self._notices is not None
        self._write_end = offset + len(data)
        itemsize = meta.itemsize
        head, end = plan.byte_offset, plan.byte_offset + plan.nbytes
        if not head and end == plan.n_elements * itemsize:
            # Whole elements: scattered from the request itself, with no copy first.
            whole = np.frombuffer(data, live.void, count=plan.n_elements)
            self._scatter(plan, whole, streaming=streaming)
            return True
        buf = np.empty(plan.n_elements, dtype=live.void)
        raw = buf.view(np.uint8)
        if head or end != len(raw):
            # Partial elements at the edges keep their other bytes. Their chunks are
            # made dirty and complete first (that awaits); the edge elements are then
            # read from them and the write merged with no await in between, so a
            # write landing meanwhile (through array.npy, say) is not overwritten
            # with a stale copy of its element.
            edges = [plan.elem_start, plan.elem_stop - 1]
            while True:
                complete = await self._complete_elements(edges, meta)
                if live.meta is not meta:
                    return False
                if not complete:
                    continue  # a flush took a chunk meanwhile: make it dirty again
                raw[:itemsize] = self._element(edges[0])
                raw[-itemsize:] = self._element(edges[1])
                break
        raw[head:end] = np.frombuffer(data, np.uint8)
        self._scatter(plan, buf, streaming=streaming)
        return True

    def new_dirty(self, index: Index) -> Dirty:
        """Chunk ``index`` made dirty: from fill value where a shrink left it stale,
        else as the flush holding it has it, else to be merged with the stored one
        (but for the overhang of an edge chunk, which is fill, never the old bytes);
        a whole chunk the cache holds is copied from it at once."""
        live = self._live
        meta = live.meta
        data = self._new_chunk(meta)
        frozen = self._chunks.frozen.get(index)
        if self._stale.rewrite(index):
            data.view(live.void)[...] = live.fill
            mask = None
        elif frozen is not None:
            data[...] = frozen
            mask = None
        else:
            inside = live.in_bounds(index)
            whole = all(s.stop == c for s, c in zip(inside, meta.chunks))
            cached, stored = self._cache.ready(meta.path, index) if whole else (False, None)
            if cached:
                # The stored chunk is at hand (a hot array): start from it, so later
                # writes keep no mask and a flush merges nothing.
                if stored is None:
                    data.view(live.void)[...] = live.fill
                else:
                    data[...] = stored
                mask = None
            else:
                mask = self._new_mask(meta)
                if not whole:
                    data.view(live.void)[...] = live.fill
                    mask[...] = True
                    mask[inside] = False
        dirty = Dirty(data, mask, time.monotonic())
        self._chunks.make_dirty(index, dirty)
        self._cache.forget(meta.path, index)
        return dirty

    def _new_chunk(self, meta: ArrayMeta) -> np.ndarray:
        """Memory for a chunk, its elements undefined: a spare buffer of the cache's
        where one is free (fresh memory costs a page fault per 4 KiB, on the thread
        that answers requests), given back once the chunk is stored."""
        if meta.dtype.hasobject:
            return np.empty(meta.chunks, dtype=meta.dtype, order=meta.order)
        nbytes = meta.chunk_nbytes
        buffer = self._cache.buffers.take(nbytes)
        if buffer is None:
            buffer = np.empty(nbytes, dtype=np.uint8)
        return buffer.view(meta.dtype).reshape(meta.chunks, order=meta.order)

    def _new_mask(self, meta: ArrayMeta) -> np.ndarray:
        """A chunk's mask of elements written, all False (from a spare buffer, as
        ``_new_chunk``; offered back once the chunk is complete)."""
        n = math.prod(meta.chunks)
        buffer = self._cache.buffers.take(n)
        if buffer is None:
            return np.zeros(meta.chunks, dtype=bool, order=meta.order)
        buffer[...] = 0
        return buffer.view(bool).reshape(meta.chunks, order=meta.order)

    def _completed(self, dirty: Dirty) -> None:
        """Every element of the chunk is written: its mask goes (back to the spares)."""
        mask, dirty.mask = dirty.mask, None
        if mask is not None:
            self._cache.buffers.offer(mask)

    def _dirty(self, index: Index) -> Dirty:
        """The chunk's dirty version, made if it has none."""
        dirty = self._chunks.dirty.get(index)
        return self.new_dirty(index) if dirty is None else dirty

    def fill_beyond(self, index: Index, keep: int) -> None:
        """Chunk ``index`` reads as fill value from ``keep`` on along axis 0."""
        live = self._live
        dirty = self._dirty(index)
        dirty.writable(live.meta.order).view(live.void)[keep:] = live.fill
        if dirty.mask is not None:
            dirty.mask[keep:] = True

    # -- element writes ---------------------------------------------------------------

    def _scatter(self, plan: RangePlan, buf: np.ndarray, *, streaming: bool = False) -> None:
        """Copy an element buffer (void dtype) into the dirty chunks the plan names.

        ``streaming``: the write continues the previous one; units it has finished
        (every chunk complete, the stream past the last one's end) are stored
        behind it, as ``_write_runs`` does for chunks that are runs of array.raw.
        """
        live = self._live
        finished = []
        for index, pieces in plan.chunks.items():
            dirty = self._dirty(index)
            target = dirty.writable(live.meta.order).view(live.void)
            for piece in pieces:
                count = math.prod(piece.box_shape)
                box = buf[piece.box_start : piece.box_start + count].reshape(piece.box_shape)
                target[piece.chunk_selection] = box[piece.box_selection]
                if dirty.mask is not None:
                    dirty.mask[piece.chunk_selection] = True
            # A chunk is rarely complete before its last element is written: that
            # one is checked first, not the whole mask on every write.
            mask = dirty.mask
            if mask is not None and mask.reshape(-1, order="A")[-1] and mask.all():
                self._completed(dirty)
            if streaming and dirty.mask is None and self._passed(index, plan.elem_stop):
                finished.append(index)
        for index in finished:
            if self._unit_complete(index):
                assert self._notices is not None
                self._notices.behind(index)

    def _passed(self, index: Index, elem_stop: int) -> bool:
        """A C-order stream that has written up to ``elem_stop`` is past the chunk."""
        shape, chunks = self._live.meta.shape, self._live.meta.chunks
        last = 0
        for i, c, n in zip(index, chunks, shape):
            last = last * n + min((i + 1) * c, n) - 1
        return elem_stop > last

    def _unit_complete(self, index: Index) -> bool:
        """Every chunk of the unit holding ``index`` is dirty and complete."""
        meta = self._live.meta
        if meta.shards is None:
            return True
        dirty = self._chunks.dirty
        members = meta.unit_members(meta.unit_of(index))
        return all(m in dirty and dirty[m].mask is None for m in members)

    async def _complete_elements(self, elements: list[int], meta: ArrayMeta) -> bool:
        """Make the chunks holding ``elements`` dirty and complete; True when they all
        still are once the last await has returned. False at once if the array is no
        longer shaped as ``meta`` (the elements may be past its end)."""
        live, dirty = self._live, self._chunks.dirty
        indices = list(dict.fromkeys(live.locate(e)[0] for e in elements))
        for index in indices:
            if live.meta is not meta:
                return False
            if dirty.get(index) is None:
                self.new_dirty(index)
            if dirty[index].mask is not None:
                await self._visible.materialise(index)
        return live.meta is meta and all(i in dirty and dirty[i].mask is None for i in indices)

    def _element(self, element: int) -> np.ndarray:
        """The bytes of one element from its dirty, complete chunk (no await)."""
        index, inside = self._live.locate(element)
        chunk = self._chunks.dirty[index].data.view(self._live.void)
        return np.frombuffer(chunk[inside].tobytes(), np.uint8)

    # -- chunks that are runs of array.raw ----------------------------------------------

    def _write_runs(self, chunk_nbytes: int, offset: int, data: bytes | memoryview) -> None:
        """The fast path: whole elements into chunks that are runs of array.raw, one
        copy per chunk straight from the request."""
        source = np.frombuffer(data, np.uint8)
        trailing = self._live.trailing
        # A write that continues the last one and reaches a chunk's end: a stream
        # that will not come back to that chunk soon, so it can be stored now.
        streaming = offset == self._write_end and self._notices is not None
        self._write_end = offset + len(data)
        # An immutable request that covers a whole chunk becomes that chunk: no copy.
        adoptable = memoryview(data).readonly
        done = 0
        for number, start, stop in contiguous_runs(chunk_nbytes, offset, len(data)):
            index = (number, *trailing)
            piece = source[done : done + stop - start]
            done += stop - start
            if adoptable and start == 0 and stop == chunk_nbytes:
                self._adopt(index, piece)
            else:
                self._write_piece(index, start, stop, piece)
            if streaming and stop == chunk_nbytes and self._ends_unit(number):
                assert self._notices is not None
                self._notices.behind(index)

    def _ends_unit(self, number: int) -> bool:
        """Chunk row ``number`` is the last a stream writes of its stored unit: of a
        shard, storing it any earlier would store the shard once per inner chunk."""
        meta = self._live.meta
        shards = meta.shards
        if shards is None:
            return True
        per_shard = shards.geometry.chunks_per_shard[0]
        return (number + 1) % per_shard == 0 or (number + 1) * meta.chunks[0] >= meta.shape[0]

    def _write_piece(self, index: Index, start: int, stop: int, piece: np.ndarray) -> None:
        """Bytes ``[start, stop)`` of a chunk that is a run of array.raw."""
        meta = self._live.meta
        dirty = self._dirty(index)
        target = dirty.writable(meta.order)
        if not target.flags.c_contiguous:  # reshape would copy: the write be lost
            raise RuntimeError(f"{meta.display_name}: dirty chunk not contiguous")
        target.reshape(-1).view(np.uint8)[start:stop] = piece
        if dirty.mask is not None:
            flat = dirty.mask.reshape(-1)
            itemsize = meta.itemsize
            flat[start // itemsize : stop // itemsize] = True
            # Rarely complete before both ends are written: they are checked first,
            # not the whole mask on every small write.
            if flat[0] and flat[-1] and flat.all():
                self._completed(dirty)

    def _adopt(self, index: Index, source: np.ndarray) -> None:
        """A whole chunk written at once: the (immutable) request bytes are the chunk."""
        meta = self._live.meta
        data = source.view(meta.dtype).reshape(meta.chunks)
        self._stale.rewrite(index)  # (its bytes are all new: no fill to start from)
        self._chunks.make_dirty(index, Dirty(data, None, time.monotonic()))
        self._cache.forget(meta.path, index)
