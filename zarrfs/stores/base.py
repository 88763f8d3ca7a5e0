"""The key/value store contract every backend implements.

Keys are "/"-separated relative paths ("" is the root). Methods block: callers in
the FUSE loop run them in worker threads. Errors other than "missing" surface as
``StoreError`` carrying an errno.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from zarrfs.errors import InvalidValueError


def join(prefix: str, name: str) -> str:
    return f"{prefix}/{name}" if prefix else name


@dataclass(frozen=True)
class Listing:
    """Direct children of a prefix: plain keys and sub-prefixes (names only)."""

    keys: tuple[str, ...]
    prefixes: tuple[str, ...]


class Store(ABC):
    @abstractmethod
    def get(self, key: str, *, limit: int | None = None) -> bytes | None:
        """The value of ``key``, or ``None`` when it does not exist.

        A value that may not be read (not a plain value of the store, e.g. a link
        out of it) or is larger than ``limit`` bytes raises ``InvalidValueError``.
        """

    @abstractmethod
    def contains(self, key: str) -> bool: ...

    @abstractmethod
    def list_dir(self, prefix: str) -> Listing: ...

    def scan(self, prefix: str) -> Iterator[tuple[str, int]]:
        """Every key under ``prefix`` (recursively) with its size, keys relative to it.

        Only for summaries (``info``); the generic version reads every value (one
        that may not be read is no key here).
        """
        listing = self.list_dir(prefix)
        for name in listing.keys:
            try:
                value = self.get(join(prefix, name))
            except InvalidValueError:
                continue
            if value is not None:
                yield name, len(value)
        for sub in listing.prefixes:
            for key, size in self.scan(join(prefix, sub)):
                yield f"{sub}/{key}", size

    @abstractmethod
    def set(self, key: str, value: bytes, *, durable: bool = True) -> None:
        """Store ``value`` under ``key`` atomically: readers see the old or the new value.

        With ``durable=False`` the value's bytes are on disk before it replaces the
        old one (so a crash leaves old or new, never a torn value), but the
        replacement itself becomes durable only at the next ``sync(keys)``.
        """

    def stage(self, key: str, value: bytes) -> Any:
        """First half of a batched ``set(durable=False)``: prepare ``value`` for ``key``
        without making it visible; ``commit`` a list of these to put them in place."""
        return (key, value)

    def commit(self, staged: list[Any]) -> None:
        """Put staged values in place, each atomically, their bytes on disk first.

        On failure nothing more is put in place and what is left is discarded.
        """
        for key, value in staged:
            self.set(key, value, durable=False)

    def sync(self, keys: list[str]) -> None:  # noqa: B027 - durable stores need nothing
        """Make earlier non-durable ``set``/``delete`` of ``keys`` durable."""

    @abstractmethod
    def delete(self, key: str, *, durable: bool = True) -> None:
        """Remove ``key``; a missing key is not an error."""

    def cleanup(self, older_than: float) -> int:
        """Remove what an interrupted run left before ``older_than``; returns how many."""
        return 0

    @abstractmethod
    def mtime(self, key: str) -> float | None:
        """Modification time of ``key`` (seconds), ``None`` when unknown or missing."""

    def statvfs(self) -> tuple[int, int, int] | None:
        """(block size, total blocks, free blocks) of the backing storage, if known."""
        return None

    def describe(self) -> str:
        return type(self).__name__
