"""The control directory ``.zarrfs/`` at the mount root: ``stats``, ``flush``, ``refresh``.

``stats`` is the mount's counters as JSON, made afresh by each read from its start:
like ``info`` (and the files of /proc) it has size 0 and its handles use direct
I/O, so the kernel caches nothing and ``cat`` reads it to end of file. Writing
anything to ``flush`` stores every dirty chunk of every array (and rewrites the
metadata of resized ones) before the write returns, and fails with the store's
errno as ``fsync`` does; reading it gives nothing. On a read-only mount ``flush``
is there but refuses writing with EROFS. Writing anything to ``refresh`` (on any
mount) makes everything the mount knows of the store stale: each node, listing and
cached chunk is checked against the store at its next use, and the kernel's caches
of names, attributes and pages are dropped before the write returns. The directory is
listed at the mount root (``ls -a`` shows it) and wins over a store node of its
name; only mounts have it (namespace/tree.py's ``Tree.show_control``). docs/semantics.md
says why.

The counters are gathered when ``stats`` is read, from the mount's one
``Counters`` object (core/counters.py: bumped where the work is done, the FUSE
layer's errors and bytes read included) and from the state of the caches.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from zarrfs.core.counters import Counters
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.write.writeback import WriteBack
from zarrfs.errors import InvalidArgumentError, ReadOnlyError
from zarrfs.stores.base import Store
from zarrfs.stores.diskcache import DiskCacheStore
from zarrfs.views.base import View

CONTROL_NAME = ".zarrfs"
STATS_NAME = "stats"
FLUSH_NAME = "flush"
REFRESH_NAME = "refresh"


def snapshot(
    cache: ChunkCache, counters: Counters, writeback: WriteBack | None, store: Store
) -> dict[str, Any]:
    """Every counter of the mount, now (trio thread: nothing here waits)."""
    states = writeback.states() if writeback is not None else []
    return {
        "store": store.describe(),
        "read_only": writeback is None,
        "uptime_seconds": round(counters.uptime, 3),
        "bytes_read": counters.bytes_read,
        "directory_reads": counters.directory_reads,
        "listed_ahead": counters.listed_ahead,
        "direct_reads": counters.direct_reads,
        "cache_hits": counters.cache_hits,
        "cache_misses": counters.cache_misses,
        "chunks_loaded": counters.chunks_loaded,
        "read_ahead_loads": counters.read_ahead_loads,
        "chunks_decoded": counters.chunks_decoded,
        "cache_bytes": cache.nbytes,
        "cache_size": cache.max_bytes,
        "chunks_encoded": counters.chunks_encoded,
        "chunks_deleted": counters.chunks_deleted,
        "bytes_stored": counters.bytes_stored,
        "dirty_chunks": sum(len(state.dirty) for state in states),
        "dirty_bytes": writeback.dirty_bytes if writeback is not None else 0,
        "chunks_being_stored": sum(len(state.frozen) for state in states),
        "write_cache_size": writeback.budget if writeback is not None else 0,
        "errors": counters.errors,
        "decode_failures": counters.decode_failures,
        "store_failures": counters.store_failures,
        "last_store_error": counters.last_store_error,
        # Stores are failing now: background flushes back off, and past the write
        # cache's budget writes are refused (until a store succeeds again).
        "store_failing": writeback is not None and writeback.failure is not None,
        # --disk-cache: hits, misses, revalidations, bytes (stores/diskcache.py)
        **({"disk_cache": store.counters()} if isinstance(store, DiskCacheStore) else {}),
    }


class StatsView(View):
    """``.zarrfs/stats``: JSON made afresh by each read from offset 0."""

    volatile = True
    # How many recent texts' lengths are remembered (see ``read``).
    _REMEMBERED = 8

    def __init__(self, render: Callable[[], dict[str, Any]]) -> None:
        self._render = render
        self._text = b""
        self._ends: deque[int] = deque(maxlen=self._REMEMBERED)

    @property
    def size(self) -> int:
        return 0  # as /proc's files: readers read to end of file (direct I/O)

    async def read(self, offset: int, size: int) -> bytes:
        if offset == 0 or not self._text:
            self._text = (json.dumps(self._render(), indent=2) + "\n").encode()
            self._ends.append(len(self._text))
        elif offset in self._ends:
            # A reader that got a whole text (cat, read() to the end: each gets it in
            # one request) asks next at its end: that is its end of file, even if
            # another reader has made a longer text since, whose tail would follow
            # its own and make it invalid JSON.
            return b""
        return self._text[offset : offset + size]


class FlushView(View):
    """``.zarrfs/flush``: a write stores everything not yet in the store."""

    writable = True
    volatile = True  # size 0; nothing for the kernel to cache

    def __init__(self, writeback: WriteBack | None) -> None:
        self._writeback = writeback

    @property
    def size(self) -> int:
        return 0

    async def read(self, offset: int, size: int) -> bytes:
        return b""

    async def write(self, offset: int, data: bytes) -> int:
        if self._writeback is None:
            raise ReadOnlyError("flush: the mount is read-only")
        await flush_everything(self._writeback)
        return len(data)

    def truncate(self, size: int) -> None:
        """``echo 1 > flush`` opens it with O_TRUNC: there is nothing to empty."""


async def flush_everything(writeback: WriteBack) -> None:
    """Every array's dirty chunks and changed metadata into the store; the first
    store error is raised (after every array was tried). A partial row held in
    memory cannot be stored: as for fsync, EINVAL says it is still pending."""
    await writeback.flush_all()
    pending = [state for state in writeback.states() if state.tail]
    if pending:
        names = ", ".join(state.meta.display_name for state in pending[:3])
        more = f" and {len(pending) - 3} more" if len(pending) > 3 else ""
        held = sum(len(state.tail) for state in pending)
        raise InvalidArgumentError(
            f"flush: {held} bytes of incomplete rows are pending in {names}{more}"
        )


class RefreshView(View):
    """``.zarrfs/refresh``: a write of anything refreshes, and so does a read from its
    start (which gives nothing): the kernel refuses every write to a read-only mount
    before the daemon sees it, so ``cat .zarrfs/refresh`` is how one refreshes there."""

    volatile = True
    writable = True

    def __init__(self, refresh: Callable[[], Awaitable[None]]) -> None:
        self._refresh = refresh

    @property
    def size(self) -> int:
        return 0

    async def read(self, offset: int, size: int) -> bytes:
        if offset == 0:
            await self._refresh()
        return b""

    async def write(self, offset: int, data: bytes) -> int:
        await self._refresh()
        return len(data)

    def truncate(self, size: int) -> None:
        pass  # `echo 1 > refresh` truncates first


def control_views(
    cache: ChunkCache,
    counters: Counters,
    writeback: WriteBack | None,
    store: Store,
    refresh: Callable[[], Awaitable[None]],
) -> dict[str, View]:
    """The files of ``.zarrfs/`` by name."""
    return {
        FLUSH_NAME: FlushView(writeback),
        REFRESH_NAME: RefreshView(refresh),
        STATS_NAME: StatsView(lambda: snapshot(cache, counters, writeback, store)),
    }
