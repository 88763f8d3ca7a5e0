"""Log lines that a failure repeated many times a second must not multiply."""

from __future__ import annotations

import logging
import time


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
