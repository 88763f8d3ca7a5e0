"""The periodic flush: what has been dirty longer than the flush interval, stored.

It runs forever in the mount's nursery. A failure is reported to fsync and close
through the chunks left dirty; a bug is logged with its traceback and counted, and
the loop goes on, so one bad flush never ends the daemon and with it every other
array's dirty data. Nothing is tried while the store is backing off.
"""

from __future__ import annotations

import logging
import time

import trio

from zarrfs.core.counters import Counters
from zarrfs.core.write.batches import Batches
from zarrfs.core.write.ledger import Ledger
from zarrfs.core.write.ratelimit import Backoff
from zarrfs.core.write.resizes import Resizes
from zarrfs.errors import ZarrfsError

log = logging.getLogger(__name__)


class PeriodicFlush:
    def __init__(
        self,
        interval: float,
        ledger: Ledger,
        batches: Batches,
        resizes: Resizes,
        backoff: Backoff,
        counters: Counters,
    ) -> None:
        self.interval = interval  # --flush-interval, seconds
        self._ledger = ledger
        self._batches = batches
        self._resizes = resizes
        self._backoff = backoff
        self._counters = counters

    async def run(self) -> None:
        """Flush what has been dirty longer than the flush interval, forever."""
        while True:
            await trio.sleep(max(0.05, min(1.0, self.interval / 2)))
            if self._backoff.backing_off():
                continue
            deadline = time.monotonic() - self.interval
            old = self._ledger.dirty_before(deadline)
            try:
                if old:
                    await self._batches.gather(old)
                for state in self._ledger.resized_before(deadline):
                    if not state.dirty:
                        await self._resizes.flush(state)
            except ZarrfsError as e:
                self._backoff.log(logging.ERROR, "periodic flush failed (will retry): %s", e)
            except Exception:
                self._counters.errors += 1
                log.exception("internal error in the periodic flush (will retry)")
