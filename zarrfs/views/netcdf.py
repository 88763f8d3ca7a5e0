"""``group.nc``: a group's numeric arrays as one netCDF classic file, made on the fly.

The header is made from metadata alone (formats/netcdf), so ``stat`` reads no
chunk; it is made again whenever an array's metadata changes (a resize through
the mount, a new document from the store), and the size with it. Each variable's
data is read through its array's live state: little-endian arrays through its
big-endian twin (core/read/twinreads.py), whose chunks the decoders turn round as
they decode them, so that a stream's reads are slices of cached chunks or stripes
as ``array.raw``'s are; arrays stored big-endian or of one byte as ``array.raw``
reads them. The padding between variables reads as zeros.

The file is ``volatile``: handles bypass the page cache, so a read after a resize
follows the new layout. Which arrays are variables is settled when the group is
listed (its numeric child arrays); their shapes and attributes are read live.
"""

from __future__ import annotations

import bisect
import logging
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from zarrfs.core.arrays import ArrayState
from zarrfs.formats.model import ArrayMeta
from zarrfs.formats.netcdf import GroupFile, Member, Placed, carried_attributes, group_file
from zarrfs.views.base import View

log = logging.getLogger(__name__)

NC_NAME = "group.nc"

Arrays = Callable[[], Sequence[tuple[str, ArrayState]]]


class NetcdfView(View):
    """``group.nc`` of a group: ``arrays`` gives its variables' names and live
    states, ``group_attrs`` its global attributes, both asked on each use."""

    volatile = True

    def __init__(self, path: str, arrays: Arrays, group_attrs: Callable[[], Mapping[str, Any]]):
        self.path = path or "/"
        self._arrays = arrays
        self._group_attrs = group_attrs
        # The file as last made, and what it was made from: the group's attributes,
        # and each array's state and metadata, weakly (a hierarchy listed from
        # consolidated metadata lets go of the nodes not used lately).
        self._made: GroupFile | None = None
        self._attrs: Mapping[str, Any] | None = None
        self._sources: dict[str, tuple[weakref.ref[ArrayState], weakref.ref[ArrayMeta]]] = {}
        self._begins: list[int] = []
        self._left_out: tuple[tuple[str, str], ...] = ()

    def _file(self) -> tuple[GroupFile, dict[str, ArrayState]]:
        """The file as its arrays are now, and their states (held while used)."""
        made, states = self._made, self._kept()
        if made is not None and states is not None:
            return made, states
        arrays = self._arrays()
        attrs = self._group_attrs()
        metas = [state.meta for _, state in arrays]
        members = [
            Member(name, meta, carried_attributes(meta))
            for (name, _), meta in zip(arrays, metas, strict=True)
        ]
        made = group_file(members, attrs)
        self._made, self._attrs = made, attrs
        self._sources = {
            name: (weakref.ref(state), weakref.ref(meta))
            for (name, state), meta in zip(arrays, metas, strict=True)
        }
        self._begins = [v.begin for v in made.variables]
        if made.left_out != self._left_out:
            self._left_out = made.left_out
            for name, why in made.left_out:
                log.info("%s/%s: not in %s: %s", self.path, name, NC_NAME, why)
        return made, dict(arrays)

    def _kept(self) -> dict[str, ArrayState] | None:
        """The states the file was made from, if each is still there with the same
        metadata, and the group's attributes are the same (else None)."""
        if self._made is None:
            return None
        attrs = self._group_attrs()
        if attrs is not self._attrs and attrs != self._attrs:
            return None
        states = {}
        for name, (state_ref, meta_ref) in self._sources.items():
            state = state_ref()
            if state is None or state.meta is not meta_ref():
                return None
            states[name] = state
        return states

    @property
    def size(self) -> int:
        return self._file()[0].size

    def size_at_hand(self) -> int | None:
        return self._made.size if self._kept() is not None and self._made else None

    def _at(self, made: GroupFile, offset: int) -> Placed | None:
        """The variable whose data or padding holds ``offset`` (None: the header)."""
        index = bisect.bisect_right(self._begins, offset) - 1
        return made.variables[index] if index >= 0 else None

    async def read(self, offset: int, size: int) -> bytes | memoryview:
        made, states = self._file()
        end = min(offset + size, made.size)
        pieces: list[bytes | memoryview] = []
        position = offset
        while position < end:
            placed = self._at(made, position)
            if placed is None and position < len(made.header):
                stop = min(end, len(made.header))
                pieces.append(made.header[position:stop])
            elif placed is not None and position < placed.begin + placed.nbytes:
                stop = min(end, placed.begin + placed.nbytes)
                state = states[placed.member]
                pieces.append(
                    await self._data(placed, state, position - placed.begin, stop - position)
                )
            else:  # padding up to the next variable (or the first), or the end of the file
                following = bisect.bisect_right(self._begins, position)
                limit = self._begins[following] if following < len(self._begins) else made.size
                stop = min(end, limit)
                pieces.append(bytes(stop - position))
            position = stop
        if len(pieces) == 1:
            return pieces[0]
        return b"".join(pieces)

    async def _data(
        self, placed: Placed, state: ArrayState, start: int, length: int
    ) -> bytes | memoryview:
        """``length`` bytes of the variable's big-endian data from ``start``."""
        if placed.swapped:
            return await state.big_endian.read(start, length)
        data = await state.read(start, length)
        return data if len(data) == length else bytes(data) + bytes(length - len(data))

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
        source = self._sources.get(placed.member)
        state = source[0]() if source is not None else None
        if state is None or source is None or state.meta is not source[1]():
            return  # changed since the file was made: its next read makes it again
        if placed.swapped:
            state.big_endian.prefetch(offset - placed.begin)
        else:
            state.prefetch(offset - placed.begin)
