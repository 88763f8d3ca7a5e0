"""Stripes: runs of array.raw assembled from decoded chunks by worker threads.

When chunks are not runs of array.raw (tiles, F order, shards of tiles), every
read needs bytes from a whole row of chunks. Rather than have the FUSE thread
gather each reply from its chunks, a worker assembles the run of array.raw that
one row of chunks covers (a *stripe*, formats/grid/stripes.py) once, and reads are
slices of it: no copy on the FUSE thread, and the copying runs beside the
decoders.

Stripes live in the decoded-chunk LRU (under a ``StripeKey``, so one budget holds
chunks, shard indexes and stripes) and are read-only. ``Stripes`` belongs to the
chunk cache, which tells it of every change to a chunk and of every stripe the LRU
lets go; it gathers chunks through the cache (``Chunks``). Every rule here runs in
the trio thread (docs/concurrency.md):

- One assembly per stripe at a time (single-flight). It runs as a system task,
  so that read-ahead can start one without a nursery, and a reader waits for it.
- The loads a stripe starts copy their chunks into it in the worker, as each is
  decoded (``_Placing``): the stripe is whole when its last chunk is, with no
  pass over 16 MiB after it. Only chunks it did not load are copied afterwards.
- A stripe is assembled only from clean chunks (none dirty, frozen for a flush
  or stale after a shrink; the caller checks): a chunk that changes afterwards
  goes through ``ChunkCache.forget`` or ``invalidate``, which drop every cached
  stripe holding it and mark every assembly under way that needs it, whose
  result is then given to whoever waits but not kept.
- Errors (a corrupt chunk) reach the readers waiting; nothing is remembered
  here: the chunk cache remembers its failures.
"""

from __future__ import annotations

import copy
import functools
import logging
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import trio

from zarrfs.core.counters import Counters
from zarrfs.core.pool import BACKGROUND, URGENT, WorkerPool
from zarrfs.core.read.buffers import SpareBuffers
from zarrfs.core.read.flights import Sink
from zarrfs.core.read.loading import drop_tracebacks
from zarrfs.core.read.lru import DecodedLru, StripeKey
from zarrfs.core.read.reading import assemble
from zarrfs.errors import ZarrfsError
from zarrfs.formats.grid.layout import Index, RangePlan, plan_range
from zarrfs.formats.grid.stripes import Stripe, StripeLayout
from zarrfs.formats.model import ArrayMeta

log = logging.getLogger(__name__)


class Chunks(Protocol):
    """What stripes need of the chunk cache."""

    def ready(self, path: str, index: Index) -> tuple[bool, np.ndarray | None]: ...

    async def get(
        self, meta: ArrayMeta, index: Index, *, priority: int = URGENT, sink: Sink | None = None
    ) -> np.ndarray | None: ...

    def release(self, meta: ArrayMeta, index: Index) -> None: ...

    async def start_runs(self, meta: ArrayMeta, indices: list[Index], priority: int) -> None: ...


def stripe_key(path: str, stripe: Stripe) -> StripeKey:
    return StripeKey(path, stripe.start, stripe.stop)


@dataclass
class _Assembly:
    stripe: Stripe
    layout: StripeLayout
    done: trio.Event = field(default_factory=trio.Event)
    value: np.ndarray | None = None
    error: Exception | None = None
    superseded: bool = False  # a chunk of it changed meanwhile: not kept
    background: bool = False


class Stripes:
    def __init__(
        self,
        chunks: Chunks,
        lru: DecodedLru,
        buffers: SpareBuffers,
        pool: WorkerPool,
        counters: Counters,
    ) -> None:
        self.chunks = chunks
        self.lru = lru
        self.buffers = buffers
        self.pool = pool  # the decoders: copying runs beside decoding
        self.counters = counters
        self._assemblies: dict[StripeKey, _Assembly] = {}
        # Per array: the stripes cached or under way, by extent (to drop by chunk).
        self._known: dict[str, dict[tuple[int, int], tuple[Stripe, StripeLayout]]] = {}

    @property
    def idle(self) -> bool:
        """No assembly is under way."""
        return not self._assemblies

    def known(self, path: str) -> list[Stripe]:
        """The stripes of ``path`` cached or being assembled."""
        return [stripe for stripe, _ in self._known.get(path, {}).values()]

    def cached(self, path: str, stripe: Stripe) -> np.ndarray | None:
        _, found = self.lru.use(stripe_key(path, stripe))
        return found if isinstance(found, np.ndarray) else None

    def pending(self, path: str, stripe: Stripe) -> bool:
        """Cached or being assembled."""
        key = stripe_key(path, stripe)
        return key in self._assemblies or self.lru.peek(key)[1] is not None

    def under_way(self, path: str) -> int:
        """Assemblies started ahead of readers for this array and not done yet."""
        return sum(1 for k, a in self._assemblies.items() if k.path == path and a.background)

    async def get(self, meta: ArrayMeta, layout: StripeLayout, stripe: Stripe) -> np.ndarray:
        """The stripe's bytes (read-only uint8), assembled if need be."""
        found = self.cached(meta.path, stripe)
        if found is not None:
            return found
        assembly = self._assemblies.get(stripe_key(meta.path, stripe))
        if assembly is None:
            assembly = self.start(meta, layout, stripe, URGENT)
        await assembly.done.wait()
        if assembly.error is not None:
            # A new exception for each reader: raising the stored one would add this
            # frame, which holds the assembly, to its traceback (a cycle).
            raise copy.copy(assembly.error)
        assert assembly.value is not None
        return assembly.value

    def start(
        self, meta: ArrayMeta, layout: StripeLayout, stripe: Stripe, priority: int
    ) -> _Assembly:
        key = stripe_key(meta.path, stripe)
        assembly = _Assembly(stripe, layout, background=priority == BACKGROUND)
        self._assemblies[key] = assembly
        self._known.setdefault(meta.path, {})[_extent(stripe)] = (stripe, layout)
        trio.lowlevel.spawn_system_task(
            self._assemble, meta, layout, stripe, assembly, priority, name="zarrfs-stripe"
        )
        return assembly

    async def _assemble(
        self,
        meta: ArrayMeta,
        layout: StripeLayout,
        stripe: Stripe,
        assembly: _Assembly,
        priority: int,
    ) -> None:
        key = stripe_key(meta.path, stripe)
        try:
            plan = plan_range(meta.shape, meta.chunks, meta.itemsize, stripe.start, stripe.nbytes)
            indices = list(plan.chunks)
            # A buffer of the cache's: given back for the next stripe once unreferenced.
            out = self.buffers.take(stripe.nbytes)
            if out is None:
                out = np.empty(stripe.nbytes, dtype=np.uint8)
            else:
                self.counters.stripe_buffers_reused += 1
            # Chunks loaded for this stripe are copied into place by their loads, as
            # each is decoded (warm in the decoder's cache, and the stripe is whole
            # when its last chunk is); the others (cached, loading for someone else)
            # are copied below.
            placed: dict[Index, np.ndarray | None] = {}
            chunks = await self._chunks(meta, indices, priority, _Placing(meta, plan, out, placed))
            rest = [i for i in indices if i not in placed or placed[i] is not chunks[i]]
            self.counters.stripe_chunks_placed += len(indices) - len(rest)
            if rest:
                # Ahead of any chunk load: whoever waits for this stripe waits for
                # nothing else now, and loads for later stripes queued meanwhile
                # would delay it.
                view = await self.pool.run(assemble, meta, plan, chunks, out, rest, priority=URGENT)
            else:
                view = assemble(meta, plan, chunks, out, ())  # nothing to copy: the view
            del placed
            # The chunks are released below: their buffers are recycled only once
            # nothing but the cache refers to them.
            del chunks
            value = np.frombuffer(view, dtype=np.uint8)
            value.flags.writeable = False
            assembly.value = value
            self.counters.stripes_assembled += 1
            if not assembly.superseded and self._assemblies.get(key) is assembly:
                # (dropping an older entry takes the stripe off the books: back on below)
                self.lru.drop(key)
                self.lru.insert(key, value)
                if key in self.lru:
                    self.buffers.back(key, out)
                self._known.setdefault(meta.path, {})[_extent(stripe)] = (stripe, layout)
                if layout.rows < meta.chunks[layout.depth] and not _last_of_row(layout, stripe):
                    return  # the next stripe needs the same chunks
                for index in indices:
                    self.chunks.release(meta, index)
        except Exception as e:  # a system task must not raise: readers get it
            if not isinstance(e, ZarrfsError):
                log.exception("%s: assembling bytes %d-%d", meta.display_name, *_span(stripe))
            # Its traceback holds this frame, and so the assembly, the chunks and the
            # buffer: a cycle only the garbage collector would free. The message says
            # what went wrong (and the chunk cache logged the chunk that failed).
            drop_tracebacks(e)
            assembly.error = e
        finally:
            if self._assemblies.get(key) is assembly:
                del self._assemblies[key]
                if assembly.value is None or assembly.superseded:
                    self._forget_known(meta.path, _extent(stripe))
            assembly.done.set()

    async def _chunks(
        self, meta: ArrayMeta, indices: list[Index], priority: int, placing: _Placing
    ) -> dict[Index, np.ndarray | None]:
        found: dict[Index, np.ndarray | None] = {}
        missing = []
        for index in indices:
            ready, chunk = self.chunks.ready(meta.path, index)
            if ready:
                found[index] = chunk
            else:
                missing.append(index)
        if not missing:
            return found
        await self.chunks.start_runs(meta, missing, priority)
        errors: list[Exception] = []

        async def load(index: Index) -> None:
            try:
                found[index] = await self.chunks.get(
                    meta, index, priority=priority, sink=functools.partial(placing, index)
                )
            except Exception as e:  # the first is raised below
                errors.append(e)

        async with trio.open_nursery() as nursery:
            for index in missing:
                nursery.start_soon(load, index)
        if errors:
            raise errors[0]
        return found

    def release_before(self, path: str, offset: int) -> None:
        """A stream has passed ``offset``: the stripes ending before it go (use-once:
        the page cache holds their bytes now)."""
        for stripe, _ in list(self._known.get(path, {}).values()):
            key = stripe_key(path, stripe)
            if stripe.stop <= offset and key not in self._assemblies:
                self.lru.drop(key)

    # -- invalidation (from ChunkCache) -----------------------------------------------------

    def chunk_changed(self, path: str, index: Index) -> None:
        """Chunk ``index`` of ``path`` changes: no stripe holding it is kept."""
        known = self._known.get(path)
        if not known:
            return
        for stripe, layout in list(known.values()):
            if len(index) == len(layout.shape) and layout.holds(stripe, index):
                self._drop(path, stripe)

    def drop_array(self, path: str) -> None:
        """Every stripe of ``path`` goes (a resize, a rewrite of its chunks)."""
        for stripe, _ in list(self._known.get(path, {}).values()):
            self._drop(path, stripe)
        self._known.pop(path, None)

    def evicted(self, key: StripeKey) -> None:
        """The cache let a stripe go."""
        self._forget_known(key.path, (key.start, key.stop))

    def _drop(self, path: str, stripe: Stripe) -> None:
        key = stripe_key(path, stripe)
        assembly = self._assemblies.pop(key, None)
        if assembly is not None:
            assembly.superseded = True
        self.lru.drop(key)
        self._forget_known(path, _extent(stripe))

    def _forget_known(self, path: str, extent: tuple[int, int]) -> None:
        known = self._known.get(path)
        if known is not None:
            known.pop(extent, None)
            if not known:
                del self._known[path]


@dataclass(frozen=True)
class _Placing:
    """Copies a chunk into its stripe in the worker that decoded it, and notes the
    chunk placed (the assembly then copies only the others: a chunk reloaded
    meanwhile, from a replaced shard, is not the one placed)."""

    meta: ArrayMeta
    plan: RangePlan
    out: np.ndarray
    placed: dict[Index, np.ndarray | None]

    def __call__(self, index: Index, chunk: np.ndarray | None) -> None:
        assemble(self.meta, self.plan, {index: chunk}, self.out, (index,))
        self.placed[index] = chunk  # (one key per worker: no lock needed)


def _extent(stripe: Stripe) -> tuple[int, int]:
    return stripe.start, stripe.stop


def _span(stripe: Stripe) -> tuple[int, int]:
    return stripe.start, stripe.stop - 1


def _last_of_row(layout: StripeLayout, stripe: Stripe) -> bool:
    """The stripe ends its chunk row along the depth axis (or the array)."""
    row_end = stripe.stop // layout.row_nbytes  # rows (over the axes up to depth) so far
    size = layout.shape[layout.depth]
    chunk = layout.chunks[layout.depth]
    within = row_end % size
    return within == 0 or within % chunk == 0
