"""``array.raw``: the whole array as C-order bytes, assembled from decoded chunks."""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np
import trio

from zarrfs.core.arrays import ArrayState, Buffer
from zarrfs.core.layout import Index, plan_range
from zarrfs.errors import ZarrfsError
from zarrfs.formats.model import ArrayMeta
from zarrfs.views.base import View


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
    void = np.dtype((np.void, meta.itemsize))
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

    buf = np.empty(plan.n_elements, dtype=void)
    fill = np.frombuffer(meta.fill_bytes, dtype=void)[0]
    for index, pieces in plan.chunks.items():
        chunk = chunks[index]
        source = None if chunk is None else chunk.view(void)
        for piece in pieces:
            count = math.prod(piece.box_shape)
            box = buf[piece.box_start : piece.box_start + count].reshape(piece.box_shape)
            box[piece.box_selection] = fill if source is None else source[piece.chunk_selection]
    flat = buf.view(np.uint8)
    return flat[plan.byte_offset : plan.byte_offset + plan.nbytes].tobytes()


class RawView(View):
    """``array.raw``: reads and writes go to the array's live state."""

    writable = True

    def __init__(self, state: ArrayState) -> None:
        self.state = state

    @property
    def size(self) -> int:
        return self.state.size

    async def read(self, offset: int, size: int) -> Buffer:
        return await self.state.read(offset, size)

    def prefetch(self, offset: int) -> None:
        self.state.prefetch(offset)

    async def write(self, offset: int, data: bytes) -> int:
        return await self.state.write(offset, data)

    def truncate(self, size: int) -> None:
        self.state.truncate(size)
