"""When what the mount knows of the store must be checked again (close-to-open).

Other machines and programs change a store under a mount: an append grows an array,
a new array appears in a group, a chunk is rewritten. What the mount knows of a node
(its documents, its listing, its cached chunks) was checked against the store at some
moment; it is served as it is for ``ttl`` seconds after that moment (``--metadata-ttl``),
and checked again at the first use after (an open, a lookup, a stat, a listing).
``refresh`` (``.zarrfs/refresh``) makes everything checked before it stale at once.

The clock is monotonic: a change of the wall clock neither ages nor rejuvenates
anything.
"""

from __future__ import annotations

import time
from collections.abc import Callable

# Seconds. A check of an array drops its cached chunks and pages (the store cannot say
# cheaply which of its chunks changed), so checks are not made too often: a minute,
# as gcsfuse's stat cache; --metadata-ttl 0 checks at every open.
DEFAULT_TTL = 60.0
MAX_TTL = 7 * 86400.0


class Freshness:
    def __init__(self, ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.monotonic):
        if not 0.0 <= ttl <= MAX_TTL:
            raise ValueError(f"metadata TTL {ttl!r} is not between 0 and {MAX_TTL:g} seconds")
        self.ttl = ttl
        self._clock = clock
        self._epoch = clock()  # nothing checked before this is fresh (a refresh moves it)

    def now(self) -> float:
        return self._clock()

    def stale(self, checked: float) -> bool:
        """Whether something checked at ``checked`` (a ``now()``) must be checked again.

        With a TTL of 0 everything is checked at every use: what was checked at this
        very moment counts as stale too (two opens in one clock tick see a change)."""
        now = self._clock()
        return checked < self._epoch or now - checked >= self.ttl or self.ttl == 0.0

    def refresh(self) -> None:
        """Everything checked so far is stale."""
        # Strictly after anything stamped until now, even on a coarse clock.
        self._epoch = max(self._clock(), self._epoch) + 1e-9
