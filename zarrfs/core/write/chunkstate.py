"""The life of one array's chunks under writes: the one owner of that state.

    clean ──write──▶ dirty ──flush takes its unit──▶ frozen (in flight) ──stored──▶ clean
                       ▲                                  │
                       └──────────store failed────────────┘

A chunk is *dirty* once written and not yet handed to a flush; *frozen* while a
batch stores it (read-only; reads see it, a write meanwhile starts a new dirty
chunk from a copy); *clean* once stored, when the decoded-chunk cache may hold
it. A flush holds a whole *unit* (the stored value: a chunk, or a shard of inner
chunks) from the moment it freezes it until the store has it or has failed; a
later flush of the same unit waits for that, so an older snapshot never
overtakes a newer one. Everything here runs on the trio thread, and each method
is atomic (no awaits).

The writers (core/write/chunkwrites.py, core/write/writing.py) change chunks through
``make_dirty`` and ``drop``; write-back (core/write/batches.py) through
``freeze``, ``thaw`` and ``release``. Everyone reads ``dirty`` and ``frozen``,
read-only mappings. Write-back's budget hears of every chunk made dirty or dropped
through the ``Ledger`` it is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

import numpy as np
import trio

from zarrfs.formats.grid.layout import Index

# Units' releases are counted in this many counters, a unit's chosen by its hash:
# a reader of a stored value (views/chunkkeys.py) compares the count before and
# after to know the value was not replaced meanwhile, in constant memory (a unit
# sharing a counter with one stored meanwhile costs that reader a needless error).
RELEASE_COUNTERS = 64


@dataclass
class Dirty:
    # chunk shape, laid out in the array's order; read-only when it is a write's own
    # buffer or was handed to a flush: writers go through ``writable``
    data: np.ndarray
    mask: np.ndarray | None  # elements written so far; None once complete
    since: float  # when it first became dirty (monotonic)

    def writable(self, order: str) -> np.ndarray:
        """The data, copied first (in the array's ``order``) if it is read-only:
        copy on write."""
        if not self.data.flags.writeable:
            self.data = self.data.copy(order=order)
        return self.data


class Ledger(Protocol):
    """Who accounts one array's dirty chunks among all arrays' (write-back's budget)."""

    def track(self, index: Index, dirty: Dirty) -> None: ...

    def dropped(self, index: Index) -> None: ...


class ChunkStates:
    """The dirty, frozen and held chunks of one array."""

    def __init__(self, ledger: Ledger | None) -> None:
        self._ledger = ledger
        self._dirty: dict[Index, Dirty] = {}
        self._frozen: dict[Index, np.ndarray] = {}
        self._held: dict[Index, trio.Event] = {}  # units a flush holds
        self._releases = [0] * RELEASE_COUNTERS
        self.dirty: Mapping[Index, Dirty] = MappingProxyType(self._dirty)
        self.frozen: Mapping[Index, np.ndarray] = MappingProxyType(self._frozen)

    # -- writes ---------------------------------------------------------------------

    def make_dirty(self, index: Index, dirty: Dirty) -> None:
        """``dirty`` is now the chunk's newest version (replacing any before it)."""
        self._dirty[index] = dirty
        if self._ledger is not None:
            self._ledger.track(index, dirty)

    def drop(self, index: Index) -> None:
        """Forget a dirty chunk (a shrink left it beyond the end)."""
        if self._dirty.pop(index, None) is not None and self._ledger is not None:
            self._ledger.dropped(index)

    # -- flushes ----------------------------------------------------------------------

    def holder(self, unit: Index) -> trio.Event | None:
        """Set when the flush holding ``unit`` is done with it; None if none holds it."""
        return self._held.get(unit)

    def held(self) -> list[Index]:
        return list(self._held)

    def freeze(self, unit: Index, members: dict[Index, Dirty]) -> None:
        """A flush takes ``unit`` with these complete dirty chunks of it.

        They are handed over instead of copied: reads see them in ``frozen``."""
        if unit in self._held:
            raise RuntimeError(f"unit {unit} is held by another flush")
        for index, dirty in members.items():
            if self._dirty.get(index) is not dirty or dirty.mask is not None:
                raise RuntimeError(f"chunk {index} is not the complete dirty version")
            del self._dirty[index]
            if self._ledger is not None:
                self._ledger.dropped(index)
            dirty.data.flags.writeable = False
            self._frozen[index] = dirty.data
        self._held[unit] = trio.Event()

    def thaw(self, members: dict[Index, Dirty]) -> None:
        """Storing failed: the chunks are dirty again, unless written since (the
        newer version wins). Nothing is lost; the next write copies them first."""
        for index, dirty in members.items():
            if index not in self._dirty:
                self.make_dirty(index, dirty)

    def unfreeze(self, members: dict[Index, Dirty]) -> None:
        """The store has the chunks (or ``thaw`` gave them back): reads no longer
        see them as frozen."""
        for index in members:
            self._frozen.pop(index, None)

    def release(self, unit: Index) -> None:
        """The flush is done with ``unit``: a later flush of it may go on."""
        self._releases[hash(unit) % RELEASE_COUNTERS] += 1
        event = self._held.pop(unit, None)
        if event is not None:
            event.set()

    def releases(self, unit: Index) -> int:
        """Grows each time a flush is done with ``unit`` (or one sharing its counter):
        while it stays put and the unit is not held, its stored value is unchanged."""
        return self._releases[hash(unit) % RELEASE_COUNTERS]

    @property
    def busy(self) -> bool:
        """Anything not yet in the store: dirty chunks, or units a flush holds."""
        return bool(self._dirty or self._held)
