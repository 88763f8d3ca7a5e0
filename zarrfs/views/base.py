"""Virtual files: each has an exact size and answers byte-range reads."""

from __future__ import annotations

from abc import ABC, abstractmethod


class View(ABC):
    @property
    @abstractmethod
    def size(self) -> int: ...

    @abstractmethod
    async def read(self, offset: int, size: int) -> bytes:
        """Exactly ``size`` bytes from ``offset``, fewer only at end of file."""


class BytesView(View):
    """A file whose content is held in memory: the store's metadata documents, ``info``."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    @property
    def size(self) -> int:
        return len(self.data)

    async def read(self, offset: int, size: int) -> bytes:
        return self.data[offset : offset + size]
