"""Reading an array's bytes: chunks as reads see them, assembled into C-order bytes.

``ArrayReads`` is the read side of ``ArrayState`` (core/arrays.py): what a read
returns, the fast path for chunks that are runs of array.raw, and read-ahead. It
sees the state's dirty, flushing and stale chunks through the attributes and
methods ``ArrayState`` defines.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

import numpy as np
import trio

from zarrfs.core.pool import BACKGROUND
from zarrfs.errors import ZarrfsError
from zarrfs.formats.grid.layout import (
    Index,
    RangePlan,
    contiguous_chunk_nbytes,
    contiguous_runs,
    plan_range,
)
from zarrfs.formats.grid.stripes import Stripe, StripeLayout, stripe_layout
from zarrfs.formats.model import ArrayMeta

if TYPE_CHECKING:
    from zarrfs.core.read.chunks import ChunkCache
    from zarrfs.core.write.chunkstate import Dirty

# Sequential readers get the chunks ahead of them loaded in the background.
READ_AHEAD = 8 * 2**20
REMOTE_READ_AHEAD = 32 * 2**20
READ_AHEAD_CHUNKS = 4

# Stripes (core/read/stripes.py) are at most this large, and at most an eighth of the
# cache; a stripe with the chunks it needs must fit a quarter of the cache, or
# reads are assembled request by request from the chunks.
STRIPE_MAX = 32 * 2**20
# Stripes assembled ahead of a stream, at most (each one is many chunks: enough
# decoding to keep every core busy).
STRIPES_AHEAD = 2

Buffer = bytes | memoryview  # what reads return: a slice of a chunk needs no copy


class ChunkSource(Protocol):
    async def get(self, meta: ArrayMeta, index: Index) -> np.ndarray | None: ...


async def read_array_bytes(cache: ChunkSource, meta: ArrayMeta, offset: int, size: int) -> bytes:
    """Bytes ``[offset, offset + size)`` of the C-order array, clipped at its end.

    Every chunk the range touches is fetched once, concurrently; the copies are
    bytewise (a void dtype of the element size), so NaN payloads and odd dtypes
    survive untouched.
    """
    plan = plan_range(meta.shape, meta.chunks, meta.itemsize, offset, size)
    if plan.nbytes == 0:
        return b""
    chunks: dict[Index, np.ndarray | None] = {}
    errors: list[ZarrfsError] = []

    async def fetch(index: Index) -> None:
        try:
            chunks[index] = await cache.get(meta, index)
        except ZarrfsError as e:
            errors.append(e)

    if len(plan.chunks) == 1:
        await fetch(next(iter(plan.chunks)))
    else:
        async with trio.open_nursery() as nursery:
            for index in plan.chunks:
                nursery.start_soon(fetch, index)
    if errors:
        raise errors[0]
    return bytes(assemble(meta, plan, chunks))


def assemble(
    meta: ArrayMeta,
    plan: RangePlan,
    chunks: Mapping[Index, np.ndarray | None],
    out: np.ndarray | None = None,
) -> memoryview:
    """The plan's bytes from its chunks (None: fill value), in a fresh buffer of
    their own (no copy to return them), or in ``out`` (uint8, the plan's whole
    elements); no await, so atomic. Worker threads call it for stripes: numpy
    copies these without the GIL."""
    void = np.dtype((np.void, meta.itemsize))
    buf = np.empty(plan.n_elements, dtype=void) if out is None else out.view(void)
    fill = np.frombuffer(meta.fill_bytes, dtype=void)[0]
    for index, pieces in plan.chunks.items():
        chunk = chunks[index]
        source = None if chunk is None else chunk.view(void)
        for piece in pieces:
            count = math.prod(piece.box_shape)
            box = buf[piece.box_start : piece.box_start + count].reshape(piece.box_shape)
            box[piece.box_selection] = fill if source is None else source[piece.chunk_selection]
    flat = memoryview(buf.view(np.uint8))
    return flat[plan.byte_offset : plan.byte_offset + plan.nbytes]


class ArrayReads:
    """The read path of one array's live state (see ArrayState)."""

    meta: ArrayMeta
    cache: ChunkCache
    dirty: Mapping[Index, Dirty]
    flushing: Mapping[Index, np.ndarray]
    tail: bytearray
    low_rows: int
    _prefetched_to: int
    _released_to: int
    _striping: tuple[ArrayMeta, int, StripeLayout | None] | None = None
    _run: tuple[ArrayMeta, int | None] | None = None

    def is_stale(self, index: Index) -> bool:
        raise NotImplementedError

    async def get(self, meta: ArrayMeta, index: Index) -> np.ndarray | None:
        raise NotImplementedError

    async def read(self, offset: int, size: int) -> Buffer:
        meta = self.meta
        stored = meta.nbytes
        out: Buffer = b""
        if offset < stored:
            length = min(size, stored - offset)
            run = self._chunk_run()
            if run is not None:
                at_hand = self._read_at_hand(run, offset, length)
                out = await self._read_runs(run, offset, length) if at_hand is None else at_hand
            else:
                striped = await self._read_striped(offset, length)
                out = await self._read_planned(offset, length) if striped is None else striped
        if offset + size > stored and self.tail:
            start = max(offset - stored, 0)
            out = bytes(out) + bytes(self.tail[start : offset + size - stored])
        return out

    async def _read_planned(self, offset: int, length: int) -> Buffer:
        """Any layout: the chunks the range touches, fetched concurrently unless all
        are at hand (a sequential reader's usual case: no tasks to start)."""
        meta = self.meta
        plan = plan_range(meta.shape, meta.chunks, meta.itemsize, offset, length)
        if plan.nbytes == 0:
            return b""
        indices = list(plan.chunks)
        chunks = await self._get_many(indices)
        return assemble(meta, plan, dict(zip(indices, chunks)))

    # -- stripes ------------------------------------------------------------------------------

    def stripe_layout(self) -> StripeLayout | None:
        """How this array is cut into stripes; None where reads do without them
        (chunks that are runs of array.raw are their own stripes, and a row of
        chunks too large for the cache is read request by request)."""
        meta, budget = self.meta, self.cache.max_bytes
        cached = self._striping
        if cached is not None and cached[0] is meta and cached[1] == budget:
            return cached[2]  # (a resize makes a new ArrayMeta)
        layout = None
        if contiguous_chunk_nbytes(meta.shape, meta.chunks, meta.itemsize, meta.order) is None:
            cap = min(STRIPE_MAX, budget // 8)
            layout = stripe_layout(meta.shape, meta.chunks, meta.itemsize, cap)
            if layout is not None and layout.chunk_row_nbytes + layout.max_stripe_nbytes > (
                budget // 4
            ):
                layout = None
        self._striping = (meta, budget, layout)
        return layout

    def _clean(self, layout: StripeLayout, stripe: Stripe) -> bool:
        """No chunk of the stripe is dirty, held by a flush, or stale: the stored
        chunks are what reads see, and a stripe may be assembled from them."""
        end_row = (stripe.prefix[0] + 1) * self.meta.chunks[0]
        if not self.dirty and not self.flushing and end_row <= self.low_rows:
            return True
        return not any(
            index in self.dirty or index in self.flushing or self.is_stale(index)
            for index in layout.chunk_indices(stripe)
        )

    async def _read_striped(self, offset: int, length: int) -> Buffer | None:
        """Slices of stripes, where every stripe the range needs is cached or being
        assembled (a stream's read-ahead started them); else None."""
        layout = self.stripe_layout()
        if layout is None:
            return None
        stripes = self.cache.stripes
        path = self.meta.path
        needed = []
        position, end = offset, offset + length
        while position < end:
            stripe = layout.stripe_at(position)
            if not stripes.pending(path, stripe) or not self._clean(layout, stripe):
                return None
            needed.append(stripe)
            position = stripe.stop
        pieces: list[Buffer] = []
        for stripe in needed:
            data = await stripes.get(self.meta, layout, stripe)
            lo = max(offset, stripe.start) - stripe.start
            hi = min(end, stripe.stop) - stripe.start
            pieces.append(memoryview(data)[lo:hi])
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def _prefetch_stripes(self, layout: StripeLayout, offset: int) -> None:
        """A stream at ``offset``: the stripes from there on are assembled ahead of
        it, and those it has passed make room (the page cache holds their bytes)."""
        meta, stripes = self.meta, self.cache.stripes
        behind = offset - layout.max_stripe_nbytes
        if behind > 0:
            stripes.release_before(meta.path, behind)
        if not self.cache.read_ahead:
            return
        per_stripe = layout.chunk_row_nbytes + layout.max_stripe_nbytes
        ahead = max(1, min(STRIPES_AHEAD, self.cache.max_bytes // 4 // per_stripe))
        position = offset
        for _ in range(ahead + 1):
            if position >= meta.nbytes or stripes.under_way(meta.path) > ahead:
                return
            stripe = layout.stripe_at(position)
            if not stripes.pending(meta.path, stripe) and self._clean(layout, stripe):
                stripes.start(meta, layout, stripe, BACKGROUND)
            position = stripe.stop

    def _chunk_run(self) -> int | None:
        """The bytes of array.raw each chunk is a run of (None: chunks are not runs),
        worked out once per metadata (a resize makes a new ArrayMeta)."""
        meta = self.meta
        cached = self._run
        if cached is not None and cached[0] is meta:
            return cached[1]
        run = contiguous_chunk_nbytes(meta.shape, meta.chunks, meta.itemsize, meta.order)
        self._run = (meta, run)
        return run

    def _read_at_hand(self, chunk_nbytes: int, offset: int, length: int) -> Buffer | None:
        """A read within one chunk that needs no waiting (random reads into a hot
        array): its slice, without the tasks and lists of the general path."""
        number, start = divmod(offset, chunk_nbytes)
        if start + length > chunk_nbytes:
            return None
        found, chunk = self._ready((number, *(0,) * (len(self.meta.shape) - 1)))
        return self._piece(chunk, start, start + length) if found else None

    async def _read_runs(self, chunk_nbytes: int, offset: int, length: int) -> Buffer:
        """The fast path: chunks are runs of array.raw, served as slices of their bytes."""
        runs = contiguous_runs(chunk_nbytes, offset, length)
        trailing = (0,) * (len(self.meta.shape) - 1)
        chunks = await self._get_many([(number, *trailing) for number, _, _ in runs])
        pieces = [self._piece(chunk, start, stop) for (_, start, stop), chunk in zip(runs, chunks)]
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def _piece(self, chunk: np.ndarray | None, start: int, stop: int) -> Buffer:
        """Bytes ``start:stop`` of a chunk as array.raw holds it (None: fill value)."""
        if chunk is None:
            fill = self.meta.fill_bytes
            phase = start % len(fill)
            count = -(-(stop - start + phase) // len(fill))
            return (fill * count)[phase : phase + stop - start]
        part = memoryview(chunk.reshape(-1).view(np.uint8))[start:stop]
        # Cached chunks are immutable; a dirty one may change after we return.
        return bytes(part) if chunk.flags.writeable else part

    def prefetch(self, offset: int) -> None:
        """A reader is streaming from ``offset``: load the chunks ahead of it.

        The window is a few chunks (at least READ_AHEAD bytes, at most a quarter of
        the cache, so read-ahead cannot evict what it loaded before it is read).
        """
        meta = self.meta
        layout = self.stripe_layout()
        if layout is not None:
            if offset < meta.nbytes:
                self._prefetch_stripes(layout, offset)
            return
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
        # Over a network each request waits its latency: more of them in flight.
        ahead = READ_AHEAD if self.cache.fetch_pool is None else REMOTE_READ_AHEAD
        wanted = max(ahead, READ_AHEAD_CHUNKS * self.meta.chunk_nbytes)
        return min(wanted, self.cache.max_bytes // 4)

    def _prefetch_chunk(self, index: Index) -> bool:
        if index in self.dirty or index in self.flushing or self.is_stale(index):
            return True
        return self.cache.prefetch(self.meta, index)

    async def _get_many(self, indices: list[Index]) -> list[np.ndarray | None]:
        """Chunks as reads see them, fetched concurrently; the first error is raised."""
        if len(indices) == 1:
            return [await self.get(self.meta, indices[0])]
        ready = [self._ready(index) for index in indices]
        results = [chunk for _, chunk in ready]
        if all(found for found, _ in ready):  # all at hand: no tasks to start
            return results
        errors: list[ZarrfsError] = []

        async def fetch(position: int, index: Index) -> None:
            try:
                results[position] = await self.get(self.meta, index)
            except ZarrfsError as e:
                errors.append(e)

        async with trio.open_nursery() as nursery:
            for position, (index, (found, _)) in enumerate(zip(indices, ready)):
                if not found:  # (each chunk asked of the cache once: hits count once)
                    nursery.start_soon(fetch, position, index)
        if errors:
            raise errors[0]
        return results

    def _ready(self, index: Index) -> tuple[bool, np.ndarray | None]:
        """(True, chunk) when ``get`` would answer without waiting, else (False, None)."""
        dirty = self.dirty.get(index)
        if dirty is not None:
            return (True, dirty.data) if dirty.mask is None else (False, None)
        if self.is_stale(index):
            return True, None
        if index in self.flushing:
            return True, self.flushing[index]
        return self.cache.ready(self.meta.path, index)
