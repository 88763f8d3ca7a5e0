"""What write-back has not yet stored, across arrays: the write cache's ledger.

Dirty chunks are listed oldest first with the bytes each cost when it became dirty
(``ChunkStates`` reports them through ``track`` and ``dropped``, the ``Ledger``
protocol of core/write/chunkstate.py); beside them, the arrays whose resize is not
yet stored, and the arrays some of whose units a batch holds. ``budget`` is the
write cache's size (``--write-cache-size``). Everything here runs on the trio
thread and is atomic (no awaits).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import TYPE_CHECKING

from zarrfs.core.write.chunkstate import Dirty
from zarrfs.formats.grid.layout import Index

if TYPE_CHECKING:
    from zarrfs.core.arrays import ArrayState

DirtyKey = tuple[int, Index]  # (id of the array state, chunk index)
Job = tuple["ArrayState", Index]  # a chunk to store, or a unit (core/write/batches.py)


class Ledger:
    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.dirty_bytes = 0
        # Oldest first; the cost is the one counted when the chunk became dirty.
        self._order: OrderedDict[DirtyKey, tuple[ArrayState, Index, Dirty, int]] = OrderedDict()
        # Arrays resized since their shape was last stored, and since when.
        self._resized: dict[int, tuple[ArrayState, float]] = {}
        # Arrays some of whose units a batch has held (ChunkStates knows which).
        self._holding: dict[int, ArrayState] = {}

    # -- dirty chunks (ChunkStates) -----------------------------------------------------

    @staticmethod
    def _cost(dirty: Dirty) -> int:
        return dirty.data.nbytes + (dirty.mask.nbytes if dirty.mask is not None else 0)

    def track(self, state: ArrayState, index: Index, dirty: Dirty) -> None:
        self.dropped(state, index)
        cost = self._cost(dirty)
        self._order[(id(state), index)] = (state, index, dirty, cost)
        self.dirty_bytes += cost

    def dropped(self, state: ArrayState, index: Index) -> None:
        entry = self._order.pop((id(state), index), None)
        if entry is not None:
            self.dirty_bytes -= entry[3]

    def over_budget(self) -> bool:
        return self.dirty_bytes > self.budget

    def oldest(self) -> list[Job]:
        """The oldest dirty chunks whose store brings the dirty bytes down to half
        the budget."""
        jobs = []
        planned = 0
        for state, index, _, cost in list(self._order.values()):
            if self.dirty_bytes - planned <= self.budget // 2:
                break
            jobs.append((state, index))
            planned += cost
        return jobs

    def dirty_before(self, deadline: float) -> list[Job]:
        """The chunks dirty since before ``deadline`` (monotonic)."""
        return [(s, i) for s, i, d, _ in self._order.values() if d.since <= deadline]

    # -- resizes and held units ---------------------------------------------------------

    def resized(self, state: ArrayState) -> None:
        """The array's shape (or a pending tail) is to be stored; since when is kept
        from the first such call until ``resize_taken``."""
        self._resized.setdefault(id(state), (state, time.monotonic()))

    def resize_taken(self, state: ArrayState) -> None:
        """A resize's flush has taken what the array's resize left to store."""
        self._resized.pop(id(state), None)

    def resized_before(self, deadline: float) -> list[ArrayState]:
        """The arrays resized since before ``deadline`` (monotonic), not yet stored."""
        return [state for state, since in self._resized.values() if since <= deadline]

    def holding(self, state: ArrayState) -> None:
        """A batch holds units of the array (until ``ChunkStates.held`` is empty)."""
        self._holding[id(state)] = state

    def states(self) -> list[ArrayState]:
        """Arrays with anything not yet in the store."""
        states = {id(s): s for s, _, _, _ in self._order.values()}
        states.update({k: s for k, (s, _) in self._resized.items()})
        for key, state in list(self._holding.items()):
            if state.chunks.held():
                states[key] = state
            else:
                del self._holding[key]
        return list(states.values())
