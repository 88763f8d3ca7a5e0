"""One exception type per failure kind, each carrying the errno the FUSE layer answers with."""

from __future__ import annotations

import errno as errnos


class ZarrfsError(Exception):
    """Base of every error zarrfs raises on purpose; ``errno`` is what a FUSE caller sees."""

    errno: int = errnos.EIO


class MetadataError(ZarrfsError):
    """A metadata document is missing a key, is not JSON, or describes an impossible array."""

    errno = errnos.EIO


class UnsupportedError(ZarrfsError):
    """Valid metadata that zarrfs cannot present as a flat file (e.g. object dtype)."""

    errno = errnos.EOPNOTSUPP


class ChunkError(ZarrfsError):
    """A chunk could not be decoded: corrupt, truncated, wrong size or unknown codec."""

    errno = errnos.EIO

    def __init__(self, array: str, key: str, reason: str) -> None:
        super().__init__(f"array {array!r}: chunk {key!r}: {reason}")
        self.array = array
        self.key = key
        self.reason = reason
        # The cache logs a chunk's failure once; later reads of it fail quietly.
        self.logged = False

    def __reduce__(self) -> tuple:
        # copy.copy and pickle rebuild it from its parts (not from the message)
        return (type(self), (self.array, self.key, self.reason), self.__dict__)


class StoreError(ZarrfsError):
    """The store failed to read or write a key (I/O error, permission, ...)."""

    errno = errnos.EIO

    def __init__(self, message: str, err: int = errnos.EIO) -> None:
        super().__init__(message)
        self.errno = err

    def __reduce__(self) -> tuple:
        return (type(self), (str(self), self.errno), self.__dict__)


class InvalidValueError(StoreError):
    """A key exists but its value may not be read: not a regular file inside the
    store (a symlink, FIFO, device, socket, or a path through a symlink or another
    mount), or larger than the caller's limit. Hostile or broken content, not a
    passing fault: callers may remember it. (A directory reads as missing.)"""


class NotFoundError(ZarrfsError):
    errno = errnos.ENOENT


class ReadOnlyError(ZarrfsError):
    errno = errnos.EROFS


class InvalidArgumentError(ZarrfsError):
    errno = errnos.EINVAL


class FileTooLargeError(ZarrfsError):
    errno = errnos.EFBIG


class PermissionDeniedError(ZarrfsError):
    errno = errnos.EPERM


class AccessDeniedError(ZarrfsError):
    errno = errnos.EACCES
