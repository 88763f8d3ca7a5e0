"""Loads in flight: one per chunk (or shard index) at a time, and failures remembered.

``Loads`` queues each load on the worker pools (core/read/loading.py and
core/read/shardread.py say what a worker does), and whoever asks for the same key
meanwhile waits for that load (single-flight). A load belongs to no task: it runs to
its end even if nobody waits any more. When it ends, on the trio thread, its value
goes to ``keep`` (the cache), unless a write superseded the key meanwhile; a chunk
found bad is remembered for ``FAILURE_TTL``, without its exception. Every attribute
here is touched only from the trio thread (docs/concurrency.md).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType

import numpy as np
import outcome
import trio

from zarrfs.core.counters import Counters
from zarrfs.core.pool import BACKGROUND, LoadPools
from zarrfs.core.read.buffers import SpareBuffers
from zarrfs.core.read.loading import Failure, Fetched, decode_fetched, drop_tracebacks, fetch_chunk
from zarrfs.core.read.lru import CacheKey, ChunkKey, Entry, ShardIndexKey
from zarrfs.core.read.shardread import Where, fetch_run, load_index, run_member
from zarrfs.errors import ChunkError, ZarrfsError
from zarrfs.formats.codecs.pipeline import size_bound
from zarrfs.formats.grid.layout import Index
from zarrfs.formats.grid.runs import Member, Run
from zarrfs.formats.grid.shards import ShardIndex
from zarrfs.formats.model import ArrayMeta
from zarrfs.stores.base import NotAtHand, Store

log = logging.getLogger(__name__)

# A chunk that failed to decode, or whose stored value may not be read, is not
# retried (nor logged again) for this long; after that a read tries again, in case
# the store was repaired.
FAILURE_TTL = 30.0

# What a finished load hands to the cache: (key, value, the buffer of ours it lives
# in, loaded ahead of a reader).
Keep = Callable[[CacheKey, Entry, np.ndarray | None, bool], None]
# What a chunk's load does with the chunk once decoded, in its worker thread (a
# stripe's assembly copies it into place there: core/read/stripes.py).
Sink = Callable[[np.ndarray | None], None]


@dataclass
class Flight:
    done: trio.Event = field(default_factory=trio.Event)
    value: Entry = None
    failure: Failure | None = None  # the chunk is bad
    error: Exception | None = None  # anything else (a store fault): not remembered
    traceback: TracebackType | None = None  # the error's, as the worker raised it
    background: bool = False  # loaded ahead of a reader
    passed: bool = False  # the stream went past it while it loaded: do not keep it
    stale: bool = False  # its shard was replaced meanwhile: whoever waits asks again


class Loads:
    def __init__(
        self,
        store: Store,
        pools: LoadPools,
        buffers: SpareBuffers,
        counters: Counters,
        keep: Keep,
    ) -> None:
        self.store = store
        self.pools = pools
        self.buffers = buffers
        self.counters = counters
        self._keep = keep
        self._flights: dict[CacheKey, Flight] = {}
        self._failures: dict[CacheKey, tuple[float, Failure]] = {}
        self.prefetching = 0  # loads started ahead of readers, not ended yet
        self._announced: set[str] = set()  # arrays the store was told are read

    @property
    def idle(self) -> bool:
        """No load is under way."""
        return not self._flights and not self.prefetching

    def flight(self, key: CacheKey) -> Flight | None:
        return self._flights.get(key)

    def known(self, key: CacheKey) -> bool:
        """Being loaded, or known to fail."""
        return key in self._flights or key in self._failures

    def failing(self, key: CacheKey) -> bool:
        """A failure of ``key`` is remembered (reads of it may fail at once)."""
        return key in self._failures

    def check_failure(self, key: CacheKey) -> None:
        """Raise the failure remembered for ``key``, unless it has expired."""
        failure = self._failures.get(key)
        if failure is not None:
            if time.monotonic() < failure[0]:
                raise failure[1].error()
            del self._failures[key]

    @staticmethod
    async def wait(flight: Flight) -> Entry:
        """The flight's value (None also when it went stale: ask again)."""
        await flight.done.wait()
        if flight.stale:
            return None
        if flight.failure is not None:
            raise flight.failure.error()
        if flight.error is not None:
            # from the worker's traceback each time, not one that grows per waiter
            raise flight.error.with_traceback(flight.traceback)
        return flight.value

    # -- forgetting (writes, resizes, shard replacements) ----------------------------------

    def forget(self, key: CacheKey) -> None:
        """A write supersedes ``key``: no failure remembered, and a load under way
        brings the old value to whoever waits, not to the cache."""
        self._failures.pop(key, None)
        self._flights.pop(key, None)

    def forget_failure(self, key: CacheKey) -> None:
        self._failures.pop(key, None)

    def supersede(self, match: Callable[[CacheKey], bool]) -> None:
        """Loads under way of the keys ``match`` accepts are stale: whoever waits
        asks again, and their values are not kept."""
        for key, flight in list(self._flights.items()):
            if match(key):
                flight.stale = True
                del self._flights[key]

    def forget_array(self, path: str) -> None:
        """Every load under way and failure remembered of the array at ``path``."""
        for keys in (self._failures, self._flights):
            for key in [k for k in keys if k.path == path]:
                del keys[key]

    def pass_by(self, key: CacheKey) -> None:
        """A stream went past ``key``: if it is being loaded ahead, whoever waits
        for it still gets it, the cache does not."""
        flight = self._flights.get(key)
        if flight is not None and flight.background:
            flight.passed = True

    # -- starting loads (trio thread) -------------------------------------------------------

    def _announce(self, meta: ArrayMeta) -> None:
        """Tell the store, once per array, that its keys are about to be read (a disk
        cache then revalidates what it holds of them with one listing)."""
        prefix = meta.display_name  # an array's twin has the array's keys
        if prefix not in self._announced:
            self._announced.add(prefix)
            self.store.reading_under(prefix)

    def _at_hand_first(
        self,
        attempt: Callable[[], object],
        fetch: Callable[[], object],
        priority: int,
        on_done: Callable[[outcome.Outcome], None],
        fetched: Callable[[outcome.Outcome], None],
    ) -> None:
        """A load over a store with local copies (a disk cache): ``attempt`` runs in a
        decoder within ``Store.at_hand()``, as a local store's load would (no hand-off
        between threads), ``on_done`` taking its outcome; what it cannot read there
        (NotAtHand) goes on as ``fetch`` in a fetch thread, ``fetched`` taking that."""
        fetchers = self.pools.fetchers
        assert fetchers is not None
        token = trio.lowlevel.current_trio_token()

        def job() -> object:  # in a decoder
            try:
                with self.store.at_hand():
                    return attempt()
            except NotAtHand:
                fetchers.submit_from_thread(token, fetch, priority=priority, on_done=fetched)
                return HANDED_ON

        self.pools.decoders.submit(job, priority=priority, on_done=_unless_handed_on(on_done))

    def start_index(self, meta: ArrayMeta, shard: Index, priority: int) -> Flight:
        self._announce(meta)
        key = ShardIndexKey(meta.path, shard)
        flight = Flight(background=priority == BACKGROUND)
        self._flights[key] = flight
        finish = self._finisher(key, flight, counted=False)
        fetchers = self.pools.fetchers
        if fetchers is not None and self.store.local_tier:
            load = functools.partial(self.load_index, meta, shard)
            self._at_hand_first(load, load, priority, finish, finish)
        else:
            pool = fetchers or self.pools.decoders
            pool.submit(self.load_index, meta, shard, priority=priority, on_done=finish)
        return flight

    def start_chunk(
        self,
        meta: ArrayMeta,
        index: Index,
        priority: int,
        where: Where | None = None,
        *,
        prefetched: bool = False,
        sink: Sink | None = None,
    ) -> Flight:
        """Queue one load; it runs to its end even if nobody waits for it any more.
        ``prefetched``: started ahead of a reader (it counts in ``prefetching``);
        ``sink``: called with the decoded chunk in the worker, before the flight ends."""
        self._announce(meta)
        # Nothing between registering the flight and queueing its job may raise:
        # waiters would wait for a load that never comes.
        flight, spare, finish = self._chunk_flight(meta, index, priority, prefetched)
        decoders, fetchers = self.pools.decoders, self.pools.fetchers
        if fetchers is None:
            decoders.submit(
                self.load, meta, index, spare, where, sink, priority=priority, on_done=finish
            )
            return flight

        token = trio.lowlevel.current_trio_token()

        def fetch() -> None:  # in a fetch thread
            try:
                data = self.fetch(meta, index, where)
            except BaseException as e:  # the flight must end, whatever went wrong
                # Handed over as an outcome, as a pool hands any job's exception.
                failed = outcome.Error(e)
                del e
                with contextlib.suppress(trio.RunFinishedError):
                    token.run_sync_soon(finish, failed)
                return
            # Straight to the decoders, from this thread: the trio loop sees the
            # chunk once, decoded.
            decoders.submit_from_thread(
                token,
                self.decode,
                meta,
                index,
                data,
                spare,
                sink,
                priority=priority,
                on_done=finish,
            )

        # A remote store's requests wait on the network: many at once, in a pool of
        # their own, and the decode workers take each as it arrives.
        if self.store.local_tier:
            attempt = functools.partial(self.load, meta, index, spare, where, sink)
            self._at_hand_first(attempt, fetch, priority, finish, _ignore)
        else:
            fetchers.submit(fetch, priority=priority, on_done=_ignore)
        return flight

    def start_run(self, meta: ArrayMeta, run: Run, priority: int) -> None:
        """Queue the load of a run of inner chunks: one request for its bytes, then
        each chunk decoded on its own (a flight per chunk, as ``start_chunk``'s).
        Remote stores only: the request runs in a fetch thread."""
        fetchers, decoders = self.pools.fetchers, self.pools.decoders
        assert fetchers is not None
        loads = []
        for member in run.members:
            _, spare, finish = self._chunk_flight(meta, member.index, priority, False)
            loads.append((member, spare, finish))
        token = trio.lowlevel.current_trio_token()
        limit = size_bound(meta.chunk_nbytes)

        def fetch() -> None:  # in a fetch thread (or a decoder, for a local copy)
            try:
                data = fetch_run(self.store, meta, run)
            except NotAtHand:
                raise  # not read here: the fetch thread will
            except BaseException as e:  # every flight must end, whatever went wrong
                for _, _, finish in loads:
                    # One exception each: waiters of different chunks raise them.
                    failed = outcome.Error(copy.copy(e))
                    with contextlib.suppress(trio.RunFinishedError):
                        token.run_sync_soon(finish, failed)
                del e
                loads.clear()
                return
            for member, spare, finish in loads:
                decoders.submit_from_thread(
                    token,
                    self.decode_member,
                    meta,
                    run,
                    data,
                    member,
                    limit,
                    spare,
                    priority=priority,
                    on_done=finish,
                )
            loads.clear()  # this thread keeps no buffer (nor the run's bytes)

        if self.store.local_tier:
            self._at_hand_first(fetch, fetch, priority, _ignore, _ignore)
        else:
            fetchers.submit(fetch, priority=priority, on_done=_ignore)

    def _chunk_flight(
        self, meta: ArrayMeta, index: Index, priority: int, prefetched: bool
    ) -> tuple[Flight, list[np.ndarray], Callable[[outcome.Outcome], None]]:
        """A chunk's flight, registered and counted: (flight, the spare buffer to
        decode into, its finisher). ``prefetched``: started ahead of a reader (it
        counts in ``prefetching``)."""
        key = ChunkKey((meta.path, index))
        out = self.buffers.take(meta.chunk_nbytes) if meta.codecs.decodes_into else None
        flight = Flight(background=priority == BACKGROUND)
        self._flights[key] = flight
        self.counters.chunks_loaded += 1
        if prefetched:
            self.prefetching += 1
            self.counters.read_ahead_loads += 1
        # The buffer goes in a list that the load empties: a worker thread holds its
        # last job's arguments until it takes the next, and must not hold the buffer.
        spare = [out] if out is not None else []
        return flight, spare, self._finisher(key, flight, counted=prefetched)

    def _finisher(
        self, key: CacheKey, flight: Flight, *, counted: bool
    ) -> Callable[[outcome.Outcome], None]:
        """``counted``: a load started ahead of a reader (counts until it ends)."""

        def finish(result: outcome.Outcome) -> None:  # in the trio thread
            if counted:
                self.prefetching -= 1
            if self._flights.get(key) is flight:
                del self._flights[key]
                current = True
            else:
                current = False  # a write superseded the chunk while it loaded
            # The error is taken from the outcome, not re-raised here: a raise would
            # add this frame, which holds the outcome, to its traceback.
            error = result.error if isinstance(result, outcome.Error) else None
            if isinstance(error, ZarrfsError):
                drop_tracebacks(error)  # its message says it all
            if isinstance(error, ChunkError) and not flight.stale:
                self.counters.decode_failures += 1
                log.error("%s", str(error))  # a record keeps its args: not the exception
                flight.failure = Failure(error.array, error.key, error.reason)
                if current:
                    self._failures[key] = (time.monotonic() + FAILURE_TTL, flight.failure)
            elif isinstance(error, Exception):
                if not isinstance(error, ChunkError):  # (stale: the shard was replaced)
                    self.counters.store_failed(error)
                flight.error, flight.traceback = error, error.__traceback__
            else:
                flight.value, buffer = result.unwrap()
                if isinstance(flight.value, np.ndarray):  # a chunk (not an index), stored
                    self.counters.chunks_decoded += 1
                if current and not flight.passed:
                    self._keep(key, flight.value, buffer, flight.background)
            flight.done.set()

        return finish

    # -- in worker threads -------------------------------------------------------------------

    def load_index(self, meta: ArrayMeta, shard: Index) -> tuple[ShardIndex | None, None]:
        """The index of one shard (None when it is not stored)."""
        return load_index(self.store, meta, shard), None

    def load(
        self,
        meta: ArrayMeta,
        index: Index,
        spare: list[np.ndarray] | None = None,
        where: Where | None = None,
        sink: Sink | None = None,
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Fetch and decode one chunk, into the buffer in ``spare`` if there is one;
        (chunk, the buffer it lives in when that is one of ours)."""
        return self.decode(meta, index, self.fetch(meta, index, where), spare, sink)

    def fetch(self, meta: ArrayMeta, index: Index, where: Where | None) -> Fetched:
        """(key, stored bytes) of a chunk, None when not stored."""
        return fetch_chunk(self.store, meta, index, where)

    def decode_member(
        self,
        meta: ArrayMeta,
        run: Run,
        data: bytes | None,
        member: Member,
        limit: int,
        spare: list[np.ndarray] | None,
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """One inner chunk of a fetched run, decoded (into the buffer in ``spare``)."""
        found = run_member(meta, run, data, member, limit)
        fetched = None if found is None else (run.key, found)
        return self.decode(meta, member.index, fetched, spare)

    def decode(
        self,
        meta: ArrayMeta,
        index: Index,
        fetched: Fetched,
        spare: list[np.ndarray] | None,
        sink: Sink | None = None,
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The fetched chunk decoded (into the buffer in ``spare``), and given to
        ``sink`` while it is warm in this core's cache."""
        decoded = decode_fetched(meta, index, fetched, spare)
        if sink is not None:
            sink(decoded[0])
        return decoded


HANDED_ON = object()  # a load's first step found no local copy: a fetch thread goes on


def _unless_handed_on(
    finish: Callable[[outcome.Outcome], None],
) -> Callable[[outcome.Outcome], None]:
    """``finish``, but not for a job that handed the load on to a fetch thread (whose
    decode finishes it)."""

    def done(result: outcome.Outcome) -> None:
        if not (isinstance(result, outcome.Value) and result.value is HANDED_ON):
            finish(result)

    return done


def _ignore(result: outcome.Outcome) -> None:
    """The end of a job that hands its result on by itself."""
