"""The live state of one array: its current metadata, dirty chunks and pending tail.

Reads and writes of ``array.raw`` bytes land here. Writes never wait for the store:
they merge into decoded dirty chunks on the trio thread, so two writers of one chunk
cannot lose each other's update (code between awaits is atomic). A chunk that a
write covers only in part records which elements it has (``mask``); the old chunk is
read and merged under them only when the chunk is read back or flushed
("materialised"), so a chunk written whole, even in many small pieces, is never read.

Resizing changes only ``shape[0]``. Chunks that a shrink left beyond the end are
"stale" until the next flush deletes them: reads and writes treat them as missing.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

import numpy as np

from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.read.reading import ArrayReads
from zarrfs.core.write.chunkstate import ChunkStates, Dirty
from zarrfs.core.write.stale import StaleUnits
from zarrfs.errors import FileTooLargeError, InvalidArgumentError
from zarrfs.formats.grid.layout import (
    Index,
    RangePlan,
    contiguous_chunk_nbytes,
    contiguous_runs,
    grid_shape,
    plan_range,
)
from zarrfs.formats.model import ArrayMeta

if TYPE_CHECKING:
    from zarrfs.core.write.documents import Documents
    from zarrfs.core.write.writeback import WriteBack


# A trailing partial row is held in memory until it is complete: at most this much.
MAX_TAIL = 64 << 20


def _void(meta: ArrayMeta) -> np.dtype:
    return np.dtype((np.void, meta.itemsize))


class ArrayState(ArrayReads, StaleUnits):
    def __init__(
        self,
        meta: ArrayMeta,
        documents: Documents,
        cache: ChunkCache,
        writeback: WriteBack | None = None,
    ) -> None:
        self.meta = meta
        self.documents = documents  # shared with the tree: the shown metadata files
        self.cache = cache
        self.writeback = writeback
        # Dirty chunks, and chunks a flush holds (frozen: complete, read-only; a
        # write to one of them starts a new dirty chunk from a copy).
        self.chunks = ChunkStates(self, writeback)
        self.dirty = self.chunks.dirty
        self.flushing = self.chunks.frozen
        self.tail = bytearray()  # a trailing partial row, held until it is complete
        self.stored_rows = meta.shape[0] if meta.shape else 0  # shape[0] in the store
        self.low_rows = self.stored_rows  # smallest shape[0] since the last flush
        self.high_rows = self.stored_rows  # largest shape[0] since the last flush
        self.rewritten: set[Index] = set()  # stale chunks written again since the shrink
        # Shrinks so far: a resize's flush settles the marks only if none came since
        # it took them (a second shrink to the same size leaves low_rows unchanged).
        self.shrinks = 0
        self.npy_header_pending: bytearray | None = None  # array.npy after O_TRUNC
        self._prefetched_to = 0  # read-ahead has asked for every chunk up to this byte
        self._released_to = 0  # chunks before this one were offered back (use-once)
        self._write_end = -1  # where the last write ended (a stream continues there)

    # -- geometry ---------------------------------------------------------------------

    @property
    def row_nbytes(self) -> int | None:
        """Bytes per step along axis 0; ``None`` for 0-d arrays, which cannot resize."""
        if not self.meta.shape:
            return None
        return math.prod(self.meta.shape[1:]) * self.meta.itemsize

    @property
    def size(self) -> int:
        return self.meta.nbytes + len(self.tail)

    @property
    def metadata_changed(self) -> bool:
        return bool(self.meta.shape) and self.meta.shape[0] != self.stored_rows

    def is_stale(self, index: Index) -> bool:
        """Left beyond the end by a shrink, not written since: reads as fill."""
        return (
            bool(index)
            and index[0] * self.meta.chunks[0] >= self.low_rows
            and index not in self.rewritten
        )

    def _in_bounds(self, index: Index) -> tuple[slice, ...]:
        return tuple(
            slice(0, min(c, s - i * c)) for i, c, s in zip(index, self.meta.chunks, self.meta.shape)
        )

    # -- reading ----------------------------------------------------------------------

    async def get(self, meta: ArrayMeta, index: Index) -> np.ndarray | None:
        """The chunk as reads must see it: dirty version first, then cache/store."""
        dirty = self.dirty.get(index)
        if dirty is not None:
            if dirty.mask is not None:
                await self.materialise(index)
            return self.dirty[index].data if index in self.dirty else await self.get(meta, index)
        if self.is_stale(index):
            return None
        flushing = self.flushing.get(index)
        if flushing is not None:
            return flushing
        return await self.cache.get(meta, index)

    async def materialise(self, index: Index) -> None:
        """Merge the stored chunk (or fill) under the elements not yet written."""
        base = None if self.is_stale(index) else await self.cache.get(self.meta, index)
        dirty = self.dirty.get(index)  # may have been flushed or replaced meanwhile
        if dirty is None or dirty.mask is None:
            return
        void = _void(self.meta)
        target = self._writable(dirty).view(void)
        missing = ~dirty.mask
        if base is None:
            target[missing] = np.frombuffer(self.meta.fill_bytes, dtype=void)[0]
        else:
            target[missing] = base.view(void)[missing]
        dirty.mask = None

    # -- writing ----------------------------------------------------------------------

    def _new_dirty(self, index: Index, *, base_is_fill: bool) -> Dirty:
        meta = self.meta
        data = np.empty(meta.chunks, dtype=meta.dtype, order=meta.order)
        inside = self._in_bounds(index)
        whole = all(s.stop == c for s, c in zip(inside, meta.chunks))
        fill = np.frombuffer(meta.fill_bytes, dtype=_void(meta))[0]
        flushing = self.flushing.get(index)
        if base_is_fill:
            data.view(_void(meta))[...] = fill
            mask = None
        elif flushing is not None:
            data[...] = flushing
            mask = None
        else:
            mask = np.zeros(meta.chunks, dtype=bool, order=meta.order)
            if not whole:  # the overhang of an edge chunk is fill, never the old bytes
                data.view(_void(meta))[...] = fill
                mask[...] = True
                mask[inside] = False
        if base_is_fill and index and index[0] * meta.chunks[0] >= self.low_rows:
            self.rewritten.add(index)
        dirty = Dirty(data, mask, time.monotonic())
        self.chunks.make_dirty(index, dirty)
        self.cache.forget(meta.path, index)
        return dirty

    def _scatter(self, plan: RangePlan, buf: np.ndarray, *, streaming: bool = False) -> None:
        """Copy an element buffer (void dtype) into the dirty chunks the plan names.

        ``streaming``: the write continues the previous one; units it has finished
        (every chunk complete, the stream past the last one's end) are stored
        behind it, as ``_write_runs`` does for chunks that are runs of array.raw.
        """
        meta = self.meta
        finished = []
        for index, pieces in plan.chunks.items():
            dirty = self.dirty.get(index)
            if dirty is None:
                dirty = self._new_dirty(index, base_is_fill=self.is_stale(index))
            target = self._writable(dirty).view(_void(meta))
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
                dirty.mask = None
            if streaming and dirty.mask is None and self._passed(index, plan.elem_stop):
                finished.append(index)
        for index in finished:
            if self._unit_complete(index):
                assert self.writeback is not None
                self.writeback.behind(self, index)

    def _passed(self, index: Index, elem_stop: int) -> bool:
        """A C-order stream that has written up to ``elem_stop`` is past the chunk."""
        shape, chunks = self.meta.shape, self.meta.chunks
        last = 0
        for i, c, n in zip(index, chunks, shape):
            last = last * n + min((i + 1) * c, n) - 1
        return elem_stop > last

    def _unit_complete(self, index: Index) -> bool:
        """Every chunk of the unit holding ``index`` is dirty and complete."""
        meta = self.meta
        if meta.shards is None:
            return True
        members = meta.unit_members(meta.unit_of(index))
        return all(m in self.dirty and self.dirty[m].mask is None for m in members)

    def _write_runs(self, chunk_nbytes: int, offset: int, data: bytes | memoryview) -> None:
        """The fast path: whole elements into chunks that are runs of array.raw, one
        copy per chunk straight from the request."""
        source = np.frombuffer(data, np.uint8)
        trailing = (0,) * (len(self.meta.shape) - 1)
        # A write that continues the last one and reaches a chunk's end: a stream
        # that will not come back to that chunk soon, so it can be stored now.
        streaming = offset == self._write_end and self.writeback is not None
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
                assert self.writeback is not None
                self.writeback.behind(self, index)

    def _ends_unit(self, number: int) -> bool:
        """Chunk row ``number`` is the last a stream writes of its stored unit: of a
        shard, storing it any earlier would store the shard once per inner chunk."""
        shards = self.meta.shards
        if shards is None:
            return True
        per_shard = shards.geometry.chunks_per_shard[0]
        return (number + 1) % per_shard == 0 or (number + 1) * self.meta.chunks[0] >= (
            self.meta.shape[0]
        )

    def _write_piece(self, index: Index, start: int, stop: int, piece: np.ndarray) -> None:
        """Bytes ``[start, stop)`` of a chunk that is a run of array.raw."""
        dirty = self.dirty.get(index)
        if dirty is None:
            dirty = self._new_dirty(index, base_is_fill=self.is_stale(index))
        target = self._writable(dirty)
        if not target.flags.c_contiguous:  # reshape would copy: the write be lost
            raise RuntimeError(f"{self.meta.display_name}: dirty chunk not contiguous")
        target.reshape(-1).view(np.uint8)[start:stop] = piece
        if dirty.mask is not None:
            flat = dirty.mask.reshape(-1)
            itemsize = self.meta.itemsize
            flat[start // itemsize : stop // itemsize] = True
            if flat.all():
                dirty.mask = None

    def _writable(self, dirty: Dirty) -> np.ndarray:
        """The dirty chunk's data, copied first if it is read-only (copy on write)."""
        if not dirty.data.flags.writeable:
            dirty.data = dirty.data.copy(order=self.meta.order)
        return dirty.data

    def _adopt(self, index: Index, source: np.ndarray) -> None:
        """A whole chunk written at once: the (immutable) request bytes are the chunk."""
        meta = self.meta
        data = source.view(meta.dtype).reshape(meta.chunks)
        if self.is_stale(index) and index[0] * meta.chunks[0] >= self.low_rows:
            self.rewritten.add(index)
        self.chunks.make_dirty(index, Dirty(data, None, time.monotonic()))
        self.cache.forget(meta.path, index)

    async def _write_stored(self, offset: int, data: bytes | memoryview) -> None:
        """Write inside the stored rows (``offset + len(data) <= meta.nbytes``)."""
        meta = self.meta
        run = contiguous_chunk_nbytes(meta.shape, meta.chunks, meta.itemsize, meta.order)
        if run is not None and not offset % meta.itemsize and not len(data) % meta.itemsize:
            self._write_runs(run, offset, data)
            return
        plan = plan_range(meta.shape, meta.chunks, meta.itemsize, offset, len(data))
        if plan.nbytes == 0:
            return
        streaming = offset == self._write_end and self.writeback is not None
        self._write_end = offset + len(data)
        void = _void(meta)
        itemsize = meta.itemsize
        buf = np.empty(plan.n_elements, dtype=void)
        raw = buf.view(np.uint8)
        head, end = plan.byte_offset, plan.byte_offset + plan.nbytes
        if head or end != len(raw):
            # Partial elements at the edges keep their other bytes. Their chunks are
            # made dirty and complete first (that awaits); the edge elements are then
            # read from them and the write merged with no await in between, so a
            # write landing meanwhile (through array.npy, say) is not overwritten
            # with a stale copy of its element.
            edges = [plan.elem_start, plan.elem_stop - 1]
            while True:
                complete = await self._complete_elements(edges, meta)
                if self.meta is not meta:
                    # Resized while we waited: the write lands as if it came after
                    # the resize (past a shrink's new end, it grows the array again).
                    await self.write(offset, data)
                    return
                if not complete:
                    continue  # a flush took a chunk meanwhile: make it dirty again
                raw[:itemsize] = self._element(edges[0])
                raw[-itemsize:] = self._element(edges[1])
                break
        raw[head:end] = np.frombuffer(data, np.uint8)
        self._scatter(plan, buf, streaming=streaming)

    def _locate(self, element: int) -> tuple[Index, Index]:
        """(chunk index, position inside the chunk) of a C-order element number."""
        position = np.unravel_index(element, self.meta.shape)
        chunks = self.meta.chunks
        return (
            tuple(int(p) // c for p, c in zip(position, chunks)),
            tuple(int(p) % c for p, c in zip(position, chunks)),
        )

    async def _complete_elements(self, elements: list[int], meta: ArrayMeta) -> bool:
        """Make the chunks holding ``elements`` dirty and complete; True when they all
        still are once the last await has returned. False at once if the array is no
        longer shaped as ``meta`` (the elements may be past its end)."""
        indices = list(dict.fromkeys(self._locate(e)[0] for e in elements))
        for index in indices:
            if self.meta is not meta:
                return False
            if index not in self.dirty:
                self._new_dirty(index, base_is_fill=self.is_stale(index))
            if self.dirty[index].mask is not None:
                await self.materialise(index)
        return self.meta is meta and all(
            i in self.dirty and self.dirty[i].mask is None for i in indices
        )

    def _element(self, element: int) -> np.ndarray:
        """The bytes of one element from its dirty, complete chunk (no await)."""
        index, inside = self._locate(element)
        chunk = self.dirty[index].data.view(_void(self.meta))
        return np.frombuffer(chunk[inside].tobytes(), np.uint8)

    async def write(self, offset: int, data: bytes | memoryview) -> int:
        self.npy_header_pending = None  # array.raw changed: array.npy is the array again
        stored = self.meta.nbytes
        end = offset + len(data)
        if end <= stored:
            await self._write_stored(offset, data)
            return len(data)
        row = self.row_nbytes
        if not row:
            raise FileTooLargeError(f"{self.meta.display_name}: array cannot grow")
        view = memoryview(data)
        if offset < stored:
            await self._write_stored(offset, view[: stored - offset])
            view, offset = view[stored - offset :], stored
        await self._write_beyond(offset, view, row)
        return len(data)

    async def _write_beyond(self, offset: int, view: memoryview, row: int) -> None:
        """Bytes at or past the stored rows: complete rows grow ``shape[0]``, the rest
        is the pending tail. A gap costs nothing: the rows it spans read as fill
        value once the shape covers them, so only the tail's row is held in memory.
        """
        stored = self.meta.nbytes
        if offset < stored:  # the array grew while we waited: write into it
            await self.write(offset, view)
            return
        old_tail = self.tail
        rows, rest = divmod(max(len(old_tail), offset + len(view) - stored), row)
        if rest > MAX_TAIL:
            raise FileTooLargeError(
                f"{self.meta.display_name}: a partial row of {rest} bytes is more than "
                f"{MAX_TAIL} held in memory; write whole rows of {row} bytes"
            )
        # The state changes before any await, so a concurrent write sees them.
        if rows:
            self.tail = bytearray()
            self.resize(self.meta.shape[0] + rows)
        grown = self.meta.nbytes
        tail_start = max(offset, grown)
        if offset + len(view) > grown:
            base = self.tail if not rows else bytearray()
            if len(base) < tail_start - grown:
                base += self._fill_between(len(base), tail_start - grown)
            part = view[tail_start - offset :]
            base[tail_start - grown : tail_start - grown + len(part)] = part
            self.tail = base
        if rows:
            if old_tail:  # shorter than a row: inside the rows just added
                await self._write_stored(stored, bytes(old_tail))
            if offset < grown:
                await self._write_stored(offset, view[: grown - offset])
        if self.tail and self.writeback is not None:
            self.writeback.resized(self)  # so unmount finds (and reports) the tail

    def _fill_between(self, start: int, stop: int) -> bytes:
        """Fill bytes for positions ``[start, stop)`` counted from an element boundary."""
        fill = self.meta.fill_bytes
        phase = start % len(fill)
        count = -(-(stop - start + phase) // len(fill))
        return (fill * count)[phase : phase + stop - start]

    # -- resizing ---------------------------------------------------------------------

    def truncate(self, size: int) -> None:
        row = self.row_nbytes
        if row is None or row == 0:
            if size != self.size:
                raise InvalidArgumentError(f"{self.meta.display_name}: size is fixed")
            return
        if size % row:
            raise InvalidArgumentError(
                f"{self.meta.display_name}: size {size} is not a multiple of the row size {row}"
            )
        self.npy_header_pending = None
        self.tail = bytearray()
        self.resize(size // row)

    def resize(self, rows: int) -> None:
        """Set ``shape[0]``; what lies beyond the old end reads as fill value."""
        meta = self.meta
        old_rows = meta.shape[0]
        if rows == old_rows:
            return
        c0 = meta.chunks[0]
        boundary = min(rows, old_rows)
        if rows < old_rows:
            for index in [i for i in self.dirty if i[0] * c0 >= rows]:
                self._drop_dirty(index)
            self.rewritten = {i for i in self.rewritten if i[0] * c0 < rows}
            self.low_rows = min(self.low_rows, rows)
            self.shrinks += 1
        self.high_rows = max(self.high_rows, rows)
        self.meta = meta.resized(rows)
        if boundary % c0:
            # The chunk row straddling the smaller end: its part beyond must read as fill.
            i0 = boundary // c0
            others = grid_shape(self.meta.shape[1:], self.meta.chunks[1:])
            for rest in np.ndindex(*others):
                self._fill_beyond((i0, *rest), boundary - i0 * c0)
        if self.writeback is not None:
            self.writeback.resized(self)

    def _fill_beyond(self, index: Index, keep: int) -> None:
        dirty = self.dirty.get(index) or self._new_dirty(index, base_is_fill=self.is_stale(index))
        fill = np.frombuffer(self.meta.fill_bytes, dtype=_void(self.meta))[0]
        self._writable(dirty).view(_void(self.meta))[keep:] = fill
        if dirty.mask is not None:
            dirty.mask[keep:] = True

    def _drop_dirty(self, index: Index) -> None:
        self.chunks.drop(index)
