"""Write-back: dirty chunks and resizes into the store, composed of its parts.

``WriteBack`` builds the parts of the write path's store side and is what the
rest of zarrfs calls: array states report dirty chunks (``track``, ``dropped``),
finished chunks of a stream (``behind``) and resizes (``resized``); the FUSE layer
admits writes (``admit``, ``relieve``) and flushes an array at fsync and close
(``flush_array``); views store an array (``store_array``), flush everything
(``flush_all``) and report (``states``, ``dirty_bytes``, ``budget``, ``failure``);
the daemon runs the two loops (``run_periodic``, ``run_write_behind``).

Order at a flush of an array: chunks (``Batches``), directory syncs (``Storing``),
then the metadata document with the new shape and the deletion of chunks a shrink
left beyond the end (``Resizes``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from zarrfs.core.pool import default_threads
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.write.admission import Admission
from zarrfs.core.write.batches import Batches
from zarrfs.core.write.behind import WriteBehind
from zarrfs.core.write.chunkstate import Dirty
from zarrfs.core.write.ledger import Job, Ledger
from zarrfs.core.write.periodic import PeriodicFlush
from zarrfs.core.write.ratelimit import Backoff, RateLimitedLog
from zarrfs.core.write.resizes import Resizes
from zarrfs.core.write.storing import Storing
from zarrfs.core.write.together import each_at_once, each_in_turn
from zarrfs.errors import InvalidArgumentError, ZarrfsError
from zarrfs.formats.grid.layout import Index
from zarrfs.stores.base import Store

if TYPE_CHECKING:
    from zarrfs.core.arrays import ArrayState

log = logging.getLogger(__name__)


class WriteBack:
    def __init__(
        self,
        store: Store,
        cache: ChunkCache,
        budget: int,
        interval: float,
        threads: int | None = None,
    ) -> None:
        counters = cache.counters
        self.cache = cache
        self.ledger = Ledger(budget)
        self.backoff = Backoff(RateLimitedLog(log))
        self.storing = Storing(store, threads or default_threads())
        self.batches = Batches(self.storing, cache, counters, self.ledger, self.backoff)
        self.resizes = Resizes(self.storing, self.batches, cache, counters, self.ledger)
        self.write_behind = WriteBehind(
            self.ledger, self.storing.pool, self.batches, self.backoff, counters
        )
        self.admission = Admission(self.ledger, self.backoff, self.write_behind, self.batches)
        self.periodic = PeriodicFlush(
            interval, self.ledger, self.batches, self.resizes, self.backoff, counters
        )

    # -- reported by array states (trio thread, no awaits) ---------------------------

    def track(self, state: ArrayState, index: Index, dirty: Dirty) -> None:
        self.ledger.track(state, index, dirty)

    def dropped(self, state: ArrayState, index: Index) -> None:
        self.ledger.dropped(state, index)

    def behind(self, state: ArrayState, index: Index) -> None:
        """A streaming writer has moved past this chunk: store it in the background."""
        self.write_behind.queue(state, index)

    def resized(self, state: ArrayState) -> None:
        self.ledger.resized(state)

    # -- writers ----------------------------------------------------------------------

    async def admit(self) -> None:
        """Before a write to an array: wait while the write cache is full; refuse
        the write while the store is failing (``Admission.admit``)."""
        await self.admission.admit()

    async def relieve(self) -> None:
        """After a write: wait while a stream is too far ahead of the encoders; past
        the budget, flush the oldest chunks (``Admission.relieve``)."""
        await self.admission.relieve()

    # -- flushes ----------------------------------------------------------------------

    async def sync(self) -> None:
        """Make every chunk replaced so far durable: one fsync per directory."""
        await self.storing.sync()

    async def flush_metadata(self, state: ArrayState) -> None:
        """Store a resize of ``state`` (``Resizes.flush``)."""
        await self.resizes.flush(state)

    async def store_array(self, state: ArrayState) -> None:
        """Every chunk and the shape of one array into the store; a pending partial
        row stays pending (it is no part of the shape). Errors propagate."""
        await self.batches.gather(*self._unstored(state))
        await self.storing.sync()
        await self.resizes.flush(state)

    async def flush_array(self, state: ArrayState) -> None:
        """Everything of one array into the store (fsync, close). Errors propagate."""
        await self.store_array(state)
        if state.tail:
            raise InvalidArgumentError(
                f"{state.meta.display_name}: {len(state.tail)} bytes of an incomplete row "
                "are pending"
            )

    @staticmethod
    def _unstored(state: ArrayState) -> tuple[list[Job], list[Job]]:
        """Its dirty chunks, and the units an earlier batch holds: that batch may
        fail and give them back, and an fsync must not return before they are
        stored. (chunks, units) as ``Batches.gather`` takes them."""
        held = [(state, unit) for unit in state.chunks.held()]
        return [(state, index) for index in state.dirty], held

    async def flush_all(self) -> None:
        """Every array stored as ``store_array`` stores it; the first failure is
        raised once every array was tried. On a remote store all arrays at once,
        their PUTs together in flight; on a local one, one after the other (its
        commits go one at a time whatever the order)."""

        async def flush(state: ArrayState) -> None:
            try:
                await self.store_array(state)
            except ZarrfsError as e:
                log.error("flush of %s failed: %s", state.meta.display_name, e)
                raise

        if self.storing.each_unit:
            await each_at_once(flush, self.states())
        else:
            await each_in_turn(flush, self.states())

    # -- what is not yet stored ---------------------------------------------------------

    def states(self) -> list[ArrayState]:
        """Arrays with anything not yet in the store."""
        return self.ledger.states()

    @property
    def dirty_bytes(self) -> int:
        return self.ledger.dirty_bytes

    @property
    def budget(self) -> int:
        return self.ledger.budget

    @property
    def failure(self) -> ZarrfsError | None:
        """The last failure to store, until a store succeeds again."""
        return self.backoff.failure

    # -- the loops the daemon runs in its nursery ---------------------------------------

    async def run_periodic(self) -> None:
        await self.periodic.run()

    async def run_write_behind(self) -> None:
        await self.write_behind.run()
