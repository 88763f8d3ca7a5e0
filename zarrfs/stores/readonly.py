"""A read-only view of any store: the wrapper the offline commands open stores with."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from zarrfs.stores.base import Fetched, Listing, Store, Version, WriteRefusingStore


class ReadOnlyStore(WriteRefusingStore):
    """``inner`` for reading; every write raises ReadOnlyError. The commands that
    only look at a store open it through this, so that no code path of theirs can
    change it (a directory store's clean-up of temporary files included)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.remote = inner.remote
        self.listable = inner.listable

    def get(self, key: str, *, limit: int | None = None) -> bytes | None:
        return self.inner.get(key, limit=limit)

    def get_buffer(self, key: str, *, limit: int | None = None) -> bytes | memoryview | None:
        return self.inner.get_buffer(key, limit=limit)

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        return self.inner.get_range(key, start, length)

    def get_ranges(self, key: str, ranges: list[tuple[int, int]]) -> list[bytes] | None:
        return self.inner.get_ranges(key, ranges)

    def size(self, key: str) -> int | None:
        return self.inner.size(key)

    def get_tail(self, key: str, length: int) -> tuple[bytes, int] | None:
        return self.inner.get_tail(key, length)

    def stat(self, key: str) -> Version | None:
        return self.inner.stat(key)

    def fetch(
        self, key: str, *, limit: int | None = None, unless: Version | None = None
    ) -> Fetched | None:
        return self.inner.fetch(key, limit=limit, unless=unless)

    def fetch_ranges(
        self, key: str, ranges: list[tuple[int, int]], *, unless: Version | None = None
    ) -> tuple[list[bytes], Version | None] | None:
        return self.inner.fetch_ranges(key, ranges, unless=unless)

    def contains(self, key: str) -> bool:
        return self.inner.contains(key)

    def list_dir(self, prefix: str) -> Listing:
        return self.inner.list_dir(prefix)

    def scan(self, prefix: str) -> Iterator[tuple[str, int]]:
        return self.inner.scan(prefix)

    def mtime(self, key: str) -> float | None:
        return self.inner.mtime(key)

    def describe(self) -> str:
        return self.inner.describe()

    def refusal(self) -> str:
        return f"{self.describe()} is opened read-only"

    def cleanup(self, older_than: float, between: Callable[[], None] | None = None) -> int:
        raise self._refuse()  # (a mount's clean-up deletes: nothing here may)
