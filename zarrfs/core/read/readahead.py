"""Read-ahead for one array: a reader streaming through array.raw gets what lies
ahead of it loaded in the background, and what it has passed given back."""

from __future__ import annotations

from typing import TYPE_CHECKING

from zarrfs.core.pool import BACKGROUND
from zarrfs.formats.grid.layout import Index, contiguous_runs, plan_range
from zarrfs.formats.grid.stripes import StripeLayout

if TYPE_CHECKING:
    from zarrfs.core.livemeta import LiveMeta
    from zarrfs.core.read.chunks import ChunkCache
    from zarrfs.core.read.livechunks import LiveChunks
    from zarrfs.core.read.reading import ArrayReader

# Sequential readers get the chunks ahead of them loaded in the background.
READ_AHEAD = 8 * 2**20
REMOTE_READ_AHEAD = 32 * 2**20
READ_AHEAD_CHUNKS = 4
# Stripes assembled ahead of a stream, at most (each one is many chunks: enough
# decoding to keep every core busy), within a quarter of the cache. Over a network
# each stripe waits a round trip or two (a shard's index, then its chunks) before
# it decodes: more of them overlap those waits, within half the cache (the stripes
# behind the stream make room as it passes them: docs/benchmarks.md, network).
STRIPES_AHEAD = 2
REMOTE_STRIPES_AHEAD = 8
# Over a network, the shard indexes of this many stripes beyond those under way are
# read ahead too (a few hundred bytes each): a stripe then starts with its chunks'
# requests, not with its index's round trip.
REMOTE_INDEXES_AHEAD = 8


class ReadAhead:
    def __init__(
        self, live: LiveMeta, chunks: LiveChunks, reader: ArrayReader, cache: ChunkCache
    ) -> None:
        self._live = live
        self._chunks = chunks
        self._reader = reader  # its stripe layout
        self._cache = cache
        self._prefetched_to = 0  # every chunk up to this byte has been asked for
        self._released_to = 0  # chunks before this one were offered back (use-once)
        self._indexed_to = 0  # stripes' shard indexes asked for up to this byte
        # The stripe a stream was in when everything ahead of it had been started:
        # its next reads there have nothing to add (a read's own cost, paid by
        # every request of a stream, so kept to a comparison).
        self._settled: tuple[StripeLayout, int, int] | None = None

    def prefetch(self, offset: int) -> None:
        """A reader is streaming from ``offset``: load the chunks ahead of it.

        The window is a few chunks (at least READ_AHEAD bytes, at most a quarter of
        the cache, so read-ahead cannot evict what it loaded before it is read).
        """
        live, cache = self._live, self._cache
        meta = live.meta
        layout = self._reader.stripe_layout()
        if layout is not None:
            if offset < meta.nbytes:
                self._prefetch_stripes(layout, offset)
            return
        end = min(offset + self._read_ahead_bytes(), meta.nbytes)
        ahead = self._prefetched_to
        start = ahead if offset <= ahead <= end else offset  # else: the reader jumped
        run = live.run
        if run is not None:
            # Chunks the stream has passed (one kept for late requests) go first,
            # also once the window has reached the end of the array.
            passed = offset // run - 1
            if passed < self._released_to - 1:  # the reader jumped back: a new stream
                self._released_to = max(passed, 0)
            for number in range(self._released_to, passed):
                cache.release(meta, (number, *live.trailing))
            self._released_to = max(self._released_to, passed)
        if start >= end:
            return
        if run is not None:
            for number, begin, _ in contiguous_runs(run, start, end - start):
                if not self._prefetch_chunk((number, *live.trailing)):
                    self._prefetched_to = number * run + begin
                    return
        else:
            plan = plan_range(meta.shape, meta.chunks, meta.itemsize, start, end - start)
            if not all([self._prefetch_chunk(index) for index in plan.chunks]):
                return  # try the whole window again on the next read
        self._prefetched_to = end

    def _prefetch_stripes(self, layout: StripeLayout, offset: int) -> None:
        """A stream at ``offset``: the stripes from there on are assembled ahead of
        it, and those it has passed make room (the page cache holds their bytes)."""
        settled = self._settled
        if settled is not None and settled[0] is layout and settled[1] <= offset < settled[2]:
            return
        meta, cache = self._live.meta, self._cache
        stripes = cache.stripes
        behind = offset - layout.max_stripe_nbytes
        if behind > 0:
            stripes.release_before(meta.path, behind)
        if not cache.read_ahead:
            return
        per_stripe = layout.chunk_row_nbytes + layout.max_stripe_nbytes
        remote = cache.network_bound()
        wanted, share = (REMOTE_STRIPES_AHEAD, 2) if remote else (STRIPES_AHEAD, 4)
        ahead = max(1, min(wanted, cache.max_bytes // share // per_stripe))
        position = offset
        current = self._reader.stripe_at(layout, offset)
        complete = True  # every stripe wanted is cached or under way
        for _ in range(ahead + 1):
            if position >= meta.nbytes:
                break
            if stripes.under_way(meta.path) > ahead:
                complete = False
                break
            stripe = layout.stripe_at(position)
            if not stripes.pending(meta.path, stripe):
                if self._reader.clean(layout, stripe):
                    stripes.start(meta, layout, stripe, BACKGROUND)
                else:
                    complete = False  # written to: asked again at the next read
            position = stripe.stop
        self._settled = (layout, current.start, current.stop) if complete else None
        if remote and meta.shards is not None:
            if not offset <= self._indexed_to:
                self._indexed_to = position  # a new stream (or one that jumped back)
            limit = min(position + REMOTE_INDEXES_AHEAD * layout.max_stripe_nbytes, meta.nbytes)
            position = max(position, self._indexed_to)
            while position < limit:
                stripe = layout.stripe_at(position)
                cache.prefetch_indexes(meta, layout.chunk_indices(stripe))
                position = stripe.stop
            self._indexed_to = max(self._indexed_to, position)

    def _read_ahead_bytes(self) -> int:
        # Over a network each request waits its latency: more of them in flight.
        cache = self._cache
        ahead = REMOTE_READ_AHEAD if cache.network_bound() else READ_AHEAD
        wanted = max(ahead, READ_AHEAD_CHUNKS * self._live.meta.chunk_nbytes)
        return min(wanted, cache.max_bytes // 4)

    def _prefetch_chunk(self, index: Index) -> bool:
        if not self._chunks.stored(index):
            return True
        return self._cache.prefetch(self._live.meta, index)
