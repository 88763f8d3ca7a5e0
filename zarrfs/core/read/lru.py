"""The decoded-chunk LRU: chunks, shard indexes and stripes under one budget in bytes.

Three kinds of entry share one order of use and one ``--cache-size``, each under a
key type of its own, so a chunk, a shard's index and a stripe of one array never
meet under one key. Touched only from the trio thread (docs/concurrency.md).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from zarrfs.formats.grid.layout import Index
from zarrfs.formats.grid.shards import ShardIndex


class ChunkKey(tuple[str, Index]):
    """A decoded chunk: ``ChunkKey((path, index))``.

    Every read looks its chunks up: a tuple is made, hashed and compared at C
    speed (a NamedTuple's constructor is Python code, several times slower). A
    tuple never equals a dataclass, so the other kinds of key cannot be taken for it.
    """

    __slots__ = ()

    @property
    def path(self) -> str:
        return self[0]

    @property
    def index(self) -> Index:
        return self[1]


@dataclass(frozen=True, slots=True)
class ShardIndexKey:
    """The index of a shard of a sharded array."""

    path: str
    shard: Index


@dataclass(frozen=True, slots=True)
class StripeKey:
    """A stripe (core/read/stripes.py) by its extent, not its start alone: after a
    resize a stripe starting at the same byte may end elsewhere, and must not be
    taken for the old one."""

    path: str
    start: int
    stop: int


CacheKey = ChunkKey | ShardIndexKey | StripeKey
# A decoded chunk (read-only), a shard's index, or None: not stored (reads as fill).
Entry = np.ndarray | ShardIndex | None

_ABSENT = object()

# A missing chunk or shard is remembered too, at a nominal cost, so a sparse array
# is not re-probed on every read.
MISSING_COST = 64


def cost(value: Entry) -> int:
    if value is None:
        return MISSING_COST
    if isinstance(value, ShardIndex):
        return value.entries.nbytes
    return value.nbytes


class DecodedLru:
    """Entries by key, least recently used first, their costs within ``max_bytes``.

    ``on_leave(key)`` is called for each entry that leaves (evicted or dropped),
    after this LRU let go of its value, so the caller may tell whether anything
    else still holds that value's memory.
    """

    def __init__(self, max_bytes: int, on_leave: Callable[[CacheKey], None]) -> None:
        self.max_bytes = max_bytes
        self._on_leave = on_leave
        self._entries: OrderedDict[CacheKey, Entry] = OrderedDict()
        self._bytes = 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __contains__(self, key: CacheKey) -> bool:
        return key in self._entries

    def use(self, key: CacheKey) -> tuple[bool, Entry]:
        """(True, entry) if ``key`` is cached, which counts as a use; else (False, None)."""
        value = self._entries.get(key, _ABSENT)
        if value is _ABSENT:
            return False, None
        self._entries.move_to_end(key)
        return True, value  # type: ignore[return-value]

    def peek(self, key: CacheKey) -> tuple[bool, Entry]:
        """As ``use``, without counting as a use."""
        value = self._entries.get(key, _ABSENT)
        return (False, None) if value is _ABSENT else (True, value)  # type: ignore[return-value]

    def insert(self, key: CacheKey, value: Entry) -> None:
        """Cache ``value`` (not if it alone is over the budget), evicting the least
        recently used entries until the rest fits."""
        size = cost(value)
        if size > self.max_bytes:
            return
        self.drop(key)
        self._entries[key] = value
        self._bytes += size
        while self._bytes > self.max_bytes:
            old_key, old = self._entries.popitem(last=False)
            self._bytes -= cost(old)
            del old
            self._on_leave(old_key)

    def drop(self, key: CacheKey) -> None:
        if key not in self._entries:
            return
        old = self._entries.pop(key)
        self._bytes -= cost(old)
        del old
        self._on_leave(key)

    def keys_of(self, path: str, *kinds: type) -> list[CacheKey]:
        """The keys of the array at ``path``, of the given kinds."""
        return [key for key in self._entries if key.path == path and isinstance(key, kinds)]
