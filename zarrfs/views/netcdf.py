"""``group.nc``: a group's numeric arrays as one netCDF classic file, made on the fly.

The header is made from metadata alone (formats/netcdf), so ``stat`` reads no
chunk; it is made again whenever an array's metadata changes (a resize through
the mount, a new document from the store), and the size with it. Each variable's
data is read through its array's live state, as ``array.raw`` reads it, and turned
big-endian in a worker thread of its own, ahead of a stream in blocks
(``_SwappedAhead``) so that its reads are slices; arrays stored big-endian or of
one byte are served as ``array.raw`` serves them. The padding between variables
reads as zeros.

The file is ``volatile``: handles bypass the page cache, so a read after a resize
follows the new layout. Which arrays are variables is settled when the group is
listed (its numeric child arrays); their shapes and attributes are read live.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import trio

from zarrfs.core.arrays import ArrayState
from zarrfs.core.pool import WorkerPool
from zarrfs.formats.model import ArrayMeta
from zarrfs.formats.netcdf import GroupFile, Member, Placed, carried_attributes, group_file
from zarrfs.views.base import View

log = logging.getLogger(__name__)

NC_NAME = "group.nc"

# A stream's data is turned big-endian ahead of it in blocks this large, this many
# blocks ahead of the one it reads (small enough that the kernel copies a block
# while it is still in the CPU's cache); at most this many are kept, for every file
# of the mount together (so at most 16 MiB, whatever was read).
SWAP_BLOCK = 1 << 20
SWAP_AHEAD = 2
SWAP_KEPT = 16

# The swaps run in a thread of their own, never on the FUSE thread: in the decoders'
# queue a swap a reader waits for (a quarter of a millisecond) would wait behind the
# decode of a whole chunk ahead of it (several), and the reader with it
# (docs/benchmarks.md, "group.nc").
_SWAPPER = WorkerPool(1, "zarrfs-swap")

Arrays = Callable[[], Sequence[tuple[str, ArrayState]]]


def _swap(data: bytes | memoryview, itemsize: int) -> memoryview:
    """Each element's bytes the other way round (worker thread): one copy, by
    numpy's vectorised cast (several times faster than ``byteswap``)."""
    swapped = np.frombuffer(data, dtype=f"<u{itemsize}").astype(f">u{itemsize}")
    return memoryview(swapped.view(np.uint8))


def _swap_all(pieces: Sequence[bytes | memoryview], itemsize: int) -> memoryview:
    """The pieces one after the other, each element's bytes the other way round."""
    out = np.empty(sum(map(len, pieces)) // itemsize, dtype=f">u{itemsize}")
    at = 0
    for piece in pieces:
        count = len(piece) // itemsize
        out[at : at + count] = np.frombuffer(piece, dtype=f"<u{itemsize}")
        at += count
    return memoryview(out.view(np.uint8))


async def _swapped(placed: Placed, state: ArrayState, start: int, length: int) -> memoryview:
    """``length`` bytes of a little-endian variable's data from ``start``, big-endian."""
    itemsize = placed.dtype.itemsize
    first = start - start % itemsize
    last = min(-(-(start + length) // itemsize) * itemsize, placed.nbytes)
    data = await state.read(first, last - first)
    if len(data) != last - first:  # shrunk since the header was made
        data = bytes(data) + bytes(last - first - len(data))
    # A pool's thread (core/pool.py): no thread woken per call, as trio.to_thread would.
    swapped = await _SWAPPER.run(_swap, data, itemsize)
    return swapped[start - first : start - first + length]


@dataclass(eq=False)
class _Block:
    """A block of a variable's big-endian data, made ahead of a stream from the
    array as it was then (its metadata and its count of writes)."""

    state: ArrayState
    meta: ArrayMeta
    changes: int
    first: int  # where its data begins in the variable's
    done: trio.Event = field(default_factory=trio.Event)
    data: memoryview | None = None

    def valid(self, state: ArrayState) -> bool:
        return self.state is state and self.meta is state.meta and self.changes == state.changes


class _SwappedAhead:
    """The data in blocks of the file (SWAP_BLOCK bytes, aligned in the file as a
    reader's requests are) turned big-endian in the swap thread ahead of a stream, so
    that its reads are slices: a worker thread's answer per read would cost as much
    as the copy. One instance serves every file: at most SWAP_KEPT blocks are
    kept, the oldest dropped first; one made before a write or a resize of its
    array is not used."""

    def __init__(self) -> None:
        self._blocks: OrderedDict[tuple[object, str, int], _Block] = OrderedDict()

    def start(self, file: object, placed: Placed, state: ArrayState, number: int) -> None:
        """Block ``number`` of ``file``, where it holds the variable's data."""
        key = (file, placed.member, number)
        found = self._blocks.get(key)
        if found is not None and found.valid(state):
            return
        start = max(number * SWAP_BLOCK - placed.begin, 0)
        stop = min((number + 1) * SWAP_BLOCK - placed.begin, placed.nbytes)
        if start >= stop:
            return
        itemsize = placed.dtype.itemsize
        first = start - start % itemsize  # whole elements
        last = min(-(-stop // itemsize) * itemsize, placed.nbytes)
        block = _Block(state, state.meta, state.changes, first)
        self._blocks[key] = block
        self._blocks.move_to_end(key)
        while len(self._blocks) > SWAP_KEPT:
            self._blocks.popitem(last=False)
        trio.lowlevel.spawn_system_task(self._fill, block, last - first, itemsize)

    @staticmethod
    async def _fill(block: _Block, length: int, itemsize: int) -> None:
        first = block.first
        state = block.state
        # Read chunk by chunk where chunks are runs of the array's bytes: each piece
        # is then a slice of a cached chunk, not a copy assembled from several.
        run = state.live.run or length
        cuts = [first, *range((first // run + 1) * run, first + length, run), first + length]
        try:
            pieces = [await state.read(a, b - a) for a, b in itertools.pairwise(cuts)]
            if sum(map(len, pieces)) == length:
                block.data = await _SWAPPER.run(_swap_all, pieces, itemsize)
        except Exception as e:  # the reader then reads the range itself, and is told
            log.debug("%s: no block ahead at %d: %s", block.meta.display_name, first, e)
        finally:
            block.done.set()

    async def take(
        self, file: object, placed: Placed, state: ArrayState, start: int, length: int
    ) -> memoryview | None:
        """The range (inside one block) from a block made or under way, else None."""
        number = (placed.begin + start) // SWAP_BLOCK
        block = self._blocks.get((file, placed.member, number))
        if block is None or not block.valid(state):
            return None
        await block.done.wait()
        data = block.data
        if data is None or not block.valid(state):
            return None
        offset = start - block.first
        if offset < 0 or offset + length > len(data):
            return None
        return data[offset : offset + length]


_AHEAD = _SwappedAhead()


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
            if placed is None:
                stop = min(end, len(made.header))
                pieces.append(made.header[position:stop])
            elif position < placed.begin + placed.nbytes:
                stop = min(end, placed.begin + placed.nbytes)
                state = states[placed.member]
                pieces.append(
                    await self._data(placed, state, position - placed.begin, stop - position)
                )
            else:  # padding up to the next variable, or the end of the file
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
        if not placed.swapped:
            data = await state.read(start, length)
            return data if len(data) == length else bytes(data) + bytes(length - len(data))
        pieces = []
        end = start + length
        while start < end:
            stop = min(end, ((placed.begin + start) // SWAP_BLOCK + 1) * SWAP_BLOCK - placed.begin)
            piece = await _AHEAD.take(self, placed, state, start, stop - start)
            if piece is None:
                piece = await _swapped(placed, state, start, stop - start)
            pieces.append(piece)
            start = stop
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

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
        state.prefetch(offset - placed.begin)
        if placed.swapped:
            number = offset // SWAP_BLOCK
            for ahead in range(number, number + SWAP_AHEAD + 1):
                _AHEAD.start(self, placed, state, ahead)
