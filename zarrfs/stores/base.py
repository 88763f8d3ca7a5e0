"""The key/value store contract every backend implements.

Keys are "/"-separated relative paths ("" is the root). Methods block: callers in
the FUSE loop run them in worker threads. Errors other than "missing" surface as
``StoreError`` carrying an errno.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


@dataclass(frozen=True)
class Listing:
    """Direct children of a prefix: plain keys and sub-prefixes (names only)."""

    keys: tuple[str, ...]
    prefixes: tuple[str, ...]


class Store(ABC):
    @abstractmethod
    def get(self, key: str) -> bytes | None:
        """The value of ``key``, or ``None`` when it does not exist."""

    @abstractmethod
    def contains(self, key: str) -> bool: ...

    @abstractmethod
    def list_dir(self, prefix: str) -> Listing: ...

    @abstractmethod
    def mtime(self, key: str) -> float | None:
        """Modification time of ``key`` (seconds), ``None`` when unknown or missing."""

    def statvfs(self) -> tuple[int, int, int] | None:
        """(block size, total blocks, free blocks) of the backing storage, if known."""
        return None

    def describe(self) -> str:
        return type(self).__name__
