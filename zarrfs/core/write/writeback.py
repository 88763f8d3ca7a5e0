"""Flushing dirty chunks and metadata to the store.

A chunk is flushed by encoding a snapshot of it in a worker thread and storing it
atomically (or deleting it, when it is all fill value). The chunk stays dirty until
the store has it: if storing fails, the error goes to whoever asked for the flush
(fsync, close) and nothing is lost. If the chunk changed while its snapshot was
being stored, it stays dirty for the next flush. A chunk held by one batch is not
taken by another until the first is done with it, so an older snapshot never
overtakes a newer one in the store.

Order at a flush of an array: chunks, then the metadata document (new shape), then
the deletion of chunks a shrink left beyond the end.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Iterable

import trio

from zarrfs.core.arrays import ArrayState
from zarrfs.core.pool import WorkerPool
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.write.chunkstate import Dirty
from zarrfs.core.write.ratelimit import RateLimitedLog
from zarrfs.core.write.staging import (
    Batch,
    delete_chunk,
    is_fill,
    stage_unit,
    store_metadata,
    stored_units,
)
from zarrfs.errors import (
    InvalidArgumentError,
    StoreError,
    ZarrfsError,
)
from zarrfs.formats.grid.layout import Index
from zarrfs.formats.metadata.resize import resized_documents
from zarrfs.formats.model import ArrayMeta
from zarrfs.stores.base import Store, join_key

log = logging.getLogger(__name__)

DirtyKey = tuple[int, Index]
# The index of a shard whose store failed: not known, read again when needed.
_UNKNOWN = object()

# A streaming writer waits while more than this many bytes of finished chunks are
# queued or being stored (or two chunks per worker, if more): it cannot outrun the
# encoders by more, so chunk memory is reused instead of growing to the write-cache
# budget (measured: ~11 000 instead of ~58 000 page faults per 256 MiB rewritten).
BEHIND_LIMIT = 32 << 20

# After a failed store, the next try waits this long, doubling up to the maximum:
# a full disk must not make every write re-encode chunks that fail again.
RETRY_FIRST = 0.5
RETRY_MAX = 30.0


class WriteBack:
    def __init__(
        self,
        store: Store,
        cache: ChunkCache,
        budget: int,
        interval: float,
        threads: int | None = None,
    ) -> None:
        self.store = store
        self.cache = cache
        self.budget = budget
        self.interval = interval
        self.dirty_bytes = 0
        self.root_documents: dict[str, bytes] | None = None  # for .zmetadata updates
        # Oldest first; the cost is the one counted when the chunk became dirty.
        self._order: OrderedDict[DirtyKey, tuple[ArrayState, Index, Dirty, int]] = OrderedDict()
        self._resized: dict[int, tuple[ArrayState, float]] = {}
        # Batches run concurrently; their commits one at a time.
        self._commit_lock = trio.Lock()
        # Arrays some of whose units a batch has held (ChunkStates knows which).
        self._holding: dict[int, ArrayState] = {}
        # Chunks a sequential writer has finished: stored while it writes the next ones.
        self._behind: dict[DirtyKey, tuple[ArrayState, Index]] = {}
        self._behind_ready = trio.Event()
        self._behind_done = trio.Event()
        self._storing_behind = False  # run_write_behind is running
        self._behind_held = 0  # bytes of chunks in write-behind batches
        self._behind_largest = 0  # the largest chunk queued behind so far
        self._meta_lock: trio.Lock | None = None
        self.pool = WorkerPool(threads or max(2, os.cpu_count() or 2), "zarrfs-encode")
        # Commits, directory syncs, deletions and metadata mostly wait for the disk:
        # in a thread of their own, such a wait does not hold an encoder's core idle.
        self.io_pool = WorkerPool(1, "zarrfs-commit")
        self._unsynced: set[str] = set()  # chunk keys replaced but not yet made durable
        # The last failure to store, until a store succeeds again; no background or
        # budget flush is tried before ``_retry_at``, and past the budget writes are
        # refused with its errno instead of growing the cache.
        self.failure: ZarrfsError | None = None
        self._retry_at = 0.0
        self._backoff = 0.0
        self.failure_log = RateLimitedLog(log)

    # -- bookkeeping called by ArrayState (trio thread, no awaits) ---------------------

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

    def behind(self, state: ArrayState, index: Index) -> None:
        """A streaming writer has moved past this chunk: store it in the background."""
        self._behind[(id(state), index)] = (state, index)
        self._behind_largest = max(self._behind_largest, state.meta.chunk_nbytes)
        self._behind_ready.set()

    def resized(self, state: ArrayState) -> None:
        self._resized.setdefault(id(state), (state, time.monotonic()))

    # -- flushing ---------------------------------------------------------------------

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
        self._holding[id(state)] = state
        if state.meta.shards is not None:
            self.cache.begin_replace(state.meta, unit)

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
                staged, stored_index, did = await self.pool.run(
                    stage_unit, self.store, meta, unit, data, dropped
                )
                self.cache.counters.staged(did)
                if staged is not None:
                    batch.staged.append(staged)
                batch.arrive()
                arrived = True
                await batch.committed.wait()
                if staged is not None and batch.error is not None:
                    stored_index = _UNKNOWN
                    raise batch.error
                self.cache.counters.committed(did)
            except BaseException:
                state.chunks.thaw(members)  # nothing lost: dirty again
                raise
            finally:
                self._unsynced.add(meta.unit_key(unit))
                state.chunks.unfreeze(members)
            for index, chunk in data.items():
                if meta.shards is None and state.is_stale(index):
                    # A shrink overtook this store: the chunk must not outlive it.
                    await self.io_pool.run(delete_chunk, self.store, meta, index)
                    self.cache.counters.chunks_deleted += 1
                    self.cache.forget(meta.path, index)
                elif staged is None or batch.keep:
                    if meta.shards is None:
                        missing = staged is None
                    else:  # left out of its shard, or the shard deleted
                        missing = stored_index is None or is_fill(chunk, meta)
                    self.cache.put(meta.path, index, None if missing else chunk)
                else:
                    self.cache.forget(meta.path, index)
        finally:
            if meta.shards is not None:
                self.cache.end_replace(meta.path, unit, stored_index)
            state.chunks.release(unit)
            if not arrived:
                batch.arrive()

    async def sync(self) -> None:
        """Make every chunk replaced so far durable: one fsync per directory."""
        keys, self._unsynced = sorted(self._unsynced), set()
        if keys:
            try:
                with trio.CancelScope(shield=True):
                    await self.io_pool.run(self.store.sync, keys)
            except BaseException:
                self._unsynced.update(keys)
                raise

    async def _gather(
        self,
        jobs: Iterable[tuple[ArrayState, Index]],
        units: Iterable[tuple[ArrayState, Index]] = (),
        *,
        keep: bool = True,
        rewrite: Iterable[tuple[ArrayState, Index]] = (),
    ) -> None:
        """Flush chunks as one batch; raise the first failure after all have run.

        Chunks are stored by their unit (the chunk itself, or the shard holding it,
        with every dirty inner chunk of that shard); ``units`` are stored if they hold
        dirty chunks, ``rewrite`` ones even if not (shards holding chunks a shrink
        made stale). Units are
        encoded and staged concurrently, committed together (their bytes made
        durable, then renamed into place), then their directories are synced by
        ``sync``. With ``keep``, stored chunks stay in the decoded-chunk cache.
        Batches run concurrently (the workers' queue bounds the parallelism), so one
        encodes while another commits; a unit still held by an earlier batch waits
        for it, so an older snapshot never overtakes a newer one.
        """
        wanted: dict[tuple[int, Index], tuple[ArrayState, Index, bool]] = {}
        for state, index in jobs:
            if not state.meta.holds_chunk(index):
                continue  # a shrink dropped it after it was queued
            unit = state.meta.unit_of(index)
            wanted.setdefault((id(state), unit), (state, unit, False))
        for state, unit in units:
            wanted.setdefault((id(state), unit), (state, unit, False))
        for state, unit in rewrite:
            wanted[(id(state), unit)] = (state, unit, True)
        # Each unit once (twice would wait for itself), and taken in one global
        # order: a batch waits for a unit another batch holds while holding only
        # units that come earlier, so no two batches can wait for each other.
        ordered = [wanted[k] for k in sorted(wanted)]
        errors: list[BaseException] = []

        async def complete(state: ArrayState, index: Index) -> None:
            with contextlib.suppress(ZarrfsError):  # reported when the chunk is taken
                await state.materialise(index)

        async def one(
            state: ArrayState,
            meta: ArrayMeta,
            unit: Index,
            members: dict[Index, Dirty],
            batch: Batch,
        ) -> None:
            try:
                await self._flush_unit(state, meta, unit, members, batch)
            except ZarrfsError as e:
                errors.append(e)

        # Partly written chunks are merged with the stored ones first, concurrently
        # and holding nothing; taking them below then rarely has to wait.
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
        batch = Batch(len(ordered), keep=keep)
        # Shielded: a batch cut short would leave its worker threads renaming
        # older snapshots while the unmount's final flush stores newer ones.
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                for state, unit, forced in ordered:
                    try:
                        members = await self._take(state, unit)
                    except ZarrfsError as e:
                        members = {}
                        forced = False
                        errors.append(e)
                    if not members and not (forced and state.meta.holds_unit(unit)):
                        # Nothing to store; a rewrite of a unit a shrink has since
                        # left wholly beyond the end is the next resize's deletion.
                        batch.arrive()
                        continue
                    taken = state.meta  # as the members were taken, before any shrink
                    self._hand_over(state, unit, members)
                    nursery.start_soon(one, state, taken, unit, members, batch)
                await batch.ready.wait()
                try:
                    async with self._commit_lock:
                        if batch.staged:
                            await self.io_pool.run(self.store.commit, batch.staged)
                except ZarrfsError as e:
                    batch.error = e
                finally:
                    batch.committed.set()
        if errors:
            self._failed(errors[0])
            raise errors[0]
        if batch.staged:
            self._stored()

    def _failed(self, error: ZarrfsError) -> None:
        self.cache.counters.store_failed(error)
        self.failure = error
        self._backoff = min(RETRY_MAX, max(RETRY_FIRST, 2 * self._backoff))
        self._retry_at = time.monotonic() + self._backoff

    def _stored(self) -> None:
        self.failure = None
        self._backoff = 0.0

    def backing_off(self) -> bool:
        """A store failed recently: background flushes wait before trying again."""
        return self.failure is not None and time.monotonic() < self._retry_at

    async def flush_metadata(self, state: ArrayState) -> None:
        """Store a resize: the new shape, then the deletion of what it left stale.

        A resize is a unit of work like a batch. The marks it settles are taken
        first (a resize while it runs keeps its own, for the next flush); units a
        batch took before it are waited for before the store is listed, so none of
        them can land stale after the listing; and each unit it deletes is held
        from the moment it is chosen, with no await in between, until it is gone:
        a later store of that unit waits for the deletion, never the reverse.
        """
        if self._meta_lock is None:
            self._meta_lock = trio.Lock()
        async with self._meta_lock:
            self._resized.pop(id(state), None)
            marks = state.low_rows, state.high_rows, state.shrinks
            stale: list[Index] = []
            if state.stale_range() is not None:
                await self._settle(state)
                stored = await self.io_pool.run(stored_units, self.store, state.meta)
                stale = await self._claim_stale(state, stored)
            try:
                await self._store_resize(state, stale, marks)
            finally:
                for unit in stale:
                    state.chunks.release(unit)
        if state.tail:
            self.resized(state)  # keep it known, so unmount reports the dropped tail

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
                await self._gather([], rewrite=[(state, unit) for unit in todo])
                rewritten.update(todo)
                self.cache.invalidate(state.meta.path)  # the inner chunks left out
            for event in busy:
                await event.wait()
            candidates = stale

    async def _store_resize(
        self, state: ArrayState, stale: list[Index], marks: tuple[int, int, int]
    ) -> None:
        meta = state.meta
        rows = meta.shape[0] if meta.shape else 0
        if not state.metadata_changed and not stale:
            state.mark_stored(rows, *marks)
            if state.tail:
                self.resized(state)
            return
        name, document, consolidated = resized_documents(meta, state.documents, self.root_documents)
        stale_keys = [key for unit in stale for key in meta.unit_keys(unit)]
        try:
            with trio.CancelScope(shield=True):
                did = await self.io_pool.run(
                    store_metadata,
                    self.store,
                    join_key(meta.path, name),
                    document,
                    consolidated,
                    stale_keys,
                )
        except BaseException:
            self.resized(state)
            raise
        self.cache.counters.stored(did)
        # The cache must not bring a deleted chunk back.
        if meta.shards is not None:
            self.cache.invalidate(meta.path)  # inner chunks of deleted shards
        for index in stale if meta.shards is None else ():
            self.cache.put(meta.path, index, None)
        state.documents[name] = document
        if consolidated is not None and self.root_documents is not None:
            self.root_documents[consolidated[0]] = consolidated[1]
        state.mark_stored(rows, *marks)

    async def store_array(self, state: ArrayState) -> None:
        """Every chunk and the shape of one array into the store; a pending partial
        row stays pending (it is no part of the shape). Errors propagate."""
        await self._gather(*self._unstored(state))
        await self.sync()
        await self.flush_metadata(state)

    async def flush_array(self, state: ArrayState) -> None:
        """Everything of one array into the store (fsync, close). Errors propagate."""
        await self.store_array(state)
        if state.tail:
            raise InvalidArgumentError(
                f"{state.meta.display_name}: {len(state.tail)} bytes of an incomplete row "
                "are pending"
            )

    def _unstored(
        self, state: ArrayState
    ) -> tuple[list[tuple[ArrayState, Index]], list[tuple[ArrayState, Index]]]:
        """Its dirty chunks, and the units an earlier batch holds: that batch may
        fail and give them back, and an fsync must not return before they are
        stored. (chunks, units) as ``_gather`` takes them."""
        held = [(state, unit) for unit in state.chunks.held()]
        return [(state, index) for index in state.dirty], held

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

    async def flush_all(self) -> None:
        errors = []
        for state in self.states():
            try:
                await self._gather(*self._unstored(state))
                await self.sync()
                await self.flush_metadata(state)
            except ZarrfsError as e:
                errors.append(e)
                log.error("flush of %s failed: %s", state.meta.display_name, e)
        if errors:
            raise errors[0]

    def _too_far_behind(self) -> bool:
        if not self._storing_behind:
            return False
        queued = sum(s.meta.chunk_nbytes for s, _ in self._behind.values())
        # A smaller --write-cache-size also bounds what a stream may leave behind.
        limit = max(min(BEHIND_LIMIT, self.budget), 2 * self.pool.threads * self._behind_largest)
        return queued + self._behind_held > limit

    async def admit(self) -> None:
        """Before a write: while dirty chunks exceed the budget, flush the oldest and
        wait; refuse the write (the store's errno) only while a store has failed
        recently, instead of growing the cache past its bound. Other writers may
        fill the cache again while one flushes: that is a wait, never a refusal."""
        while self.dirty_bytes > self.budget:
            if self.backing_off():
                self._refuse()
            with contextlib.suppress(ZarrfsError):  # kept in ``failure``: refused above
                await self._flush_oldest()

    def _refuse(self) -> None:
        failure = self.failure
        assert failure is not None
        self.failure_log(
            logging.ERROR,
            "refusing writes: %d bytes not stored fill the write cache (%d): %s",
            self.dirty_bytes,
            self.budget,
            failure,
        )
        refusal = StoreError(f"write cache full and storing failed: {failure}", failure.errno)
        refusal.logged = True  # type: ignore[attr-defined]
        raise refusal

    async def relieve(self) -> None:
        """After a write: wait while a streaming writer is too far ahead of the
        encoders; past the dirty budget, flush the oldest chunks to half of it.
        Failures are kept (``failure``) and reported by fsync, close or ``admit``."""
        while self._too_far_behind():
            await self._behind_done.wait()
        if self.dirty_bytes <= self.budget or self.backing_off():
            return
        try:
            await self._flush_oldest()
        except ZarrfsError as e:
            self.failure_log(
                logging.WARNING, "storing chunks past the write-cache budget failed: %s", e
            )

    async def _flush_oldest(self) -> None:
        jobs = []
        planned = 0
        for state, index, _, cost in list(self._order.values()):
            if self.dirty_bytes - planned <= self.budget // 2:
                break
            jobs.append((state, index))
            planned += cost
        await self._gather(jobs)

    async def run_write_behind(self) -> None:
        """Store finished chunks of streaming writers, batch by batch, forever.

        Encoding then overlaps with the writes that follow instead of all waiting
        for the writer's fsync or close; durability is unchanged (fsync/close).
        A batch starts without waiting for the one before, up to one more batch
        than there are workers: enough to keep them busy, and while they are,
        chunks gather into larger batches (each batch costs the event loop tasks
        and a commit). ``relieve`` bounds how much is held.
        """
        self._storing_behind = True
        slots = trio.Semaphore(self.pool.threads + 1)
        async with trio.open_nursery() as nursery:
            while True:
                await self._behind_ready.wait()
                await slots.acquire()
                self._behind_ready = trio.Event()
                jobs, self._behind = list(self._behind.values()), {}
                held = sum(state.meta.chunk_nbytes for state, _ in jobs)
                self._behind_held += held
                nursery.start_soon(self._store_behind, jobs, held, slots)

    async def _store_behind(
        self, jobs: list[tuple[ArrayState, Index]], held: int, slots: trio.Semaphore
    ) -> None:
        try:
            await self._gather(jobs, keep=False)
        except ZarrfsError as e:
            self.failure_log(
                logging.WARNING, "background store failed (the chunks stay dirty): %s", e
            )
        except Exception:
            # A bug must cost this batch, not the mount and every other array's
            # dirty data: its chunks stay dirty, and fsync or close reports.
            self.cache.counters.errors += 1
            log.exception("internal error storing chunks in the background")
        finally:
            self._behind_held -= held
            slots.release()
            self._behind_done.set()  # a writer held back may go on
            self._behind_done = trio.Event()

    async def run_periodic(self) -> None:
        """Flush what has been dirty longer than the flush interval, forever."""
        while True:
            await trio.sleep(max(0.05, min(1.0, self.interval / 2)))
            if self.backing_off():
                continue
            deadline = time.monotonic() - self.interval
            old = [(s, i) for s, i, d, _ in self._order.values() if d.since <= deadline]
            try:
                if old:
                    await self._gather(old)
                for state, since in list(self._resized.values()):
                    if since <= deadline and not state.dirty:
                        await self.flush_metadata(state)
            except ZarrfsError as e:
                self.failure_log(logging.ERROR, "periodic flush failed (will retry): %s", e)
            except Exception:
                self.cache.counters.errors += 1
                log.exception("internal error in the periodic flush (will retry)")
