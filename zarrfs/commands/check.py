"""``zarrfs check STORE``: read and decode every stored chunk of every array.

The hierarchy is listed as the mount lists it (zarrfs/commands/walk.py). A store that can list
is listed under each array, and only the chunks (or shards) found are read; one that
cannot (HTTP) is asked for every position of the chunk grid, a missing key being a
missing chunk. Each chunk is fetched and decoded by the mount's own functions
(core/read/loading.py, core/read/shardread.py), so a chunk that passes here reads through a
mount, and one that fails here is the one a mount answers with EIO, for the same
reason. A shard's index is read and checked first, then each inner chunk it holds.

Missing chunks are no error: they read as the fill value. Exit status: 0 when every
stored chunk decodes and all metadata reads; 1 when a chunk is corrupt or cannot be
read, or some metadata cannot be read (each one printed with its store key and the
reason), or when there is nothing to check (no array found: one line); 2 for a usage
error. The store is opened read-only (stores/readonly.py). Every line is printed
through output.printable: keys and reasons come from the store.
"""

from __future__ import annotations

import functools
import itertools
import os
import sys
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace

import click

from zarrfs.commands.output import echo, open_and_walk, printable
from zarrfs.commands.walk import Hierarchy
from zarrfs.core.read.loading import decode_fetched, fetch_chunk
from zarrfs.core.read.shardread import Where, load_index
from zarrfs.core.sizes import format_size, plural
from zarrfs.errors import ChunkError, ZarrfsError
from zarrfs.formats.grid.layout import Index, grid_shape
from zarrfs.formats.grid.shards import ShardIndex, inner_range
from zarrfs.formats.model import ArrayMeta
from zarrfs.stores.base import Store, join_key

# Jobs queued per worker thread: enough to keep them busy, few enough that a store
# of millions of chunks is never all in memory at once.
QUEUED_PER_WORKER = 4


@dataclass
class ArrayCheck:
    """What was found of one array; counts are chunks (a sharded array's inner chunks)."""

    path: str
    total: int  # chunks in the grid
    present: int = 0  # stored (a shard whose index is unreadable: all its chunks)
    corrupt: int = 0  # stored but unreadable or undecodable
    nbytes: int = 0  # stored bytes of the chunks (of the shards) found
    skipped: str | None = None  # why nothing was decoded

    @property
    def missing(self) -> int:
        return self.total - self.present

    def summary(self) -> str:
        name = f"/{self.path}"
        if self.skipped is not None:
            return f"{name}: not checked: {self.skipped}"
        stored = format_size(self.nbytes, short=True)
        return (
            f"{name}: {plural(self.total, 'chunk')}: {self.present} present, "
            f"{self.missing} missing, {self.corrupt} corrupt; {stored} stored ({self.nbytes} bytes)"
        )


@dataclass(frozen=True)
class Done:
    """What one job found (added up in the main thread only)."""

    array: ArrayCheck
    checked: int = 0  # chunks accounted for (the progress bar's unit)
    present: int = 0
    corrupt: int = 0
    nbytes: int = 0
    problem: tuple[str, str] | None = None  # (store key, reason)
    more: Iterator[Job] | None = None  # follow-up jobs: the inner chunks of a shard


Job = Callable[[], Done]


def _reason(error: Exception) -> str:
    if isinstance(error, ZarrfsError):
        return str(error)
    # a failure nobody foresaw: reported, as the mount answers it with EIO
    return f"{type(error).__name__}: {error}"


def _failed(report: ArrayCheck, key: str, error: Exception, count: int, nbytes: int = 0) -> Done:
    if isinstance(error, ChunkError):
        key, reason = error.key, error.reason
    else:
        reason = _reason(error)
    return Done(report, count, count, count, nbytes, (key, reason))


def check_chunk(store: Store, meta: ArrayMeta, report: ArrayCheck, index: Index) -> Done:
    """Fetch and decode one chunk of an unsharded array."""
    key = meta.chunk_keys(index)[0]
    nbytes = 0
    try:
        fetched = fetch_chunk(store, meta, index, None)
        if fetched is None:
            return Done(report, checked=1)
        key, nbytes = fetched[0], len(fetched[1])
        decode_fetched(meta, index, fetched, None)
    except Exception as e:
        return _failed(report, key, e, 1, nbytes)
    return Done(report, checked=1, present=1, nbytes=nbytes)


def check_inner(
    store: Store, meta: ArrayMeta, report: ArrayCheck, index: Index, where: Where, missed: int
) -> Done:
    """Fetch and decode one inner chunk, by its range in the shard; ``missed``: the
    inner chunks before it that the index says are not stored, counted with it."""
    try:
        fetched = fetch_chunk(store, meta, index, where)
        if fetched is None:  # the shard is gone since its index was read
            return Done(report, checked=1 + missed)
        decode_fetched(meta, index, fetched, None)
    except Exception as e:
        done = _failed(report, where[0], e, 1)
        return replace(done, checked=1 + missed)
    return Done(report, checked=1 + missed, present=1)


def _inner_jobs(
    store: Store, meta: ArrayMeta, report: ArrayCheck, shard: Index, key: str, index: ShardIndex
) -> Iterator[Job]:
    """A job for each stored inner chunk of a shard, made as they are taken: a shard
    may hold millions, which are never all in memory. The ones not stored are
    counted with the next job (the last of them with a job of their own)."""
    assert meta.shards is not None
    geometry = meta.shards.geometry
    grid = geometry.inner_grid
    missed = 0
    for position in range(geometry.n_inner):
        inner = geometry.inner_index(shard, position)
        if any(i >= g for i, g in zip(inner, grid)):
            continue  # beyond the array's edge
        span = inner_range(index, position)
        if span is None:
            missed += 1
            continue
        yield functools.partial(check_inner, store, meta, report, inner, (key, *span), missed)
        missed = 0
    if missed:
        yield functools.partial(Done, report, missed)


def check_shard(
    store: Store, meta: ArrayMeta, report: ArrayCheck, shard: Index, size: int | None
) -> Done:
    """Read and check one shard's index; its stored inner chunks become jobs."""
    assert meta.shards is not None
    key = meta.shards.shard_keys(shard)[0]
    count = meta.shards.geometry.inner_count(shard)
    try:
        index = load_index(store, meta, shard)
        if index is None:
            return Done(report, checked=count)
        if size is None:  # not listed: its size for the summary
            size = store.size(key) or 0
    except Exception as e:
        # Every inner chunk of it fails to read through a mount, for this reason.
        return _failed(report, key, e, count, size or 0)
    return Done(report, nbytes=size, more=_inner_jobs(store, meta, report, shard, key, index))


def _listed_units(
    store: Store, meta: ArrayMeta, add_total: Callable[[int], None]
) -> Iterator[tuple[Index, int]]:
    """The stored units (chunks, or shards) of the grid a listing finds, with their
    sizes, as the listing goes; ``add_total`` learns how many chunks each holds."""
    grid = grid_shape(meta.shape, meta.chunks if meta.shards is None else meta.shards.shard_shape)
    # Layouts that do not record their key separator may hold a chunk under two keys
    # (legacy v2: "0.0" and "0/0"): the mount reads the first, so is the check.
    seen: set[Index] | None = set() if len(meta.unit_keys((0,) * len(grid))) > 1 else None
    for key, size in store.scan(meta.path):
        unit = meta.stored_unit(join_key(meta.path, key))
        # Beyond the grid (left by a shrink) is not part of the array.
        if unit is None or any(i >= g for i, g in zip(unit, grid)):
            continue
        if seen is not None:
            if unit in seen:
                continue
            seen.add(unit)
        add_total(1 if meta.shards is None else meta.shards.geometry.inner_count(unit))
        yield unit, size


def array_jobs(
    store: Store, meta: ArrayMeta, report: ArrayCheck, add_total: Callable[[int], None]
) -> Iterator[Job]:
    """The jobs that check one array, each stored unit once, made as they are taken;
    ``add_total`` learns how many chunks they account for."""

    def job(unit: Index, size: int | None) -> Job:
        if meta.shards is None:
            return functools.partial(check_chunk, store, meta, report, unit)
        return functools.partial(check_shard, store, meta, report, unit, size)

    if store.listable:
        for unit, size in _listed_units(store, meta, add_total):
            yield job(unit, size)
        return
    # No listing: every position of the grid is asked for.
    add_total(report.total)
    grid = grid_shape(meta.shape, meta.chunks if meta.shards is None else meta.shards.shard_shape)
    for unit in itertools.product(*(range(n) for n in grid)):
        yield job(unit, None)


def run_jobs(jobs: Iterator[Job], workers: int, on_done: Callable[[Done], None]) -> None:
    """Run ``jobs`` and their follow-ups in ``workers`` threads, a bounded number
    queued at a time, follow-ups first; ``on_done`` sees each result in this thread."""
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="zarrfs-check")
    pending: set[Future[Done]] = set()
    follow: deque[Iterator[Job]] = deque()

    def next_job() -> Job | None:
        while follow:
            job = next(follow[0], None)
            if job is not None:
                return job
            follow.popleft()
        return next(jobs, None)

    try:
        while True:
            while len(pending) < workers * QUEUED_PER_WORKER:
                job = next_job()
                if job is None:
                    break
                pending.add(pool.submit(job))
            if not pending:
                return
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                result = future.result()
                if result.more is not None:
                    follow.append(result.more)
                on_done(result)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@dataclass
class Report:
    arrays: list[ArrayCheck]
    metadata: list[str]  # metadata problems, one line each
    corrupt: int = 0  # lines printed for corrupt or unreadable stored values

    @property
    def ok(self) -> bool:
        return not (self.metadata or self.corrupt)


def check_store(
    store: Store,
    hierarchy: Hierarchy,
    workers: int,
    *,
    progress: bool | None = None,
    out: Callable[[str], None] = print,
) -> Report:
    """Check every array of ``hierarchy``; each problem is passed to ``out`` as found."""
    report = Report([], hierarchy.problem_lines())
    for problem in report.metadata:
        out(f"metadata: {problem}")
    from tqdm import tqdm  # here: every mount imports this module, none needs the bar

    hidden = not sys.stderr.isatty() if progress is None else not progress
    # Left on stderr at the end: the count of chunks checked, as rsync and pip leave theirs.
    bar = tqdm(total=0, unit="chunk", disable=hidden, file=sys.stderr)

    def add_total(n: int) -> None:
        bar.total += n  # shown at the next update (a refresh per chunk listed costs)

    def jobs() -> Iterator[Job]:
        for node in hierarchy.root.nodes():
            meta = node.meta
            if not isinstance(meta, ArrayMeta):
                continue
            checked = ArrayCheck(node.path, meta.n_chunks)
            report.arrays.append(checked)
            if meta.unsupported is not None:
                checked.skipped = meta.unsupported
                continue
            try:
                yield from array_jobs(store, meta, checked, add_total)
            except Exception as e:
                # Its stored chunks cannot all be found, so neither can the check
                # vouch for them: a metadata problem of that array.
                problem = f"/{node.path}: cannot list its chunks: {_reason(e)}"
                report.metadata.append(problem)
                out(f"metadata: {problem}")

    def on_done(done: Done) -> None:
        array = done.array
        array.present += done.present
        array.corrupt += done.corrupt
        array.nbytes += done.nbytes
        if done.problem is not None:
            report.corrupt += 1
            key, reason = done.problem
            out(f"corrupt: {key}: {reason}")
        bar.update(done.checked)

    try:
        run_jobs(jobs(), workers, on_done)
    finally:
        bar.close()
    return report


def nothing_to_check(hierarchy: Hierarchy) -> str | None:
    """Why a check of ``hierarchy`` would check nothing, if it would: no array found
    and no metadata problem to report (a store the walk could not list below its root
    group, or a hierarchy of groups only). An "ok" would then say nothing."""
    if hierarchy.problem_lines() or any(node.is_array for node in hierarchy.root.nodes()):
        return None
    if not hierarchy.listed:
        return (
            "it cannot be listed and holds no consolidated metadata "
            "(zarr.consolidate_metadata writes it)"
        )
    return "no arrays found"


def conclusion(report: Report) -> str:
    """The last line: the chunks of all arrays added up."""
    present = sum(a.present for a in report.arrays)
    missing = sum(a.missing for a in report.arrays if a.skipped is None)
    corrupt = sum(a.corrupt for a in report.arrays)
    line = (
        f"{len(report.arrays)} arrays: {present} chunks present, {missing} missing, "
        f"{corrupt} corrupt, {len(report.metadata)} metadata problems"
    )
    return ("ok: " if report.ok else "FAILED: ") + line


@click.command("check")
@click.argument("store")
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Chunks read and decoded at once (threads)  [default: the number of CPUs]",
)
@click.option(
    "--no-consolidated",
    is_flag=True,
    help="List the store itself, ignoring consolidated metadata.",
)
@click.option("--anonymous", is_flag=True, help="S3: unsigned requests (public buckets).")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="A progress bar on stderr  [default: when stderr is a terminal]",
)
def check_command(
    store: str, jobs: int | None, no_consolidated: bool, anonymous: bool, progress: bool | None
) -> None:
    """Read and decode every chunk of every array of the Zarr STORE (never changing
    it). Prints each corrupt chunk by its store key with the reason, then a summary
    per array. Exits 0 if everything stored decodes (missing chunks are fine), 1 if
    any chunk is corrupt or any metadata unreadable."""
    opened, hierarchy = open_and_walk(store, anonymous=anonymous, consolidated=not no_consolidated)
    nothing = nothing_to_check(hierarchy)
    if nothing is not None:
        echo(f"zarrfs: error: {opened.describe()}: nothing to check: {nothing}", err=True)
        sys.exit(1)

    from tqdm import tqdm

    def out(line: str) -> None:
        tqdm.write(printable(line), file=sys.stdout)

    report = check_store(opened, hierarchy, jobs or os.cpu_count() or 1, progress=progress, out=out)
    for array in sorted(report.arrays, key=lambda a: a.path):
        echo(array.summary())
    echo(conclusion(report))
    sys.exit(0 if report.ok else 1)
