"""Virtual files: each has an exact size and answers byte-range reads."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping

from zarrfs.errors import AccessDeniedError


class View(ABC):
    @property
    @abstractmethod
    def size(self) -> int: ...

    @abstractmethod
    async def read(self, offset: int, size: int) -> bytes:
        """Exactly ``size`` bytes from ``offset``, fewer only at end of file."""

    # Array views override these; every other file is read-only.
    writable = False
    # Content made afresh on each read (never cached by the kernel), size from the
    # array's shape: set by ``info`` and the sidecar headers.
    volatile = False

    def prefetch(self, offset: int) -> None:  # noqa: B027 - only array views read ahead
        """A reader streams sequentially and will soon ask for ``offset`` onwards."""

    def closed(self) -> None:  # noqa: B027 - only array.npy keeps per-writer state
        """A handle that wrote to this file was closed."""

    async def write(self, offset: int, data: bytes) -> int:
        raise AccessDeniedError("metadata documents are read-only")

    def truncate(self, size: int) -> None:
        raise AccessDeniedError("metadata documents are read-only")

    def open_truncated(self) -> None:
        """Opened with O_TRUNC."""
        self.truncate(0)


class BytesView(View):
    """A file whose content is held in memory: the store's metadata documents, ``info``."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    @property
    def size(self) -> int:
        return len(self.data)

    async def read(self, offset: int, size: int) -> bytes:
        return self.data[offset : offset + size]


class DocumentView(View):
    """A metadata document, read live from its node's documents (a resize's flush
    replaces them: core/write/documents.py)."""

    def __init__(self, documents: Mapping[str, bytes], name: str) -> None:
        self.documents = documents
        self.name = name

    @property
    def size(self) -> int:
        return len(self.documents[self.name])

    async def read(self, offset: int, size: int) -> bytes:
        return self.documents[self.name][offset : offset + size]
