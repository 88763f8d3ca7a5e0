"""A resize's flush: the new shape into the store, then what it left stale deleted.

A resize is a unit of work like a batch (docs/concurrency.md, "A resize is a unit
of work"). One runs at a time per mount, so consolidated metadata is
read-modified-written by one task at a time. The order at a flush of an array is:
its chunks (core/write/batches.py), then its metadata document with the new shape
(and the consolidated entry naming it), then the deletion of the units a shrink
left wholly beyond the end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from zarrfs.core.counters import Counters
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.write.batches import Batches
from zarrfs.core.write.ledger import Ledger
from zarrfs.core.write.storing import Storing
from zarrfs.formats.grid.layout import Index
from zarrfs.formats.metadata.resize import resized_documents
from zarrfs.stores.base import join_key

if TYPE_CHECKING:
    from zarrfs.core.arrays import ArrayState


class Resizes:
    def __init__(
        self,
        storing: Storing,
        batches: Batches,
        cache: ChunkCache,
        counters: Counters,
        ledger: Ledger,
    ) -> None:
        self._storing = storing
        self._batches = batches
        self._cache = cache
        self._counters = counters
        self._ledger = ledger
        self._lock = trio.Lock()  # one resize's flush at a time

    async def flush(self, state: ArrayState) -> None:
        """Store a resize: the new shape, then the deletion of what it left stale.

        A resize is a unit of work like a batch. The marks it settles are taken
        first (a resize while it runs keeps its own, for the next flush); units a
        batch took before it are waited for before the store is listed, so none of
        them can land stale after the listing; and each unit it deletes is held
        from the moment it is chosen, with no await in between, until it is gone:
        a later store of that unit waits for the deletion, never the reverse.
        """
        async with self._lock:
            self._ledger.resize_taken(state)
            marks = state.low_rows, state.high_rows, state.shrinks
            stale: list[Index] = []
            if state.stale_range() is not None:
                await self._settle(state)
                stored = await self._storing.stored_units(state.meta)
                stale = await self._claim_stale(state, stored)
            try:
                await self._store(state, stale, marks)
            finally:
                for unit in stale:
                    state.chunks.release(unit)
        if state.tail:
            self._ledger.resized(state)  # keep it known, so unmount reports the dropped tail

    async def _settle(self, state: ArrayState) -> None:
        """Wait for the batches holding units of the array now (not for later ones:
        they store what was written since, with the stale inner chunks left out)."""
        for event in [state.chunks.holder(unit) for unit in state.chunks.held()]:
            if event is not None:
                await event.wait()

    async def _claim_stale(self, state: ArrayState, stored: list[Index]) -> list[Index]:
        """Of the ``stored`` units, rewrite those holding live chunks among stale
        ones, and hold those left wholly stale (returned; the caller deletes and
        releases them). Decided again after every await: a unit written and
        stored meanwhile is rewritten, not deleted."""
        candidates, rewritten = stored, set()
        while True:
            stale, rewrite = state.stale_units(candidates)
            todo = [unit for unit in rewrite if unit not in rewritten]
            busy = [e for e in map(state.chunks.holder, stale) if e is not None]
            if not todo and not busy:
                for unit in stale:  # no await since the decision
                    state.chunks.freeze(unit, {})
                return stale
            if todo:
                await self._batches.gather([], rewrite=[(state, unit) for unit in todo])
                rewritten.update(todo)
                self._cache.invalidate(state.meta.path)  # the inner chunks left out
            for event in busy:
                await event.wait()
            candidates = stale

    async def _store(
        self, state: ArrayState, stale: list[Index], marks: tuple[int, int, int]
    ) -> None:
        meta = state.meta
        rows = meta.shape[0] if meta.shape else 0
        if not state.metadata_changed and not stale:
            state.mark_stored(rows, *marks)
            if state.tail:
                self._ledger.resized(state)
            return
        documents = state.documents
        root = documents.root
        name, document, consolidated = resized_documents(meta, documents, root)
        stale_keys = [key for unit in stale for key in meta.unit_keys(unit)]
        try:
            with trio.CancelScope(shield=True):
                did = await self._storing.store_metadata(
                    join_key(meta.path, name), document, consolidated, stale_keys
                )
        except BaseException:
            self._ledger.resized(state)
            raise
        self._counters.stored(did)
        # The cache must not bring a deleted chunk back.
        if meta.shards is not None:
            self._cache.invalidate(meta.path)  # inner chunks of deleted shards
        for index in stale if meta.shards is None else ():
            self._cache.put(meta.path, index, None)
        documents.replace(name, document)
        if consolidated is not None and root is not None:
            root.replace(*consolidated)
        state.mark_stored(rows, *marks)
