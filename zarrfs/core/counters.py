"""What a mount has done so far, for ``.zarrfs/stats`` (views/control.py).

One ``Counters`` object per chunk cache, so every layer that does the counted work
reaches it through the cache it already holds (the FUSE layer through its tree).
Every counter is a plain int bumped on the trio thread, where the work is decided
or its result arrives: no lock, no atomic, nothing on a worker thread. Worker
threads report what they did in their result (``Staged``), and the trio thread
adds it up.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Staged:
    """What storing one unit (a chunk, a shard, a resize's documents) did."""

    encoded: int = 0  # chunks (inner chunks of a shard) encoded
    nbytes: int = 0  # bytes written to the store (once committed)
    deleted: int = 0  # values deleted from the store


@dataclass(slots=True)
class Counters:
    bytes_read: int = 0  # of array.raw and array.npy, returned to readers
    directory_reads: int = 0  # readdir requests answered (a listing the kernel kept asks none)
    listed_ahead: int = 0  # directories a walk would open next, listed while idle
    cache_hits: int = 0  # chunk requests answered from the decoded-chunk cache
    cache_misses: int = 0  # chunk requests that had to wait for a load
    chunks_loaded: int = 0  # store reads (and decodes) started
    read_ahead_loads: int = 0  # of them, started ahead of a reader
    chunks_decoded: int = 0
    chunks_encoded: int = 0
    chunks_deleted: int = 0
    bytes_stored: int = 0  # chunks, shards and metadata documents written
    errors: int = 0  # failures returned to callers (EIO, ENOSPC, ...)
    decode_failures: int = 0  # chunks found bad (corrupt, undecodable, unreadable)
    store_failures: int = 0  # chunk reads and flushes the store failed
    last_store_error: str | None = None  # the newest of them, as logged
    started: float = field(default_factory=time.monotonic)
    # Reads of array.raw and array.npy go straight into the reader's buffer (one
    # copy), the page cache unused: fuse/directio.py says when the mount can.
    direct_reads: bool = False
    # Not in stats: whether the read path reuses its memory.
    buffers_recycled: int = 0  # decode buffers kept for the next load
    stripes_assembled: int = 0
    stripe_chunks_placed: int = 0  # copied into their stripe by the load that decoded them
    stripe_buffers_reused: int = 0  # stripes assembled into a buffer given back

    def store_failed(self, error: Exception) -> None:
        self.store_failures += 1
        self.last_store_error = str(error)

    def staged(self, staged: Staged) -> None:
        """A unit was encoded and staged (its bytes count once committed)."""
        self.chunks_encoded += staged.encoded
        self.chunks_deleted += staged.deleted

    def committed(self, staged: Staged) -> None:
        self.bytes_stored += staged.nbytes

    def stored(self, staged: Staged) -> None:
        """Written and in place at once (metadata documents, stale deletions)."""
        self.staged(staged)
        self.committed(staged)

    @property
    def uptime(self) -> float:
        return time.monotonic() - self.started
