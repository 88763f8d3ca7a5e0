"""An in-memory store with versions and conditional reads, counting every request:
the remote store a cache wrapper is tested over (tests/unit/stores/test_diskcache.py).

Each ``set`` gives the key a new version tag; ``fetch``/``fetch_ranges`` with
``unless`` naming the current version answer UNCHANGED (a 304: nothing read).
``versions`` lists the keys under a prefix with their tags (None past ``most``).
``requests`` counts requests by kind and key: ("fetch", key), ("unchanged", key),
("ranges", key), ("stat", key), ("versions", prefix)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

from zarrfs.errors import InvalidValueError
from zarrfs.stores.base import (
    UNCHANGED,
    Fetched,
    Listing,
    Store,
    Version,
    check_ranges,
    resolve_range,
)


class VersionedStore(Store):
    remote = True

    def __init__(self, values: dict[str, bytes] | None = None) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, tuple[bytes, Version]] = {}
        self._clock = 0
        self.requests: Counter[tuple[str, str]] = Counter()
        for key, value in (values or {}).items():
            self.set(key, value)

    def _count(self, kind: str, key: str) -> tuple[bytes, Version] | None:
        with self._lock:
            self.requests[(kind, key)] += 1
            return self._values.get(key)

    def peek(self, key: str) -> bytes:
        """A value as stored, without a request (the test's own look)."""
        with self._lock:
            return self._values[key][0]

    def count(self, kind: str | None = None) -> int:
        """Requests so far (of one kind: "fetch", "unchanged", "ranges", "stat")."""
        return sum(n for (k, _), n in self.requests.items() if kind in (None, k))

    def set(self, key: str, value: bytes, *, durable: bool = True) -> None:
        with self._lock:
            self._clock += 1
            self._values[key] = (
                bytes(value),
                Version(f'"v{self._clock}"', self._clock, len(value)),
            )

    def stage(self, key: str, value: bytes | Sequence[bytes]) -> Any:
        if not isinstance(value, bytes | bytearray | memoryview):
            value = b"".join(value)
        return key, value

    def delete(self, key: str, *, durable: bool = True) -> None:
        with self._lock:
            self._values.pop(key, None)

    def get(self, key: str, *, limit: int | None = None) -> bytes | None:
        found = self.fetch(key, limit=limit)
        return None if found is None else bytes(found.value)

    def fetch(
        self, key: str, *, limit: int | None = None, unless: Version | None = None
    ) -> Fetched | None:
        found = self._count("fetch", key)
        if found is None:
            return None
        value, version = found
        if unless is not None and unless.tag == version.tag:
            self.requests[("unchanged", key)] += 1
            return UNCHANGED  # type: ignore[no-any-return]
        if limit is not None and len(value) > limit:
            raise InvalidValueError(f"{key}: {len(value)} bytes, more than {limit}")
        return Fetched(value, version)

    def get_ranges(self, key: str, ranges: list[tuple[int, int]]) -> list[bytes] | None:
        found = self.fetch_ranges(key, ranges)
        return None if found is None else found[0]

    def fetch_ranges(
        self, key: str, ranges: list[tuple[int, int]], *, unless: Version | None = None
    ) -> tuple[list[bytes], Version | None] | None:
        check_ranges(ranges)
        found = self._count("ranges", key)
        if found is None:
            return None
        value, version = found
        if unless is not None and unless.tag == version.tag:
            self.requests[("unchanged", key)] += 1
            return UNCHANGED  # type: ignore[no-any-return]
        spans = [resolve_range(s, n, len(value)) for s, n in ranges]
        return [value[o : o + n] for o, n in spans], version

    def stat(self, key: str) -> Version | None:
        found = self._count("stat", key)
        return None if found is None else found[1]

    def contains(self, key: str) -> bool:
        return self.stat(key) is not None

    def mtime(self, key: str) -> float | None:
        version = self.stat(key)
        return None if version is None else version.mtime

    def list_dir(self, prefix: str) -> Listing:
        return Listing((), ())

    def versions(self, prefix: str, most: int) -> dict[str, str] | None:
        self._count("versions", prefix)
        start = f"{prefix}/" if prefix else ""
        with self._lock:
            found = {
                key[len(start) :]: version.tag
                for key, (_, version) in self._values.items()
                if key.startswith(start)
            }
        return found if len(found) <= most else None

    def describe(self) -> str:
        return "memory://test"
