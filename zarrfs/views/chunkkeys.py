"""Chunk keys: an array's stored values under their store names, for Zarr readers.

A Zarr reader pointed at the mount (zarr-python, xarray, tensorstore, netCDF-C)
takes it for a directory store: it reads the metadata documents the directories
list, then asks for each chunk by its key ("0.0", "0/0", "c/0/0", a shard's key,
"__zdata__/0.0.blosc"). Those names are found by lookup and never listed, so ``ls``
shows what it always showed. A name is a chunk key of the array when the array's
own key encoding maps it to a unit (a chunk, or a shard) inside the grid; it is a
directory component of one ("c", "c/0", "0" with "/" separators) when a key of a
unit in the grid lies below it. The name is only parsed: the value served is the
one at the key zarrfs itself reads for that unit, so no name reaches outside the
array's own keys ("..", "01", "0/0/0" of a 2-D array are nothing).

Reading a key reads that range of the stored value and nothing more (a shard of
any size costs a read no more memory than it asks for); a lookup reads only the
value's size. On a write mount, a lookup first stores what the mount holds
unstored of the array (the chunks written through ``array.raw``, its shape), so
the reader gets the array as ``array.raw`` shows it. A value the mount stores
anew while a reader reads it fails the read with EIO, instead of giving bytes of
two versions: the reader reads it again.
"""

from __future__ import annotations

import logging

import trio

from zarrfs.core.arrays import ArrayState
from zarrfs.core.write.writeback import WriteBack
from zarrfs.errors import NotFoundError, StoreError
from zarrfs.formats.grid.layout import Index, grid_shape
from zarrfs.formats.model import ArrayMeta
from zarrfs.stores.base import Store, join_key
from zarrfs.views.base import View

log = logging.getLogger(__name__)


def unit_grid(meta: ArrayMeta) -> Index:
    """The grid of the stored units: shards of a sharded array, else chunks."""
    outer = meta.shards.shard_shape if meta.shards is not None else meta.chunks
    return grid_shape(meta.shape, outer)


def _in_grid(unit: Index, grid: Index) -> bool:
    return len(unit) == len(grid) and all(0 <= u < g for u, g in zip(unit, grid))


def _is_index(text: str) -> bool:
    """A grid position as writers name it: ASCII digits, no leading zero."""
    return text.isascii() and text.isdigit() and (text == "0" or text[0] != "0")


def unit_named(meta: ArrayMeta, relative: str) -> Index | None:
    """The unit whose key is ``relative`` (below the array), if it is in the grid."""
    unit = meta.stored_unit(join_key(meta.path, relative))
    return unit if unit is not None and _in_grid(unit, unit_grid(meta)) else None


def is_key_directory(meta: ArrayMeta, relative: str) -> bool:
    """Whether ``relative`` is a directory holding keys of units in the grid.

    Its index components name the first axes; the key of the unit at those
    positions (0 along the others) lies below it exactly when it is one.
    """
    parts = relative.split("/")
    positions = [int(part) for part in parts if _is_index(part)]
    ndim = len(meta.shape)
    if len(positions) >= ndim:
        return False
    unit = (*positions, *(0,) * (ndim - len(positions)))
    if not _in_grid(unit, unit_grid(meta)):
        return False
    below = join_key(meta.path, relative) + "/"
    return any(key.startswith(below) for key in meta.unit_keys(unit))


def unstored(state: ArrayState) -> bool:
    """The mount holds something of the array that the store does not have yet."""
    return state.chunks.busy or state.metadata_changed or state.stale_range() is not None


class ReplacedError(StoreError):
    """The value was stored anew while a reader read it."""


class ChunkKeyView(View):
    """One version of a unit's stored value, as encoded in the store; read-only.

    Found once (``find``), at a lookup; a later lookup that finds another version
    makes another view (another inode), so the handles of this one keep checking
    against the version they were opened on."""

    volatile = True  # direct I/O: every read comes from the store as it is then

    def __init__(
        self,
        store: Store,
        meta: ArrayMeta,
        unit: Index,
        state: ArrayState | None,
        writeback: WriteBack | None,
    ) -> None:
        self.store = store
        self.meta = meta
        self.unit = unit
        self.state = state
        self.writeback = writeback
        self.key = ""
        self.mtime: float | None = None
        self._size = 0
        self._releases = 0

    @property
    def size(self) -> int:
        return self._size

    async def find(self) -> None:
        """At a lookup: store what the mount holds of the array unstored, then find
        the value (NotFoundError when the unit is not stored: fill value)."""
        state = self.state
        if state is not None and self.writeback is not None and unstored(state):
            await self.writeback.store_array(state)
        # Counted before the value is looked at: a store while it is, is seen.
        releases = state.chunks.releases(self.unit) if state is not None else 0
        found = await trio.to_thread.run_sync(self._find)
        if found is None:
            raise NotFoundError(f"{self.meta.display_name}: unit {self.unit} is not stored")
        self.key, self._size, self.mtime = found
        self._releases = releases

    def _find(self) -> tuple[str, int, float | None] | None:
        """Worker thread: (key, size, mtime) of the value zarrfs reads for the unit."""
        for key in self.meta.unit_keys(self.unit):
            size = self.store.size(key)
            if size is not None:
                # A remote store would answer the time with one more request.
                mtime = None if self.store.remote else self.store.mtime(key)
                return key, size, mtime
        return None

    @property
    def version(self) -> tuple[str, int, float | None, int]:
        """Which version of the value it found, as far as can be told (a shared
        release counter may tell apart two that are the same)."""
        return self.key, self._size, self.mtime, self._releases

    def _check(self) -> None:
        state = self.state
        if state is None:
            return  # metadata only: nothing of it is ever written through the mount
        chunks = state.chunks
        if chunks.holder(self.unit) is not None or chunks.releases(self.unit) != self._releases:
            raise ReplacedError(f"{self.key}: stored anew while it was read; read it again")

    async def sync(self) -> None:
        state = self.state
        if state is not None and self.writeback is not None:
            await self.writeback.flush_array(state)

    async def read(self, offset: int, size: int) -> bytes:
        end = min(offset + size, self._size)
        if offset >= end:
            return b""
        self._check()
        data = await trio.to_thread.run_sync(self.store.get_range, self.key, offset, end - offset)
        self._check()
        if data is None or len(data) != end - offset:
            raise ReplacedError(f"{self.key}: changed in the store while it was read")
        return data
