"""``array.raw``: the whole array as C-order bytes, assembled from decoded chunks."""

from __future__ import annotations

from zarrfs.core.read.reading import Buffer
from zarrfs.views.base import ArrayView


class RawView(ArrayView):
    """``array.raw``: reads and writes go to the array's live state."""

    writable = True
    reads_counted = True

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
