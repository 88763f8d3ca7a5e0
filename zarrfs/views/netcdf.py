"""``group.nc``: a group's numeric arrays as one netCDF classic file, made on the fly.

The header is made from metadata alone (formats/netcdf), so ``stat`` reads no
chunk; it is made again whenever an array's metadata changes (a resize through
the mount, a new document from the store), and the size with it. Each variable's
data is read through its array's live state, as ``array.raw`` reads it, and turned
big-endian in a worker thread; the padding between variables reads as zeros.

The file is ``volatile``: handles bypass the page cache, so a read after a resize
follows the new layout. Which arrays are variables is settled when the group is
listed (its numeric child arrays); their shapes and attributes are read live.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import trio

from zarrfs.core.arrays import ArrayState
from zarrfs.formats.model import ArrayMeta
from zarrfs.formats.netcdf import GroupFile, Member, Placed, carried_attributes, group_file
from zarrfs.views.base import View

log = logging.getLogger(__name__)

NC_NAME = "group.nc"

Arrays = Callable[[], Sequence[tuple[str, ArrayState]]]


def _swap(data: bytes | memoryview, itemsize: int) -> bytes:
    """Each element's bytes the other way round (worker thread)."""
    return np.frombuffer(data, dtype=f"u{itemsize}").byteswap().tobytes()


class NetcdfView(View):
    """``group.nc`` of a group: ``arrays`` gives its variables' names and live
    states, ``group_attrs`` its global attributes, both asked on each use."""

    volatile = True

    def __init__(self, path: str, arrays: Arrays, group_attrs: Callable[[], Mapping[str, Any]]):
        self.path = path or "/"
        self._arrays = arrays
        self._group_attrs = group_attrs
        # The file as last made, and the metadata it was made from (by identity).
        self._made: GroupFile | None = None
        self._made_from: tuple[object, ...] = ()
        self._states: dict[str, ArrayState] = {}
        self._begins: list[int] = []
        self._left_out: tuple[tuple[str, str], ...] = ()

    def _file(self) -> GroupFile:
        arrays = self._arrays()
        attrs = self._group_attrs()
        metas: list[ArrayMeta] = [state.meta for _, state in arrays]
        sources = (attrs, *metas)
        made = self._made
        if (
            made is None
            or len(sources) != len(self._made_from)
            or any(a is not b for a, b in zip(sources, self._made_from, strict=True))
        ):
            members = [
                Member(name, meta, carried_attributes(meta))
                for (name, _), meta in zip(arrays, metas, strict=True)
            ]
            made = group_file(members, attrs)
            self._made, self._made_from = made, sources
            self._states = dict(arrays)
            self._begins = [v.begin for v in made.variables]
            if made.left_out != self._left_out:
                self._left_out = made.left_out
                for name, why in made.left_out:
                    log.info("%s/%s: not in %s: %s", self.path, name, NC_NAME, why)
        return made

    @property
    def size(self) -> int:
        return self._file().size

    def _at(self, made: GroupFile, offset: int) -> Placed | None:
        """The variable whose data or padding holds ``offset`` (None: the header)."""
        index = bisect.bisect_right(self._begins, offset) - 1
        return made.variables[index] if index >= 0 else None

    async def read(self, offset: int, size: int) -> bytes | memoryview:
        made = self._file()
        end = min(offset + size, made.size)
        pieces: list[bytes | memoryview] = []
        position = offset
        while position < end:
            placed = self._at(made, position)
            if placed is None:
                stop = min(end, len(made.header))
                pieces.append(made.header[position:stop])
            elif position < placed.begin + placed.nbytes:
                stop = min(end, placed.begin + placed.nbytes)
                pieces.append(await self._data(placed, position - placed.begin, stop - position))
            else:  # padding up to the next variable, or the end of the file
                following = bisect.bisect_right(self._begins, position)
                limit = self._begins[following] if following < len(self._begins) else made.size
                stop = min(end, limit)
                pieces.append(bytes(stop - position))
            position = stop
        if len(pieces) == 1:
            return pieces[0]
        return b"".join(pieces)

    async def _data(self, placed: Placed, start: int, length: int) -> bytes | memoryview:
        """``length`` bytes of the variable's big-endian data from ``start``."""
        state = self._states[placed.member]
        if not placed.swapped:
            data = await state.read(start, length)
            return data if len(data) == length else bytes(data) + bytes(length - len(data))
        itemsize = placed.dtype.itemsize
        first = start - start % itemsize
        last = min(-(-(start + length) // itemsize) * itemsize, placed.nbytes)
        data = await state.read(first, last - first)
        if len(data) != last - first:  # shrunk since the header was made
            data = bytes(data) + bytes(last - first - len(data))
        swapped = await trio.to_thread.run_sync(_swap, data, itemsize)
        return memoryview(swapped)[start - first : start - first + length]

    def prefetch(self, offset: int) -> None:
        made = self._made
        if made is None or not made.variables:
            return
        placed = self._at(made, offset)
        if placed is None or offset >= placed.begin + placed.nbytes:
            # In the header or a padding: the next variable's data is what follows.
            following = bisect.bisect_right(self._begins, offset)
            if following >= len(made.variables):
                return
            placed, offset = made.variables[following], made.variables[following].begin
        state = self._states.get(placed.member)
        if state is not None:
            state.prefetch(offset - placed.begin)
