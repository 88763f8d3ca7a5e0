"""Batches: units of dirty chunks encoded and staged concurrently, committed at once.

A chunk is stored by its unit (the chunk itself, or the shard holding it, with
every dirty inner chunk of that shard). A batch takes each unit it stores from the
array's ``ChunkStates`` (core/write/chunkstate.py) and holds it until the store has
it or has failed: then the chunks are clean (cached, or dropped from the cache), or
dirty again, and nothing is lost. If a chunk changed while its snapshot was being
stored, it stays dirty for the next flush. A unit held by one batch is not taken
by another until the first is done with it, so an older snapshot never overtakes a
newer one in the store. On a remote store each unit is PUT as soon as it is
staged, all of a batch's at once (bounded by the put pool, ``Storing.put``), and
released as soon as its PUT is answered; the batch still ends only after every
one of them. The rules are docs/concurrency.md's ("Writes").
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import trio

from zarrfs.core.counters import Counters
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.write.chunkstate import Dirty
from zarrfs.core.write.ledger import Job, Ledger
from zarrfs.core.write.ratelimit import Backoff
from zarrfs.core.write.staging import is_fill
from zarrfs.core.write.storing import Storing
from zarrfs.errors import ZarrfsError
from zarrfs.formats.grid.layout import Index
from zarrfs.formats.model import ArrayMeta

if TYPE_CHECKING:
    from zarrfs.core.arrays import ArrayState

# The index of a shard whose store failed: not known, read again when needed.
_UNKNOWN = object()

# A unit to store: its array, its index, and whether to rewrite it even if it holds
# no dirty chunk (a shard holding chunks a shrink made stale).
_Wanted = tuple["ArrayState", Index, bool]


class Batch:
    """Units flushed together: staged one by one, committed at once."""

    def __init__(self, expected: int, *, keep: bool = True) -> None:
        self.waiting = expected  # units neither staged nor given up yet
        self.keep = keep  # stored chunks stay in the decoded-chunk cache
        self.staged: list[Any] = []
        self.stored = False  # a value was put in place (a remote store's units)
        self.ready = trio.Event()
        self.committed = trio.Event()
        self.error: ZarrfsError | None = None
        if not expected:
            self.ready.set()

    def arrive(self) -> None:
        self.waiting -= 1
        if self.waiting == 0:
            self.ready.set()


class Batches:
    def __init__(
        self,
        storing: Storing,
        cache: ChunkCache,
        counters: Counters,
        ledger: Ledger,
        backoff: Backoff,
    ) -> None:
        self._storing = storing
        self._cache = cache
        self._counters = counters
        self._ledger = ledger
        self._backoff = backoff

    async def gather(
        self,
        jobs: Iterable[Job],
        units: Iterable[Job] = (),
        *,
        keep: bool = True,
        rewrite: Iterable[Job] = (),
    ) -> None:
        """Flush chunks as one batch; raise the first failure after all have run.

        ``jobs`` are chunks, stored by their unit; ``units`` are stored if they hold
        dirty chunks, ``rewrite`` ones even if not (shards holding chunks a shrink
        made stale). Units are encoded and staged concurrently, committed together
        (their bytes made durable, then renamed into place); ``Storing.sync`` then
        syncs their directories. On a remote store each unit is PUT on its own,
        all at once up to the put pool's threads, and the batch returns once every
        PUT is answered. With ``keep``, stored chunks stay in the
        decoded-chunk cache. Batches run concurrently (the workers' queue bounds the
        parallelism), so one encodes while another commits; a unit still held by an
        earlier batch waits for it, so an older snapshot never overtakes a newer one.
        """
        ordered = _in_order(jobs, units, rewrite)
        errors: list[ZarrfsError] = []
        await _complete_partial(ordered)
        batch = Batch(len(ordered), keep=keep)
        # Shielded: a batch cut short would leave its worker threads renaming
        # older snapshots while the unmount's final flush stores newer ones.
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                for state, unit, forced in ordered:
                    await self._start(nursery, state, unit, forced, batch, errors)
                await batch.ready.wait()
                try:
                    if not self._storing.each_unit:  # else each unit was put already
                        await self._storing.commit(batch.staged)
                except ZarrfsError as e:
                    batch.error = e
                finally:
                    batch.committed.set()
        if errors:
            self._counters.store_failed(errors[0])
            self._backoff.failed(errors[0])
            raise errors[0]
        if batch.staged or batch.stored:
            self._backoff.stored()

    async def _start(
        self,
        nursery: trio.Nursery,
        state: ArrayState,
        unit: Index,
        forced: bool,
        batch: Batch,
        errors: list[ZarrfsError],
    ) -> None:
        """Take the unit and start storing it. The hand-over follows the take with
        no await in between, so no write can slip in."""
        try:
            members = await self._take(state, unit)
        except ZarrfsError as e:
            members = {}
            forced = False
            errors.append(e)
        if not members and not (forced and state.meta.holds_unit(unit)):
            # Nothing to store; a rewrite of a unit a shrink has since left wholly
            # beyond the end is the next resize's deletion.
            batch.arrive()
            return
        taken = state.meta  # as the members were taken, before any shrink
        self._hand_over(state, unit, members)
        nursery.start_soon(_collect, errors, self._flush_unit, state, taken, unit, members, batch)

    async def _take(self, state: ArrayState, unit: Index) -> dict[Index, Dirty]:
        """The unit's complete dirty chunks, once no earlier batch holds the unit."""
        while True:
            earlier = state.chunks.holder(unit)
            if earlier is not None:
                await earlier.wait()  # its snapshot must be in place before ours
                continue
            members = [i for i in state.meta.unit_members(unit) if i in state.dirty]
            partial = [i for i in members if state.dirty[i].mask is not None]
            if not partial:
                return {i: state.dirty[i] for i in members}
            for index in partial:
                await state.materialise(index)

    def _hand_over(self, state: ArrayState, unit: Index, members: dict[Index, Dirty]) -> None:
        """The batch holds the unit from now on (no await since it was taken)."""
        state.chunks.freeze(unit, members)
        self._ledger.holding(state)
        if state.meta.shards is not None:
            self._cache.begin_replace(state.meta, unit)

    async def _flush_unit(
        self,
        state: ArrayState,
        meta: ArrayMeta,
        unit: Index,
        members: dict[Index, Dirty],
        batch: Batch,
    ) -> None:
        """Store one unit (a chunk, or a shard) the batch holds when it commits.

        ``meta`` is the array as it was when the unit was taken: a task starts
        after the step that took it, and a shrink in between may have left the
        unit outside the array as it is now."""
        arrived = False
        stored_index: object = _UNKNOWN
        try:
            data = {index: dirty.data for index, dirty in members.items()}
            dropped = state.dropped_positions(unit)
            try:
                if self._storing.each_unit:
                    # Its own PUT: answered, the unit is done, whatever the others do.
                    put, stored_index, did = await self._storing.put(meta, unit, data, dropped)
                    self._counters.stored(did)
                    batch.stored |= put
                    deleted = not put
                else:
                    staged, stored_index, did = await self._storing.stage(meta, unit, data, dropped)
                    self._counters.staged(did)
                    deleted = staged is None
                    if not deleted:
                        batch.staged.append(staged)
                    batch.arrive()
                    arrived = True
                    await batch.committed.wait()
                    if not deleted and batch.error is not None:
                        stored_index = _UNKNOWN
                        raise batch.error
                    self._counters.committed(did)
            except BaseException:
                state.chunks.thaw(members)  # nothing lost: dirty again
                raise
            finally:
                self._storing.replaced(meta.unit_key(unit))
                state.chunks.unfreeze(members)
            await self._stored(state, meta, data, deleted, stored_index, batch.keep)
        finally:
            if meta.shards is not None:
                self._cache.end_replace(meta.path, unit, stored_index)
            state.chunks.release(unit)
            if not arrived:
                batch.arrive()

    async def _stored(
        self,
        state: ArrayState,
        meta: ArrayMeta,
        data: dict[Index, np.ndarray],
        deleted: bool,
        stored_index: object,
        keep: bool,
    ) -> None:
        """The unit's chunks are in the store (``deleted``: the unit was all fill
        value): into the decoded-chunk cache, or out of it."""
        for index, chunk in data.items():
            if meta.shards is None and state.is_stale(index):
                # A shrink overtook this store: the chunk must not outlive it.
                await self._storing.delete_chunk(meta, index)
                self._counters.chunks_deleted += 1
                self._cache.forget(meta.path, index)
            elif deleted or keep:
                if meta.shards is None:
                    missing = deleted
                else:  # left out of its shard, or the shard deleted
                    missing = stored_index is None or is_fill(chunk, meta)
                self._cache.put(meta.path, index, None if missing else chunk)
            else:
                self._cache.forget(meta.path, index)
                self._cache.buffers.offer(chunk)


async def _collect(errors: list[ZarrfsError], flush: Any, *args: Any) -> None:
    """``flush(*args)``, its failure kept in ``errors``: one unit's failure does not
    cut the others short; the batch raises the first after all have run."""
    try:
        await flush(*args)
    except ZarrfsError as e:
        errors.append(e)


def _in_order(jobs: Iterable[Job], units: Iterable[Job], rewrite: Iterable[Job]) -> list[_Wanted]:
    """The units to store, each once (twice would wait for itself), in one global
    order: a batch waits for a unit another batch holds while holding only units
    that come earlier, so no two batches can wait for each other."""
    wanted: dict[tuple[int, Index], _Wanted] = {}
    for state, index in jobs:
        if not state.meta.holds_chunk(index):
            continue  # a shrink dropped it after it was queued
        unit = state.meta.unit_of(index)
        wanted.setdefault((id(state), unit), (state, unit, False))
    for state, unit in units:
        wanted.setdefault((id(state), unit), (state, unit, False))
    for state, unit in rewrite:
        wanted[(id(state), unit)] = (state, unit, True)
    return [wanted[k] for k in sorted(wanted)]


async def _complete_partial(ordered: list[_Wanted]) -> None:
    """Merge the partly written chunks of these units with the stored ones first,
    concurrently and holding nothing: taking them then rarely has to wait."""

    async def complete(state: ArrayState, index: Index) -> None:
        with contextlib.suppress(ZarrfsError):  # reported when the chunk is taken
            await state.materialise(index)

    partial = [
        (s, i)
        for s, unit, _ in ordered
        for i in s.meta.unit_members(unit)
        if i in s.dirty and s.dirty[i].mask is not None
    ]
    if partial:
        async with trio.open_nursery() as nursery:
            for state, index in partial:
                nursery.start_soon(complete, state, index)
