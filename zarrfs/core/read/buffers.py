"""Decode buffers given back when their entry leaves the cache, for the next load.

Decoding into fresh memory costs a page fault per 4 KiB, which on a VM is ~40% of
decoding: chunks (and stripes) made in buffers of ours give them back when they
leave the cache unreferenced. Writes take theirs here too (a dirty chunk's memory)
and offer it back once the chunk is stored; it is kept from the moment nothing else
refers to it. Touched only from the trio thread.
"""

from __future__ import annotations

import sys
from collections import deque

import numpy as np

from zarrfs.core.counters import Counters
from zarrfs.core.read.lru import CacheKey

# Unreferenced buffers kept for the next loads, in bytes at most (the cache sets
# its own bound: a stream over a network keeps many stripes' chunks in flight, and
# every chunk decoded into fresh memory pays its page faults again).
MAX_SPARE_BYTES = 64 * 2**20


class SpareBuffers:
    def __init__(self, counters: Counters, most_bytes: int = MAX_SPARE_BYTES) -> None:
        self.counters = counters
        self.most_bytes = most_bytes
        self.nbytes = 0  # of the spare buffers
        self._backing: dict[CacheKey, np.ndarray] = {}  # the buffer each entry lives in
        self._spare: dict[int, list[np.ndarray]] = {}
        # Offered buffers some view may still refer to; kept once none does.
        self._offered: deque[np.ndarray] = deque()
        self.offered_nbytes = 0

    def take(self, nbytes: int) -> np.ndarray | None:
        """A spare buffer of ``nbytes`` to assemble or decode into, if one is free."""
        spare = self._spare.get(nbytes)
        if not spare and self._offered:
            self._settle_offered()
            spare = self._spare.get(nbytes)
        if not spare:
            return None
        self.nbytes -= nbytes
        return spare.pop()

    def offer(self, chunk: np.ndarray) -> None:
        """``chunk`` is no longer needed by its owner (a dirty chunk now stored): if
        it lives in a whole buffer of ours, that buffer is kept for a later ``take``
        as soon as nothing refers to it any more (a read's slice, say)."""
        owner = chunk.base
        if (
            not isinstance(owner, np.ndarray)
            or owner.base is not None
            or owner.dtype != np.uint8
            or owner.ndim != 1
            or owner.nbytes != chunk.nbytes
        ):
            return
        if self.offered_nbytes + owner.nbytes > self.most_bytes:
            return
        self._offered.append(owner)
        self.offered_nbytes += owner.nbytes

    def _settle_offered(self) -> None:
        """Offered buffers that nothing refers to any more become spare."""
        waiting: deque[np.ndarray] = deque()
        while self._offered:
            owner = self._offered.popleft()
            self.offered_nbytes -= owner.nbytes
            # Two references: ``owner`` here and getrefcount's argument. Every view
            # of the memory (numpy's views keep the owner as their base) adds one.
            if sys.getrefcount(owner) == 2:
                if self.add(owner):
                    self.counters.buffers_recycled += 1
            else:
                waiting.append(owner)
                self.offered_nbytes += owner.nbytes
        self._offered = waiting

    def add(self, buffer: np.ndarray) -> bool:
        """Keep ``buffer`` for a later ``take``, if there is room for it."""
        if self.nbytes + buffer.nbytes > self.most_bytes:
            return False
        self._spare.setdefault(buffer.nbytes, []).append(buffer)
        self.nbytes += buffer.nbytes
        return True

    def back(self, key: CacheKey, buffer: np.ndarray) -> None:
        """The entry cached under ``key`` lives in ``buffer``, one of ours."""
        self._backing[key] = buffer

    def give_back(self, key: CacheKey) -> None:
        """The entry at ``key`` left the cache: keep its buffer if nobody holds it.

        Every view of the entry (a reader's slice, a chunk being assembled across
        an await, a flight's value) references the buffer, so a buffer whose only
        references are ours is free (CPython reference counts are exact).
        """
        buffer = self._backing.pop(key, None)
        if buffer is None:
            return
        # Two references: ``buffer`` here and getrefcount's argument.
        if sys.getrefcount(buffer) == 2 and self.add(buffer):
            self.counters.buffers_recycled += 1
