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
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import trio

from zarrfs.core.chunks import ChunkCache
from zarrfs.core.layout import (
    Index,
    RangePlan,
    contiguous_chunk_nbytes,
    contiguous_runs,
    grid_shape,
    plan_range,
)
from zarrfs.errors import FileTooLargeError, InvalidArgumentError, ZarrfsError
from zarrfs.formats.model import ArrayMeta

if TYPE_CHECKING:
    from zarrfs.core.writeback import WriteBack


# Sequential readers get the chunks ahead of them loaded in the background.
READ_AHEAD = 8 * 2**20
READ_AHEAD_CHUNKS = 4

Buffer = bytes | memoryview  # what reads return: a slice of a chunk needs no copy


@dataclass
class Dirty:
    # chunk shape, laid out in the array's order; read-only when it is a write's own
    # buffer or was handed to a flush: writers go through ArrayState._writable
    data: np.ndarray
    mask: np.ndarray | None  # elements written so far; None once complete
    since: float  # when it first became dirty (monotonic)


def _void(meta: ArrayMeta) -> np.dtype:
    return np.dtype((np.void, meta.itemsize))


class ArrayState:
    def __init__(
        self,
        meta: ArrayMeta,
        documents: dict[str, bytes],
        cache: ChunkCache,
        writeback: WriteBack | None = None,
    ) -> None:
        self.meta = meta
        self.documents = documents  # shared with the tree: the shown metadata files
        self.cache = cache
        self.writeback = writeback
        self.dirty: dict[Index, Dirty] = {}
        # Chunks handed to the store and not yet stored: complete, read-only. A write
        # to one of them starts a new dirty chunk from a copy.
        self.flushing: dict[Index, np.ndarray] = {}
        self.tail = bytearray()  # a trailing partial row, held until it is complete
        self.stored_rows = meta.shape[0] if meta.shape else 0  # shape[0] in the store
        self.low_rows = self.stored_rows  # smallest shape[0] since the last flush
        self.high_rows = self.stored_rows  # largest shape[0] since the last flush
        self.rewritten: set[Index] = set()  # stale chunks written again since the shrink
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

    def _is_stale(self, index: Index) -> bool:
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
                await self._materialise(index)
            return self.dirty[index].data if index in self.dirty else await self.get(meta, index)
        if self._is_stale(index):
            return None
        flushing = self.flushing.get(index)
        if flushing is not None:
            return flushing
        return await self.cache.get(meta, index)

    async def read(self, offset: int, size: int) -> Buffer:
        from zarrfs.views.raw import read_array_bytes

        meta = self.meta
        stored = meta.nbytes
        out: Buffer = b""
        if offset < stored:
            length = min(size, stored - offset)
            run = contiguous_chunk_nbytes(meta.shape, meta.chunks, meta.itemsize, meta.order)
            if run is not None:
                out = await self._read_runs(run, offset, length)
            else:
                out = await read_array_bytes(self, meta, offset, length)
        if offset + size > stored and self.tail:
            start = max(offset - stored, 0)
            out = bytes(out) + bytes(self.tail[start : offset + size - stored])
        return out

    async def _read_runs(self, chunk_nbytes: int, offset: int, length: int) -> Buffer:
        """The fast path: chunks are runs of array.raw, served as slices of their bytes."""
        runs = contiguous_runs(chunk_nbytes, offset, length)
        trailing = (0,) * (len(self.meta.shape) - 1)
        chunks = await self._get_many([(number, *trailing) for number, _, _ in runs])
        pieces: list[Buffer] = []
        fill = self.meta.fill_bytes
        for (_, start, stop), chunk in zip(runs, chunks):
            if chunk is None:
                phase = start % len(fill)
                count = -(-(stop - start + phase) // len(fill))
                pieces.append((fill * count)[phase : phase + stop - start])
                continue
            part = memoryview(chunk.reshape(-1).view(np.uint8))[start:stop]
            # Cached chunks are immutable; a dirty one may change after we return.
            pieces.append(bytes(part) if chunk.flags.writeable else part)
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def prefetch(self, offset: int) -> None:
        """A reader is streaming from ``offset``: load the chunks ahead of it.

        The window is a few chunks (at least READ_AHEAD bytes, at most a quarter of
        the cache, so read-ahead cannot evict what it loaded before it is read).
        """
        meta = self.meta
        end = min(offset + self._read_ahead_bytes(), meta.nbytes)
        ahead = self._prefetched_to
        start = ahead if offset <= ahead <= end else offset  # else: the reader jumped
        run = contiguous_chunk_nbytes(meta.shape, meta.chunks, meta.itemsize, meta.order)
        if run is not None:
            # Chunks the stream has passed (one kept for late requests) go first,
            # also once the window has reached the end of the array.
            trailing = (0,) * (len(meta.shape) - 1)
            passed = offset // run - 1
            if passed < self._released_to - 1:  # the reader jumped back: a new stream
                self._released_to = max(passed, 0)
            for number in range(self._released_to, passed):
                self.cache.release(meta, (number, *trailing))
            self._released_to = max(self._released_to, passed)
        if start >= end:
            return
        if run is not None:
            trailing = (0,) * (len(meta.shape) - 1)
            for number, begin, _ in contiguous_runs(run, start, end - start):
                if not self._prefetch_chunk((number, *trailing)):
                    self._prefetched_to = number * run + begin
                    return
        else:
            plan = plan_range(meta.shape, meta.chunks, meta.itemsize, start, end - start)
            if not all([self._prefetch_chunk(index) for index in plan.chunks]):
                return  # try the whole window again on the next read
        self._prefetched_to = end

    def _read_ahead_bytes(self) -> int:
        wanted = max(READ_AHEAD, READ_AHEAD_CHUNKS * self.meta.chunk_nbytes)
        return min(wanted, self.cache.max_bytes // 4)

    def _prefetch_chunk(self, index: Index) -> bool:
        if index in self.dirty or index in self.flushing or self._is_stale(index):
            return True
        return self.cache.prefetch(self.meta, index)

    async def _get_many(self, indices: list[Index]) -> list[np.ndarray | None]:
        """Chunks as reads see them, fetched concurrently; the first error is raised."""
        if len(indices) == 1:
            return [await self.get(self.meta, indices[0])]
        ready = [self._ready(index) for index in indices]
        if all(found for found, _ in ready):  # all at hand: no tasks to start
            return [chunk for _, chunk in ready]
        results: list[np.ndarray | None] = [None] * len(indices)
        errors: list[ZarrfsError] = []

        async def fetch(position: int, index: Index) -> None:
            try:
                results[position] = await self.get(self.meta, index)
            except ZarrfsError as e:
                errors.append(e)

        async with trio.open_nursery() as nursery:
            for position, index in enumerate(indices):
                nursery.start_soon(fetch, position, index)
        if errors:
            raise errors[0]
        return results

    def _ready(self, index: Index) -> tuple[bool, np.ndarray | None]:
        """(True, chunk) when ``get`` would answer without waiting, else (False, None)."""
        dirty = self.dirty.get(index)
        if dirty is not None:
            return (True, dirty.data) if dirty.mask is None else (False, None)
        if self._is_stale(index):
            return True, None
        if index in self.flushing:
            return True, self.flushing[index]
        return self.cache.ready(self.meta.path, index)

    async def _materialise(self, index: Index) -> None:
        """Merge the stored chunk (or fill) under the elements not yet written."""
        base = None if self._is_stale(index) else await self.cache.get(self.meta, index)
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
        self.dirty[index] = dirty
        self.cache.forget(meta.path, index)
        if self.writeback is not None:
            self.writeback.track(self, index, dirty)
        return dirty

    def _scatter(self, plan: RangePlan, buf: np.ndarray) -> None:
        """Copy an element buffer (void dtype) into the dirty chunks the plan names."""
        meta = self.meta
        for index, pieces in plan.chunks.items():
            dirty = self.dirty.get(index)
            if dirty is None:
                dirty = self._new_dirty(index, base_is_fill=self._is_stale(index))
            target = self._writable(dirty).view(_void(meta))
            for piece in pieces:
                count = math.prod(piece.box_shape)
                box = buf[piece.box_start : piece.box_start + count].reshape(piece.box_shape)
                target[piece.chunk_selection] = box[piece.box_selection]
                if dirty.mask is not None:
                    dirty.mask[piece.chunk_selection] = True
            if dirty.mask is not None and dirty.mask.all():
                dirty.mask = None

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
            if streaming and stop == chunk_nbytes:
                assert self.writeback is not None
                self.writeback.behind(self, index)

    def _write_piece(self, index: Index, start: int, stop: int, piece: np.ndarray) -> None:
        """Bytes ``[start, stop)`` of a chunk that is a run of array.raw."""
        dirty = self.dirty.get(index)
        if dirty is None:
            dirty = self._new_dirty(index, base_is_fill=self._is_stale(index))
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
        if self._is_stale(index) and index[0] * meta.chunks[0] >= self.low_rows:
            self.rewritten.add(index)
        self.dirty[index] = dirty = Dirty(data, None, time.monotonic())
        self.cache.forget(meta.path, index)
        if self.writeback is not None:
            self.writeback.track(self, index, dirty)

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
        void = _void(meta)
        itemsize = meta.itemsize
        buf = np.empty(plan.n_elements, dtype=void)
        raw = buf.view(np.uint8)
        head, end = plan.byte_offset, plan.byte_offset + plan.nbytes
        if head or end != len(raw):
            # Partial elements at the edges keep their other bytes: read those elements.
            first = plan.elem_start * itemsize
            raw[:itemsize] = np.frombuffer(await self.read(first, itemsize), np.uint8)
            last = (plan.elem_stop - 1) * itemsize
            raw[-itemsize:] = np.frombuffer(await self.read(last, itemsize), np.uint8)
            if self.meta is not meta:  # resized while we read: plan again
                return await self._write_stored(offset, data)
        raw[head:end] = np.frombuffer(data, np.uint8)
        self._scatter(plan, buf)

    async def write(self, offset: int, data: bytes) -> int:
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
        # Beyond the stored rows: the pending tail, holes as fill, then the new bytes.
        stored = self.meta.nbytes
        beyond = bytearray(self._fill_pattern(max(len(self.tail), end - stored)))
        beyond[: len(self.tail)] = self.tail
        beyond[offset - stored : end - stored] = view
        rows = len(beyond) // row
        self.tail = bytearray()
        if rows:
            self.resize(self.meta.shape[0] + rows)
            await self._write_stored(stored, memoryview(beyond)[: rows * row])
        self.tail = beyond[rows * row :]
        if self.tail and self.writeback is not None:
            self.writeback.resized(self)  # so unmount finds (and reports) the tail
        return len(data)

    def _fill_pattern(self, nbytes: int) -> bytes:
        fill = self.meta.fill_bytes
        return (fill * (nbytes // len(fill) + 1))[:nbytes]

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
        self.high_rows = max(self.high_rows, rows)
        self.meta = replace(meta, shape=(rows, *meta.shape[1:]))
        if boundary % c0:
            # The chunk row straddling the smaller end: its part beyond must read as fill.
            i0 = boundary // c0
            others = grid_shape(self.meta.shape[1:], self.meta.chunks[1:])
            for rest in np.ndindex(*others):
                self._fill_beyond((i0, *rest), boundary - i0 * c0)
        if self.writeback is not None:
            self.writeback.resized(self)

    def _fill_beyond(self, index: Index, keep: int) -> None:
        dirty = self.dirty.get(index) or self._new_dirty(index, base_is_fill=self._is_stale(index))
        fill = np.frombuffer(self.meta.fill_bytes, dtype=_void(self.meta))[0]
        self._writable(dirty).view(_void(self.meta))[keep:] = fill
        if dirty.mask is not None:
            dirty.mask[keep:] = True

    def _drop_dirty(self, index: Index) -> None:
        self.dirty.pop(index, None)
        if self.writeback is not None:
            self.writeback.dropped(self, index)

    # -- flushing support ---------------------------------------------------------------

    def stale_chunks(self) -> list[Index]:
        """Chunks a shrink left beyond the end, to delete at the next flush."""
        meta = self.meta
        if not meta.shape or self.low_rows >= self.high_rows:
            return []
        c0 = meta.chunks[0]
        start = math.ceil(self.low_rows / c0)
        stop = math.ceil(self.high_rows / c0)
        others = grid_shape(meta.shape[1:], meta.chunks[1:])
        stale = []
        for i0 in range(start, stop):
            for rest in np.ndindex(*others):
                index = (i0, *rest)
                if index not in self.dirty and index not in self.rewritten:
                    stale.append(index)
        return stale

    def mark_stored(self, rows: int, low_rows: int, high_rows: int) -> None:
        """The store now holds ``shape[0] == rows``; stale chunks up to then are gone.

        A shrink or grow that happened while the flush ran keeps its own marks.
        """
        if not self.meta.shape:
            return
        self.stored_rows = rows
        if self.low_rows == low_rows:
            self.low_rows = self.meta.shape[0]
            self.rewritten.clear()
        if self.high_rows == high_rows:
            self.high_rows = self.meta.shape[0]
