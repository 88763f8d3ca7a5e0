"""Write-behind: chunks a streaming writer has finished, stored while it goes on.

Encoding then overlaps with the writes that follow instead of all waiting for the
writer's fsync or close; durability is unchanged (fsync/close). Chunks stored
behind a stream are dropped from the decoded-chunk cache afterwards rather than
kept, like chunks a reading stream has passed.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from zarrfs.core.counters import Counters
from zarrfs.core.pool import WorkerPool
from zarrfs.core.write.batches import Batches
from zarrfs.core.write.ledger import DirtyKey, Job, Ledger
from zarrfs.core.write.ratelimit import Backoff
from zarrfs.errors import ZarrfsError
from zarrfs.formats.grid.layout import Index

if TYPE_CHECKING:
    from zarrfs.core.arrays import ArrayState

log = logging.getLogger(__name__)

# A streaming writer waits while more than this many bytes of finished chunks are
# queued or being stored (or two chunks per worker, if more): it cannot outrun the
# encoders by more, so chunk memory is reused instead of growing to the write-cache
# budget (measured: ~11 000 instead of ~58 000 page faults per 256 MiB rewritten).
BEHIND_LIMIT = 32 << 20


class WriteBehind:
    def __init__(
        self,
        ledger: Ledger,
        encoders: WorkerPool,
        batches: Batches,
        backoff: Backoff,
        counters: Counters,
    ) -> None:
        self._ledger = ledger  # its budget bounds what a stream may leave behind
        self._encoders = encoders  # their number sizes the batches in flight
        self._batches = batches
        self._backoff = backoff
        self._counters = counters
        self._queue: dict[DirtyKey, Job] = {}
        self._ready = trio.Event()
        self._done = trio.Event()
        self._running = False  # ``run`` is running
        self._held = 0  # bytes of chunks in write-behind batches
        self._largest = 0  # the largest chunk queued behind so far

    def queue(self, state: ArrayState, index: Index) -> None:
        """A streaming writer has moved past this chunk: store it in the background."""
        self._queue[(id(state), index)] = (state, index)
        self._largest = max(self._largest, state.meta.chunk_nbytes)
        self._ready.set()

    def too_far_behind(self) -> bool:
        if not self._running:
            return False
        queued = sum(s.meta.chunk_nbytes for s, _ in self._queue.values())
        # A smaller --write-cache-size also bounds what a stream may leave behind.
        budget = self._ledger.budget
        limit = max(min(BEHIND_LIMIT, budget), 2 * self._encoders.threads * self._largest)
        return queued + self._held > limit

    async def wait(self) -> None:
        """While a streaming writer is too far ahead of the encoders."""
        while self.too_far_behind():
            await self._done.wait()

    async def run(self) -> None:
        """Store queued chunks, batch by batch, forever.

        A batch starts without waiting for the one before, up to one more batch
        than there are workers: enough to keep them busy, and while they are,
        chunks gather into larger batches (each batch costs the event loop tasks
        and a commit). ``wait`` bounds how much is held.
        """
        self._running = True
        slots = trio.Semaphore(self._encoders.threads + 1)
        async with trio.open_nursery() as nursery:
            while True:
                await self._ready.wait()
                await slots.acquire()
                self._ready = trio.Event()
                jobs, self._queue = list(self._queue.values()), {}
                held = sum(state.meta.chunk_nbytes for state, _ in jobs)
                self._held += held
                nursery.start_soon(self._store, jobs, held, slots)

    async def _store(self, jobs: list[Job], held: int, slots: trio.Semaphore) -> None:
        try:
            await self._batches.gather(jobs, keep=False)
        except ZarrfsError as e:
            self._backoff.log(
                logging.WARNING, "background store failed (the chunks stay dirty): %s", e
            )
        except Exception:
            # A bug must cost this batch, not the mount and every other array's
            # dirty data: its chunks stay dirty, and fsync or close reports.
            self._counters.errors += 1
            log.exception("internal error storing chunks in the background")
        finally:
            self._held -= held
            slots.release()
            self._done.set()  # a writer held back may go on
            self._done = trio.Event()
