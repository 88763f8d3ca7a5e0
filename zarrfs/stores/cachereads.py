"""Two records the disk cache (stores/diskcache.py) keeps of its reads, each under a
lock of its own (decoders and fetch threads read at once):

- ``Writes``: which keys were written since a read began. A read that began before
  a write of its key must not cache what it read (it may be the old value).
- ``RecentReads``: where the last values read came from, the cache's files or the
  network: a stream over values the files answer is read as a local store's is.
"""

from __future__ import annotations

import threading
from collections import deque

FORGET = 4096  # keys whose writes are remembered; past it, every read begun before
RECENT_READS = 16  # reads that say whether the cache's files answer them now


class Writes:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clock = 0
        self._floor = 0  # reads begun before this are never cached
        self._written: dict[str, int] = {}

    def begin(self) -> int:
        with self._lock:
            self._clock += 1
            return self._clock

    def wrote(self, key: str) -> None:
        with self._lock:
            self._clock += 1
            if len(self._written) >= FORGET:
                self._written.clear()
                self._floor = self._clock
            self._written[key] = self._clock

    def may_cache(self, key: str, begun: int) -> bool:
        with self._lock:
            return begun > self._floor and self._written.get(key, 0) < begun


class RecentReads:
    """The last RECENT_READS values read, as answered from files or not, with the
    count of the former kept as they come (asked at every read-ahead step: a count
    kept, not a sum)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._recent: deque[bool] = deque(maxlen=RECENT_READS)
        self._served = 0  # of them, answered from files

    def note(self, served: bool, count: int = 1) -> None:
        """``count`` values answered from the cache's files (``served``), or whose
        bytes came over the network (a key found still missing, a HEAD: neither)."""
        with self._lock:
            recent = self._recent
            for _ in range(min(count, RECENT_READS)):
                if len(recent) == RECENT_READS:
                    self._served -= recent[0]
                recent.append(served)
                self._served += served

    def mostly_served(self) -> bool:
        """Three quarters of them (and at least one) were answered from files."""
        with self._lock:
            n = len(self._recent)
            return n > 0 and 4 * self._served >= 3 * n
