"""``array.raw``: the whole array as C-order bytes, assembled from decoded chunks."""

from __future__ import annotations

from zarrfs.core.arrays import ArrayState
from zarrfs.core.read.reading import Buffer, read_array_bytes
from zarrfs.views.base import View

__all__ = ["RawView", "read_array_bytes"]


class RawView(View):
    """``array.raw``: reads and writes go to the array's live state."""

    writable = True

    def __init__(self, state: ArrayState) -> None:
        self.state = state

    @property
    def size(self) -> int:
        return self.state.size

    async def read(self, offset: int, size: int) -> Buffer:
        data = await self.state.read(offset, size)
        self.state.cache.counters.bytes_read += len(data)
        return data

    def prefetch(self, offset: int) -> None:
        self.state.prefetch(offset)

    async def write(self, offset: int, data: bytes) -> int:
        return await self.state.write(offset, data)

    def truncate(self, size: int) -> None:
        self.state.truncate(size)
