"""The live state of one array: what ``array.raw`` and ``array.npy`` read and write.

``ArrayState`` builds the parts and gives views the file-like calls (``read``,
``write``, ``truncate``, ``prefetch``, ``size``); write-back reaches the chunk
states and the resize bookkeeping through it. The parts, each with one job:

- ``live`` (core/livemeta.py): the metadata as it is now; a resize replaces it.
- ``chunks`` (core/write/chunkstate.py): the dirty, frozen and held chunks.
- ``stale`` (core/write/stale.py): what resizes left stale in the store.
- ``visible`` (core/read/livechunks.py): each chunk as reads see it.
- ``reader`` (core/read/reading.py) and ``read_ahead`` (core/read/readahead.py).
- ``big_endian`` (core/read/twinreads.py): the same reads, elements big-endian.
- ``writer`` (core/write/writing.py), writing through a ``ChunkWriter``
  (core/write/chunkwrites.py); it holds the pending partial row (``tail``).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Generic, TypeVar

import numpy as np

from zarrfs.core.livemeta import LiveMeta
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.read.livechunks import LiveChunks
from zarrfs.core.read.readahead import ReadAhead
from zarrfs.core.read.reading import ArrayReader, Buffer
from zarrfs.core.read.twinreads import BigEndianReads
from zarrfs.core.write.chunkstate import ChunkStates, Dirty
from zarrfs.core.write.chunkwrites import ChunkWriter
from zarrfs.core.write.stale import StaleUnits
from zarrfs.core.write.writing import ArrayWriter
from zarrfs.formats.grid.layout import Index
from zarrfs.formats.grid.stripes import StripeLayout
from zarrfs.formats.model import ArrayMeta

if TYPE_CHECKING:
    from zarrfs.core.write.documents import Documents
    from zarrfs.core.write.writeback import WriteBack


class WriteBackLink:
    """Write-back as one array's parts report to it: it knows the array as its
    ``ArrayState``, held weakly, so that a state no longer used is freed at once,
    not by the cycle collector (the tree lets go of the states of arrays listed
    long ago: namespace/recent.py)."""

    __slots__ = ("_owner", "_writeback")

    def __init__(self, owner: ArrayState, writeback: WriteBack) -> None:
        self._owner = weakref.ref(owner)
        self._writeback = writeback

    def track(self, index: Index, dirty: Dirty) -> None:
        self._writeback.track(self._state(), index, dirty)

    def dropped(self, index: Index) -> None:
        self._writeback.dropped(self._state(), index)

    def behind(self, index: Index) -> None:
        self._writeback.behind(self._state(), index)

    def resized(self) -> None:
        self._writeback.resized(self._state())

    def _state(self) -> ArrayState:
        state = self._owner()
        assert state is not None  # its parts call only while it is in use
        return state


_MAKING = threading.Lock()  # making an array's parts (once per array: rare)

P = TypeVar("P")


class _Part(Generic[P]):
    """One of an array's parts but its live metadata. All are made together at the
    first use of any (``ArrayState.make_parts``) and set on the state itself, which
    then answers every later use without this descriptor (it defines no ``__set__``,
    so the instance's own attribute wins)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, state: ArrayState | None, owner: type | None = None) -> P:
        if state is None:
            return self  # type: ignore[return-value]  # (asked of the class)
        state.make_parts()
        return state.__dict__[self._name]  # type: ignore[no-any-return]


class ArrayState:
    """One array's live state: its parts (see above), the file-like calls views
    make, and what write-back asks of its chunks and resizes."""

    def __init__(
        self,
        meta: ArrayMeta,
        documents: Documents,
        cache: ChunkCache,
        writeback: WriteBack | None = None,
    ) -> None:
        self.documents = documents  # shared with the tree: the shown metadata files
        self.cache = cache
        self.live = LiveMeta(meta)
        self._writeback = writeback
        self._big_endian: BigEndianReads | None = None

    # The other parts, made at their first use: listing an array asks its files'
    # sizes (the metadata's), and a walk of 10 000 arrays reads none of them.
    chunks: _Part[ChunkStates] = _Part()
    stale: _Part[StaleUnits] = _Part()
    visible: _Part[LiveChunks] = _Part()
    reader: _Part[ArrayReader] = _Part()
    read_ahead: _Part[ReadAhead] = _Part()
    writer: _Part[ArrayWriter] = _Part()

    def make_parts(self) -> None:
        """Make the parts above (asked by the first use of any), once."""
        with _MAKING:
            if "writer" in self.__dict__:
                return  # made meanwhile
            live, cache = self.live, self.cache
            writeback = self._writeback
            link = None if writeback is None else WriteBackLink(self, writeback)
            chunks = ChunkStates(link)
            stale = StaleUnits(live, chunks.dirty)
            visible = LiveChunks(live, chunks, stale, cache)
            reader = ArrayReader(live, visible, cache)
            chunk_writer = ChunkWriter(live, chunks, visible, stale, cache, link)
            self.__dict__.update(
                chunks=chunks,
                stale=stale,
                visible=visible,
                reader=reader,
                read_ahead=ReadAhead(live, visible, reader, cache),
                writer=ArrayWriter(live, chunks, stale, chunk_writer, link),
            )

    @property
    def meta(self) -> ArrayMeta:
        return self.live.meta

    # -- the file -----------------------------------------------------------------------

    @property
    def size(self) -> int:
        writer = self.__dict__.get("writer")
        return self.live.meta.nbytes if writer is None else writer.size

    @property
    def row_nbytes(self) -> int | None:
        """Bytes per step along axis 0; ``None`` for 0-d arrays, which cannot resize."""
        return self.live.row_nbytes

    @property
    def tail(self) -> bytearray:
        """The pending partial row past the stored ones (read-only)."""
        return self.writer.tail

    @property
    def changes(self) -> int:
        """Grows with every write and truncate of the array's bytes."""
        return self.writer.changes

    async def read(self, offset: int, size: int) -> Buffer:
        stored = self.meta.nbytes
        out: Buffer = b""
        if offset < stored:
            out = await self.reader.read(offset, min(size, stored - offset))
        tail = self.writer.tail
        if offset + size > stored and tail:
            start = max(offset - stored, 0)
            out = bytes(out) + bytes(tail[start : offset + size - stored])
        return out

    def prefetch(self, offset: int) -> None:
        self.read_ahead.prefetch(offset)

    @property
    def big_endian(self) -> BigEndianReads:
        """Reads of the same bytes with each element big-endian (made at first use)."""
        if self._big_endian is None:

            def changes() -> int:
                return self.changes

            self._big_endian = BigEndianReads(self.live, self.visible, self.cache, changes)
        return self._big_endian

    async def write(self, offset: int, data: bytes | memoryview) -> int:
        return await self.writer.write(offset, data)

    def truncate(self, size: int) -> None:
        self.writer.truncate(size)

    def resize(self, rows: int) -> None:
        """Set ``shape[0]``; what lies beyond the old end reads as fill value."""
        self.writer.resize(rows)

    def drop_tail(self) -> None:
        """Forget the pending partial row (unmounting: it cannot be stored)."""
        self.writer.drop_tail()

    def stripe_layout(self) -> StripeLayout | None:
        return self.reader.stripe_layout()

    # -- chunks, for write-back -----------------------------------------------------------

    @property
    def dirty(self) -> Mapping[Index, Dirty]:
        return self.chunks.dirty

    @property
    def frozen(self) -> Mapping[Index, np.ndarray]:
        return self.chunks.frozen

    async def materialise(self, index: Index) -> None:
        """Merge the stored chunk (or fill) under the elements not yet written."""
        await self.visible.materialise(index)

    # -- resizes, for write-back ----------------------------------------------------------

    @property
    def metadata_changed(self) -> bool:
        return self.stale.metadata_changed

    @property
    def low_rows(self) -> int:
        return self.stale.low_rows

    @property
    def high_rows(self) -> int:
        return self.stale.high_rows

    @property
    def shrinks(self) -> int:
        return self.stale.shrinks

    def is_stale(self, index: Index) -> bool:
        return self.stale.is_stale(index)

    def stale_range(self) -> tuple[int, int] | None:
        return self.stale.stale_range()

    def stale_units(self, stored: Iterable[Index]) -> tuple[list[Index], list[Index]]:
        return self.stale.stale_units(stored)

    def dropped_positions(self, unit: Index) -> set[int]:
        return self.stale.dropped_positions(unit)

    def mark_stored(self, rows: int, low_rows: int, high_rows: int, shrinks: int) -> None:
        self.stale.mark_stored(rows, low_rows, high_rows, shrinks)
