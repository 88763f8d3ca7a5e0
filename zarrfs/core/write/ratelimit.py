"""What a failing store may cost: retries and log lines, each rate-limited.

``Backoff`` keeps the last failure to store until a store succeeds again, and the
time before which background flushes do not try the store again; ``RateLimitedLog``
keeps a failure repeated many times a second from multiplying log lines.
"""

from __future__ import annotations

import logging
import time

from zarrfs.errors import ZarrfsError

# After a failed store, the next try waits this long, doubling up to the maximum:
# a full disk must not make every write re-encode chunks that fail again.
RETRY_FIRST = 0.5
RETRY_MAX = 30.0


class RateLimitedLog:
    """At most one line per ``interval`` seconds; the next one says how many were
    left out, so a full disk costs a few lines, not one per write."""

    def __init__(self, logger: logging.Logger, interval: float = 10.0) -> None:
        self._logger = logger
        self.interval = interval
        self._next = 0.0
        self.suppressed = 0

    def __call__(self, level: int, message: str, *args: object) -> bool:
        """Log it, or count it; True when it was logged."""
        now = time.monotonic()
        if now < self._next:
            self.suppressed += 1
            return False
        if self.suppressed:
            message += " (%d more like it in the last %gs not logged)"
            args = (*args, self.suppressed, self.interval)
            self.suppressed = 0
        self._logger.log(level, message, *args)
        self._next = now + self.interval
        return True


class Backoff:
    """The last failure to store, until a store succeeds again.

    No background or budget flush is tried before the back-off has passed, and past
    the write-cache budget writes are refused with the failure's errno instead of
    growing the cache (core/write/admission.py). ``log`` is the one rate-limited log
    of every store failure write-back reports, so that they share one rate."""

    def __init__(self, log: RateLimitedLog) -> None:
        self.log = log
        self.failure: ZarrfsError | None = None
        self._retry_at = 0.0
        self._delay = 0.0

    def failed(self, error: ZarrfsError) -> None:
        self.failure = error
        self._delay = min(RETRY_MAX, max(RETRY_FIRST, 2 * self._delay))
        self._retry_at = time.monotonic() + self._delay

    def stored(self) -> None:
        self.failure = None
        self._delay = 0.0

    def backing_off(self) -> bool:
        """A store failed recently: background flushes wait before trying again."""
        return self.failure is not None and time.monotonic() < self._retry_at
