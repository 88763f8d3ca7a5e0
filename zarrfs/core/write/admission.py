"""Writers and the write cache: before a write, admission; after it, relief.

Dirty chunks beyond the budget (``--write-cache-size``) are flushed oldest first,
and the writer waits. A write is refused, with the store's errno, only while a
store has failed recently (core/write/ratelimit.py's ``Backoff``), instead of
growing the cache past its bound: a healthy store never makes a write fail.
"""

from __future__ import annotations

import contextlib
import logging

from zarrfs.core.write.batches import Batches
from zarrfs.core.write.behind import WriteBehind
from zarrfs.core.write.ledger import Ledger
from zarrfs.core.write.ratelimit import Backoff
from zarrfs.errors import StoreError, ZarrfsError


class Admission:
    def __init__(
        self, ledger: Ledger, backoff: Backoff, behind: WriteBehind, batches: Batches
    ) -> None:
        self._ledger = ledger
        self._backoff = backoff
        self._behind = behind
        self._batches = batches

    async def admit(self) -> None:
        """Before a write: while dirty chunks exceed the budget, flush the oldest and
        wait; refuse the write (the store's errno) only while a store has failed
        recently, instead of growing the cache past its bound. Other writers may
        fill the cache again while one flushes: that is a wait, never a refusal."""
        while self._ledger.over_budget():
            if self._backoff.backing_off():
                self._refuse()
            with contextlib.suppress(ZarrfsError):  # kept in ``failure``: refused above
                await self._flush_oldest()

    def _refuse(self) -> None:
        failure = self._backoff.failure
        assert failure is not None
        self._backoff.log(
            logging.ERROR,
            "refusing writes: %d bytes not stored fill the write cache (%d): %s",
            self._ledger.dirty_bytes,
            self._ledger.budget,
            failure,
        )
        refusal = StoreError(f"write cache full and storing failed: {failure}", failure.errno)
        refusal.logged = True  # type: ignore[attr-defined]
        raise refusal

    async def relieve(self) -> None:
        """After a write: wait while a streaming writer is too far ahead of the
        encoders; past the dirty budget, flush the oldest chunks to half of it.
        Failures are kept (``Backoff.failure``) and reported by fsync, close or
        ``admit``."""
        await self._behind.wait()
        if not self._ledger.over_budget() or self._backoff.backing_off():
            return
        try:
            await self._flush_oldest()
        except ZarrfsError as e:
            self._backoff.log(
                logging.WARNING, "storing chunks past the write-cache budget failed: %s", e
            )

    async def _flush_oldest(self) -> None:
        await self._batches.gather(self._ledger.oldest())
