"""Reading an array's bytes: chunks as reads see them, assembled into C-order bytes.

``ArrayReader`` answers reads of one array's stored rows (the pending partial row
past them is the writer's: core/write/writing.py) from its chunks as reads see them
(core/read/livechunks.py): slices of chunks where chunks are runs of array.raw,
slices of stripes where a stream has them assembled (core/read/stripes.py), else
assembled request by request.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Protocol

import numpy as np
import trio

from zarrfs.core.livemeta import fill_element, fill_run, void_dtype
from zarrfs.errors import ZarrfsError
from zarrfs.formats.grid.layout import Index, RangePlan, contiguous_runs, plan_range
from zarrfs.formats.grid.stripes import Stripe, StripeLayout, stripe_layout
from zarrfs.formats.model import ArrayMeta

if TYPE_CHECKING:
    from zarrfs.core.livemeta import LiveMeta
    from zarrfs.core.read.chunks import ChunkCache
    from zarrfs.core.read.livechunks import LiveChunks

# Stripes (core/read/stripes.py) are at most this large, and at most an eighth of the
# cache; a stripe with the chunks it needs must fit a quarter of the cache, or
# reads are assembled request by request from the chunks.
STRIPE_MAX = 32 * 2**20

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
    only: Iterable[Index] | None = None,
) -> memoryview:
    """The plan's bytes from its chunks (None: fill value), in a fresh buffer of
    their own (no copy to return them), or in ``out`` (uint8, the plan's whole
    elements); no await, so atomic. Worker threads call it for stripes: numpy
    copies these without the GIL. ``only``: the chunks to copy (the others are
    in ``out`` already)."""
    void = void_dtype(meta)
    buf = np.empty(plan.n_elements, dtype=void) if out is None else out.view(void)
    fill = fill_element(meta)
    for index in plan.chunks if only is None else only:
        pieces = plan.chunks[index]
        chunk = chunks[index]
        source = None if chunk is None else chunk.view(void)
        for piece in pieces:
            count = math.prod(piece.box_shape)
            box = buf[piece.box_start : piece.box_start + count].reshape(piece.box_shape)
            box[piece.box_selection] = fill if source is None else source[piece.chunk_selection]
    flat = memoryview(buf.view(np.uint8))
    return flat[plan.byte_offset : plan.byte_offset + plan.nbytes]


class ArrayReader:
    """The read path of one array: its stored rows as array.raw holds them."""

    def __init__(self, live: LiveMeta, chunks: LiveChunks, cache: ChunkCache) -> None:
        self._live = live
        self._chunks = chunks
        self._cache = cache
        self._striping: tuple[ArrayMeta, int, StripeLayout | None] | None = None
        self._last_stripe: tuple[StripeLayout, Stripe] | None = None

    async def read(self, offset: int, length: int) -> Buffer:
        """Bytes ``[offset, offset + length)``, inside the stored rows."""
        run = self._live.run
        if run is not None:
            at_hand = self._read_at_hand(run, offset, length)
            return await self._read_runs(run, offset, length) if at_hand is None else at_hand
        striped = await self._read_striped(offset, length)
        return await self._read_planned(offset, length) if striped is None else striped

    async def _read_planned(self, offset: int, length: int) -> Buffer:
        """Any layout: the chunks the range touches, fetched concurrently unless all
        are at hand (a sequential reader's usual case: no tasks to start)."""
        meta = self._live.meta
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
        meta, budget = self._live.meta, self._cache.max_bytes
        cached = self._striping
        if cached is not None and cached[0] is meta and cached[1] == budget:
            return cached[2]  # (a resize makes a new ArrayMeta)
        layout = None
        if self._live.run is None:
            cap = min(STRIPE_MAX, budget // 8)
            layout = stripe_layout(meta.shape, meta.chunks, meta.itemsize, cap)
            if layout is not None and layout.chunk_row_nbytes + layout.max_stripe_nbytes > (
                budget // 4
            ):
                layout = None
        self._striping = (meta, budget, layout)
        return layout

    def stripe_at(self, layout: StripeLayout, offset: int) -> Stripe:
        """``layout.stripe_at``, remembered: a stream's reads fall in one stripe
        after another."""
        last = self._last_stripe
        if last is not None and last[0] is layout and last[1].start <= offset < last[1].stop:
            return last[1]
        stripe = layout.stripe_at(offset)
        self._last_stripe = (layout, stripe)
        return stripe

    def clean(self, layout: StripeLayout, stripe: Stripe) -> bool:
        """No chunk of the stripe is dirty, held by a flush, or stale: the stored
        chunks are what reads see, and a stripe may be assembled from them."""
        end_row = (stripe.prefix[0] + 1) * self._live.meta.chunks[0]
        chunks = self._chunks
        return chunks.untouched_before(end_row) or all(
            chunks.stored(index) for index in layout.chunk_indices(stripe)
        )

    async def _read_striped(self, offset: int, length: int) -> Buffer | None:
        """Slices of stripes, where every stripe the range needs is cached or being
        assembled (a stream's read-ahead started them); else None."""
        layout = self.stripe_layout()
        if layout is None:
            return None
        stripes = self._cache.stripes
        path = self._live.meta.path
        needed = []
        position, end = offset, offset + length
        while position < end:
            stripe = self.stripe_at(layout, position)
            if not stripes.pending(path, stripe) or not self.clean(layout, stripe):
                return None
            needed.append(stripe)
            position = stripe.stop
        pieces: list[Buffer] = []
        for stripe in needed:
            data = await stripes.get(self._live.meta, layout, stripe)
            lo = max(offset, stripe.start) - stripe.start
            hi = min(end, stripe.stop) - stripe.start
            pieces.append(memoryview(data)[lo:hi])
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    # -- chunks that are runs of array.raw -----------------------------------------------------

    def _read_at_hand(self, chunk_nbytes: int, offset: int, length: int) -> Buffer | None:
        """A read within one chunk that needs no waiting (random reads into a hot
        array): its slice, without the tasks and lists of the general path."""
        number, start = divmod(offset, chunk_nbytes)
        if start + length > chunk_nbytes:
            return None
        found, chunk = self._chunks.ready((number, *self._live.trailing))
        return self._piece(chunk, start, start + length) if found else None

    async def _read_runs(self, chunk_nbytes: int, offset: int, length: int) -> Buffer:
        """The fast path: chunks are runs of array.raw, served as slices of their bytes."""
        runs = contiguous_runs(chunk_nbytes, offset, length)
        trailing = self._live.trailing
        chunks = await self._get_many([(number, *trailing) for number, _, _ in runs])
        pieces = [self._piece(chunk, start, stop) for (_, start, stop), chunk in zip(runs, chunks)]
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def _piece(self, chunk: np.ndarray | None, start: int, stop: int) -> Buffer:
        """Bytes ``start:stop`` of a chunk as array.raw holds it (None: fill value)."""
        if chunk is None:
            return fill_run(self._live.meta.fill_bytes, start, stop)
        part = memoryview(chunk.reshape(-1).view(np.uint8))[start:stop]
        # Cached chunks are immutable; a dirty one may change after we return.
        return bytes(part) if chunk.flags.writeable else part

    async def _get_many(self, indices: list[Index]) -> list[np.ndarray | None]:
        """Chunks as reads see them, fetched concurrently; the first error is raised."""
        chunks = self._chunks
        if len(indices) == 1:
            return [await chunks.get(self._live.meta, indices[0])]
        ready = [chunks.ready(index) for index in indices]
        results = [chunk for _, chunk in ready]
        if all(found for found, _ in ready):  # all at hand: no tasks to start
            return results
        missing = [index for index, (found, _) in zip(indices, ready) if not found]
        await chunks.start_runs(self._live.meta, missing)
        errors: list[ZarrfsError] = []

        async def fetch(position: int, index: Index) -> None:
            try:
                results[position] = await chunks.get(self._live.meta, index)
            except ZarrfsError as e:
                errors.append(e)

        async with trio.open_nursery() as nursery:
            for position, (index, (found, _)) in enumerate(zip(indices, ready)):
                if not found:  # (each chunk asked of the cache once: hits count once)
                    nursery.start_soon(fetch, position, index)
        if errors:
            raise errors[0]
        return results
