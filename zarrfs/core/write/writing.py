"""Writes to one array's ``array.raw`` as a file: inside the stored rows, past them,
and changes of its size.

Inside the stored rows a write goes to the chunks (core/write/chunkwrites.py).
Past them, complete rows grow ``shape[0]`` and the rest is the *tail*: a trailing
partial row, held in memory until it is complete (it is no part of the shape, so
it is never stored). Resizing changes only ``shape[0]``; what lies beyond the old
end reads as fill value, and what a shrink leaves beyond the new one is stale
(core/write/stale.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from zarrfs.core.livemeta import fill_run
from zarrfs.errors import FileTooLargeError, InvalidArgumentError
from zarrfs.formats.grid.layout import grid_shape

if TYPE_CHECKING:
    from zarrfs.core.livemeta import LiveMeta
    from zarrfs.core.write.chunkstate import ChunkStates
    from zarrfs.core.write.chunkwrites import ChunkWriter, WriteNotices
    from zarrfs.core.write.stale import StaleUnits

# A trailing partial row is held in memory until it is complete: at most this much.
MAX_TAIL = 64 << 20


class ArrayWriter:
    def __init__(
        self,
        live: LiveMeta,
        chunks: ChunkStates,
        stale: StaleUnits,
        chunk_writer: ChunkWriter,
        notices: WriteNotices | None,
    ) -> None:
        self._live = live
        self._chunks = chunks
        self._stale = stale
        self._chunk_writer = chunk_writer
        self._notices = notices
        self._tail = bytearray()  # a trailing partial row, held until it is complete
        # Bumped by every write and truncate: what is derived from the bytes (a new
        # NPY header being written) knows they changed.
        self.changes = 0

    @property
    def tail(self) -> bytearray:
        """The pending partial row (read-only: ``drop_tail`` forgets it)."""
        return self._tail

    @property
    def size(self) -> int:
        return self._live.meta.nbytes + len(self._tail)

    def drop_tail(self) -> None:
        """Forget the pending partial row (it cannot be stored)."""
        self._tail = bytearray()

    async def write(self, offset: int, data: bytes | memoryview) -> int:
        self.changes += 1
        stored = self._live.meta.nbytes
        end = offset + len(data)
        if end <= stored:
            await self._write_stored(offset, data)
            return len(data)
        row = self._live.row_nbytes
        if not row:
            raise FileTooLargeError(f"{self._live.meta.display_name}: array cannot grow")
        view = memoryview(data)
        if offset < stored:
            await self._write_stored(offset, view[: stored - offset])
            view, offset = view[stored - offset :], stored
        await self._write_beyond(offset, view, row)
        return len(data)

    async def _write_stored(self, offset: int, data: bytes | memoryview) -> None:
        if not await self._chunk_writer.write(offset, data):
            # Resized while it waited: the write lands as if it came after the
            # resize (past a shrink's new end, it grows the array again).
            await self.write(offset, data)

    async def _write_beyond(self, offset: int, view: memoryview, row: int) -> None:
        """Bytes at or past the stored rows: complete rows grow ``shape[0]``, the rest
        is the pending tail. A gap costs nothing: the rows it spans read as fill
        value once the shape covers them, so only the tail's row is held in memory.
        """
        live = self._live
        stored = live.meta.nbytes
        if offset < stored:  # the array grew while we waited: write into it
            await self.write(offset, view)
            return
        old_tail = self._tail
        rows, rest = divmod(max(len(old_tail), offset + len(view) - stored), row)
        if rest > MAX_TAIL:
            raise FileTooLargeError(
                f"{live.meta.display_name}: a partial row of {rest} bytes is more than "
                f"{MAX_TAIL} held in memory; write whole rows of {row} bytes"
            )
        # The state changes before any await, so a concurrent write sees them.
        if rows:
            self._tail = bytearray()
            self.resize(live.meta.shape[0] + rows)
        grown = live.meta.nbytes
        tail_start = max(offset, grown)
        if offset + len(view) > grown:
            base = self._tail if not rows else bytearray()
            if len(base) < tail_start - grown:
                base += fill_run(live.meta.fill_bytes, len(base), tail_start - grown)
            part = view[tail_start - offset :]
            base[tail_start - grown : tail_start - grown + len(part)] = part
            self._tail = base
        if rows:
            if old_tail:  # shorter than a row: inside the rows just added
                await self._write_stored(stored, bytes(old_tail))
            if offset < grown:
                await self._write_stored(offset, view[: grown - offset])
        if self._tail and self._notices is not None:
            self._notices.resized()  # so unmount finds (and reports) the tail

    # -- resizing ---------------------------------------------------------------------

    def truncate(self, size: int) -> None:
        meta = self._live.meta
        row = self._live.row_nbytes
        if row is None or row == 0:
            if size != self.size:
                raise InvalidArgumentError(f"{meta.display_name}: size is fixed")
            return
        if size % row:
            raise InvalidArgumentError(
                f"{meta.display_name}: size {size} is not a multiple of the row size {row}"
            )
        self.changes += 1
        self._tail = bytearray()
        self.resize(size // row)

    def resize(self, rows: int) -> None:
        """Set ``shape[0]``; what lies beyond the old end reads as fill value."""
        live = self._live
        meta = live.meta
        old_rows = meta.shape[0]
        if rows == old_rows:
            return
        c0 = meta.chunks[0]
        boundary = min(rows, old_rows)
        if rows < old_rows:
            for index in [i for i in self._chunks.dirty if i[0] * c0 >= rows]:
                self._chunks.drop(index)
        self._stale.resized(old_rows, rows)
        live.replace(meta.resized(rows))
        if boundary % c0:
            # The chunk row straddling the smaller end: its part beyond must read as fill.
            i0 = boundary // c0
            others = grid_shape(live.meta.shape[1:], live.meta.chunks[1:])
            for rest in np.ndindex(*others):
                self._chunk_writer.fill_beyond((i0, *rest), boundary - i0 * c0)
        if self._notices is not None:
            self._notices.resized()
