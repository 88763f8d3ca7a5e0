"""Buffers that whole-file reads land in, used again once nothing refers to them.

Reading a disk-cache entry into fresh memory costs a page fault per 4 KiB on top of
the copy, and a stream reads hundreds of entries of a few MiB: on this kind of VM
the faults were an eighth of a cached read's decoding threads (docs/benchmarks.md,
network). A read here lands in a buffer of the pool when one is free, and the value
handed out is a view of it: the buffer is free again when every view of it is gone
(CPython's reference counts are exact). A view kept for long (an uncompressed
chunk decoded as a view of its entry) only keeps its buffer out of use; past
MAX_BUFFERS the pool forgets the oldest such buffer, which lives on as long as its
views do. Thread-safe: the decoders read entries at once.
"""

from __future__ import annotations

import os
import sys
import threading

import numpy as np

# Files smaller than this are read into new memory: a few pages, no gain.
MIN_POOLED = 256 * 2**10
# Buffers kept; each serves files down to half its size (no more memory wasted).
MAX_BUFFERS = 16
MAX_POOLED = 64 * 2**20  # larger files: new memory each time
# A new buffer is this fraction larger than the file it is made for: the runs of a
# stream differ by a few per cent, and a buffer each slightly larger one cannot
# take is new memory faulted in (measured: 16 buffers per sharded read, 10 with it).
HEADROOM = 8  # (1/8)

# Two references while a buffer is free: the pool's list and getrefcount's argument.
_FREE_REFS = 2


class ReadBuffers:
    def __init__(self, max_buffers: int = MAX_BUFFERS) -> None:
        self.max_buffers = max_buffers
        self._lock = threading.Lock()
        self._buffers: list[np.ndarray] = []  # oldest first
        self.reused = 0  # reads that landed in a buffer used before (tests, stats)

    def _take(self, nbytes: int) -> np.ndarray:
        """A free buffer of at least ``nbytes`` (at most twice that), else a new one
        kept in the pool in place of the oldest."""
        with self._lock:
            buffers = self._buffers
            for i in range(len(buffers)):
                # (no name for the buffer while it is judged: one more reference)
                if nbytes <= buffers[i].nbytes <= 2 * nbytes and (
                    sys.getrefcount(buffers[i]) == _FREE_REFS
                ):
                    buffer = buffers.pop(i)
                    buffers.append(buffer)  # the most recently used last
                    self.reused += 1
                    return buffer
            size = nbytes + nbytes // HEADROOM
            buffer = np.empty(-(-size // 4096) * 4096, dtype=np.uint8)  # whole pages
            self._buffers.append(buffer)
            if len(self._buffers) > self.max_buffers:
                del self._buffers[0]
            return buffer

    def read(self, fd: int, size: int) -> bytes | memoryview:
        """The bytes of ``fd`` from its offset on: ``size`` of them, one more if the
        file grew since it was measured (the caller tells), fewer if it shrank."""
        want = size + 1  # one byte more: a file that grew is no entry
        if want < MIN_POOLED or want > MAX_POOLED:
            return _read_new(fd, size)
        buffer = self._take(want)
        view = memoryview(buffer)[:want]
        got = 0
        while got < want:
            n = os.readv(fd, [view[got:]])
            if n == 0:
                break
            got += n
        return view[:got].toreadonly()


def _read_new(fd: int, size: int) -> bytes:
    data = os.read(fd, size + 1)
    while len(data) < size:
        more = os.read(fd, size + 1 - len(data))
        if not more:
            break
        data += more
    return data
