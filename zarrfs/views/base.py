"""Virtual files: each has an exact size and answers byte-range reads.

``View`` is all the FUSE layer (fuse/operations.py) knows of a file. Beside its
size, reads and writes, a view declares how the kernel may cache it
(``volatile``, ``document``), whether it may be written (``writable``) and
whether its reads count as array bytes (``reads_counted``); its hooks say what
a write waits for (``admit``), what fsync and close store (``sync``), what close
leaves pending (``unstored``) and its extended attributes (``xattrs``). Every
hook does nothing but for the files of an array (``ArrayView``), which take the
array's live state and the mount's write-back from the tree that makes them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping

from zarrfs.core.arrays import ArrayState
from zarrfs.core.write.writeback import WriteBack
from zarrfs.errors import AccessDeniedError
from zarrfs.views.xattrs import array_xattrs


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
    # A metadata document: on a write mount a flush may rewrite it at any time.
    document = False
    # What reads return is the array's bytes (array.raw, array.npy): counted as
    # ``bytes_read`` (core/counters.py).
    reads_counted = False

    def size_at_hand(self) -> int | None:
        """The size, or None where working it out would cost more than a listing
        should (``group.nc``: every array of its group): then it is asked at the
        file's first lookup or stat."""
        return self.size

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

    async def admit(self) -> None:  # noqa: B027 - only an array's files fill the write cache
        """Before a write: wait until the write cache may take more data."""

    async def sync(self) -> None:  # noqa: B027 - only an array's files hold unstored data
        """fsync(), and close() after writes: what was written through the mount to
        the array this file shows is in the store (or the store's error raised)."""

    def unstored(self) -> str | None:
        """What writes left in memory that no flush can store (a partial row), for
        the log after close(); None when nothing is."""
        return None

    def xattrs(self) -> dict[str, bytes]:
        """The file's extended attributes: an array's files have the array's."""
        return {}


class ArrayView(View):
    """A file made from an array's live state: ``array.raw``, ``array.npy`` and
    the sidecar headers. ``writeback`` is the mount's (None: read-only)."""

    def __init__(self, state: ArrayState, writeback: WriteBack | None = None) -> None:
        self.state = state
        self.writeback = writeback

    async def admit(self) -> None:
        if self.writeback is not None:
            await self.writeback.admit()

    async def sync(self) -> None:
        if self.writeback is not None:
            await self.writeback.flush_array(self.state)

    def unstored(self) -> str | None:
        tail = self.state.tail
        if not tail:
            return None
        return f"{self.state.meta.display_name}: {len(tail)} bytes of an incomplete row"

    def xattrs(self) -> dict[str, bytes]:
        return array_xattrs(self.state.meta)


class DocumentView(View):
    """A metadata document, read live from its node's documents (a resize's flush
    replaces them: core/write/documents.py)."""

    document = True

    def __init__(self, documents: Mapping[str, bytes], name: str) -> None:
        self.documents = documents
        self.name = name

    @property
    def size(self) -> int:
        return len(self.documents[self.name])

    async def read(self, offset: int, size: int) -> bytes:
        return self.documents[self.name][offset : offset + size]
