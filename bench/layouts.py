"""``layouts``: the layouts people use, read through zarrfs vs zarr-python 3 and
tensorstore, in alternating rounds on the same warm store, with where the CPU went.

A float32 array 16384 columns wide (``--size-mb``, in whole shards of 16 MiB) written
by zarr-python as:

- rows: Zarr v2, chunks 16x16384 = 1 MiB, each a contiguous run of array.raw;
- tiles: Zarr v2, chunks 256x1024 = 1 MiB, 16 across a row of chunks;
- shards: Zarr v3, shards 256x16384 of 16 inner chunks 256x1024;

each with blosc-lz4 and with zlib-1 (v2) or gzip-1 (v3, which has no zlib).
``dd bs=1M`` of array.raw on a fresh mount vs zarr-python ``z[:]`` (target >= 1.5x)
and vs tensorstore's read (driver zarr or zarr3; target >= 1.0x blosc-lz4, >= 1.2x
zlib-1 and gzip-1), the best of 2 alternating rounds of each, every round printing
where the CPU went (the daemon and dd, or the reader itself; the
machine's busy and idle seconds); and ``np.load(array.npy, mmap_mode="r").sum()``
of the tiles blosc-lz4 array vs ``z[:].sum()`` (target >= 1.0x).

Last, the bounds: bench/memfs.py serving as many bytes from memory (a daemon that
only slices a buffer) read by the same dd, against the fastest tensorstore read of
the section; and case by case the CPU bound, the rate a daemon decoding as
tensorstore does and serving as memfs does could reach with every core busy. A
part that fails is an error of the section; the figures of the others are still
reported.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zarr
import zarr.codecs

from bench import cpumeter
from bench.ceilings import MODES, Ceiling, read_ceiling
from bench.context import Bench
from bench.data import CODECS, COLUMNS, MiB, blosc_lz4_v3, same_bits, store_bytes, warm
from bench.mounting import metered_dd
from bench.profiling import profiled
from bench.reads import npy_sum, tensorstore_read, zarr_sum
from bench.results import BenchError, Result, reference, versus

LAYOUT_COLUMNS = 16384  # a row is 64 KiB of float32
ROW_BLOCK = 256  # the array's rows come in whole tiles and shards (16 MiB)
ROUNDS = 2  # alternating rounds of each side; the best one counts
ZP_TARGET = 1.5  # zarrfs / zarr-python
TS_TARGETS = {"blosc-lz4": 1.0, "zlib-1": 1.2, "gzip-1": 1.2}  # zarrfs / tensorstore
NPY_TARGET = 1.0  # array.npy sum / zarr-python z[:].sum()
NPY_CASE = ("tiles", "blosc-lz4")
# Zarr v3 has no zlib codec: gzip (the same deflate, another header) at the same level.
V3_CODECS: dict[str, Callable[[], Any]] = {
    "blosc-lz4": blosc_lz4_v3,
    "gzip-1": lambda: zarr.codecs.GzipCodec(level=1),
}


@dataclass(frozen=True)
class Layout:
    name: str
    zarr_format: int
    chunks: tuple[int, int]  # the inner chunks where ``shards`` is set
    shards: tuple[int, int] | None = None

    @property
    def codecs(self) -> dict[str, Callable[[], Any]]:
        return CODECS if self.zarr_format == 2 else V3_CODECS

    @property
    def ts_driver(self) -> str:
        return "zarr" if self.zarr_format == 2 else "zarr3"

    def describe(self) -> str:
        chunks = "x".join(map(str, self.chunks))
        if self.shards is None:
            return f"{self.name}: Zarr v{self.zarr_format}, chunks {chunks}"
        shards = "x".join(map(str, self.shards))
        return f"{self.name}: Zarr v{self.zarr_format}, shards {shards} of chunks {chunks}"


LAYOUTS = (
    Layout("rows", 2, (16, LAYOUT_COLUMNS)),  # 1 MiB chunks, each a run of array.raw
    Layout("tiles", 2, (256, 1024)),  # 1 MiB chunks, 16 across a row of chunks
    Layout("shards", 3, (256, 1024), (256, LAYOUT_COLUMNS)),  # 16 MiB shards
)


@dataclass
class Side:
    """One reader's rounds: MiB/s each, or why it failed (then no more rounds)."""

    name: str
    rates: list[float] = field(default_factory=list)
    busy: list[float] = field(default_factory=list)  # the machine's CPU s, each round
    failure: str | None = None

    def best(self) -> float | None:
        return max(self.rates) if self.rates and self.failure is None else None

    def best_busy(self) -> float:
        """The machine's CPU seconds in the best round."""
        return self.busy[self.rates.index(max(self.rates))]

    def last(self) -> str:
        return "failed" if self.failure is not None else f"{self.rates[-1]:.1f} MiB/s"


# -- data and stores --------------------------------------------------------------------


def layout_data(b: Bench) -> np.ndarray:
    """``b.data()`` (smooth + noise) laid out 16384 wide, in whole blocks of 256 rows
    where there are enough: a view, no copy."""
    per_row = LAYOUT_COLUMNS // COLUMNS
    rows = b.rows // per_row
    if rows >= ROW_BLOCK:
        rows -= rows % ROW_BLOCK
    return b.data()[: rows * per_row].reshape(rows, LAYOUT_COLUMNS)


def create_store(store: Path, layout: Layout, codec: str, data: np.ndarray) -> None:
    """A group holding ``arr`` in this layout and codec, written by zarr-python."""
    zarr.open_group(str(store), mode="w", zarr_format=layout.zarr_format)
    z = zarr.create_array(
        store=str(store / "arr"),
        shape=data.shape,
        chunks=layout.chunks,
        shards=layout.shards,
        dtype="<f4",
        zarr_format=layout.zarr_format,
        compressors=layout.codecs[codec](),
        fill_value=0.0,
    )
    z[...] = data


# -- the readers' rounds ------------------------------------------------------------------


def cpu_text(usage: cpumeter.Usage, parties: dict[str, float]) -> str:
    named = ", ".join(f"{name} {seconds:.2f}" for name, seconds in parties.items())
    return f"CPU s: {named}; machine busy {usage.busy:.2f}, idle {usage.idle:.2f}"


Round = tuple[float, str, float]  # seconds, where the CPU went, the machine's CPU s


def zarr_python_round(store: Path, data: np.ndarray, what: str) -> Round:
    """Seconds of zarr-python's ``z[:]`` (opened fresh), and where the CPU went."""
    z = zarr.open_array(str(store / "arr"), mode="r")
    meter = cpumeter.Meter()
    meter.start()
    start = time.perf_counter()
    out = z[:]
    elapsed = time.perf_counter() - start
    usage = meter.stop()
    if not same_bits(out, data):
        raise BenchError(f"{what}: zarr-python read other values than were stored")
    return elapsed, cpu_text(usage, {"zarr-python": usage.own}), usage.busy


def tensorstore_round(store: Path, driver: str, data: np.ndarray, what: str) -> Round:
    """Seconds of tensorstore's read (opened fresh), and where the CPU went (its open,
    a JSON file read, included)."""
    meter = cpumeter.Meter()
    meter.start()
    out, elapsed = tensorstore_read(store, driver)
    usage = meter.stop()
    if not same_bits(out, data):
        raise BenchError(f"{what}: tensorstore read other values than were stored")
    return elapsed, cpu_text(usage, {"tensorstore": usage.own}), usage.busy


def zarrfs_round(b: Bench, store: Path, data: np.ndarray, what: str, *options: str) -> Round:
    """Seconds of ``dd bs=1M`` of array.raw on a fresh mount (its bytes checked after),
    and where the CPU went."""
    elapsed, usage = metered_dd(store, b.work, data, what, options=options)
    text = cpu_text(usage, {"daemon": usage.watched, "dd": usage.children})
    return elapsed, text, usage.busy


def npy_round(b: Bench, store: Path) -> tuple[float, float, str, float]:
    """``np.load(array.npy, mmap_mode="r").sum()`` on a fresh mount: the sum, its
    seconds, where the CPU went, and the machine's CPU seconds."""
    with b.mount(store) as m, profiled(m.process.pid, "npy sum"):
        meter = cpumeter.Meter(pid=m.process.pid)
        meter.start()
        total, elapsed = npy_sum(m / "arr" / "array.npy")
        usage = meter.stop()
    cpu = cpu_text(usage, {"daemon": usage.watched, "numpy": usage.own})
    return total, elapsed, cpu, usage.busy


def run_side(side: Side, mb: float, read: Callable[[], Round]) -> str:
    """One round of ``side`` unless it failed before: its rate recorded, the CPU line
    returned ("" when it failed, now or before)."""
    if side.failure is not None:
        return ""
    try:
        elapsed, cpu, busy = read()
    except (BenchError, OSError, ValueError) as e:  # ValueError: tensorstore
        side.failure = f"{side.name}: {e}"
        return ""
    side.rates.append(mb / elapsed)
    side.busy.append(busy)
    return cpu


# -- the section ----------------------------------------------------------------------------


def compare_reads(
    b: Bench, layout: Layout, codec: str, store: Path, data: np.ndarray
) -> list[Side]:
    """``ROUNDS`` alternating rounds of zarr-python, tensorstore, zarrfs and zarrfs
    with ``--kernel-cache`` (reads through the page cache: two copies), each printed;
    the four sides."""
    what = f"layouts {layout.name} {codec}"
    mb = data.nbytes / MiB
    zp, ts, fs = Side("zarr-python"), Side("tensorstore"), Side("zarrfs")
    pc = Side("page cache")
    readers: list[tuple[Side, Callable[[], Round]]] = [
        (zp, lambda: zarr_python_round(store, data, what)),
        (ts, lambda: tensorstore_round(store, layout.ts_driver, data, what)),
        (fs, lambda: zarrfs_round(b, store, data, what)),
        (pc, lambda: zarrfs_round(b, store, data, what, "--kernel-cache")),
    ]
    for n in range(ROUNDS):
        cpu = {side.name: run_side(side, mb, read) for side, read in readers}
        print(f"    round {n + 1}: " + "; ".join(f"{s.name} {s.last()}" for s, _ in readers))
        for name, text in cpu.items():
            if text:
                print(f"      {name:<11} {text}")
    return [zp, ts, fs, pc]


def read_results(label: str, codec: str, sides: list[Side]) -> tuple[list[Result], list[str]]:
    """zarrfs's best round against each reference's, and beside zarrfs through the
    page cache: the Results, and the failures."""
    zp, ts, fs, pc = sides
    failures = [s.failure for s in sides if s.failure is not None]
    fs_rate = fs.best()
    if fs_rate is None:
        return [], failures
    results = []
    for ref, target in ((zp, ZP_TARGET), (ts, TS_TARGETS[codec])):
        ref_rate = ref.best()
        if ref_rate is not None:
            results.append(
                versus(f"layouts {label} vs {ref.name}", fs_rate, ref_rate, "MiB/s", target)
            )
    pc_rate = pc.best()
    if pc_rate is not None:
        results.append(
            reference(f"layouts {label} vs --kernel-cache", fs_rate, pc_rate, "MiB/s", "page cache")
        )
    return results, failures


def compare_npy(b: Bench, label: str, store: Path, mb: float, case: CaseCpu) -> Result:
    """``ROUNDS`` alternating rounds of array.npy's mapped sum vs zarr-python's; each
    side's best round goes into ``case`` (as "npy zarrfs", "npy zarr-python")."""
    zp_rounds: list[tuple[float, float]] = []  # (seconds, the machine's CPU s)
    fs_rounds: list[tuple[float, float]] = []
    for n in range(ROUNDS):
        meter = cpumeter.Meter()
        meter.start()
        zp_sum, zp_time = zarr_sum(store)
        zp_busy = meter.stop().busy
        fs_sum, fs_time, cpu, fs_busy = npy_round(b, store)
        if not np.isclose(fs_sum, zp_sum, rtol=1e-4):
            raise BenchError(
                f"layouts npy: sum through the mount {fs_sum} != zarr-python's {zp_sum}"
            )
        zp_rounds.append((zp_time, zp_busy))
        fs_rounds.append((fs_time, fs_busy))
        print(
            f"    npy round {n + 1}: z[:].sum() {mb / zp_time:.1f} MiB/s; "
            f"array.npy mapped .sum() {mb / fs_time:.1f} MiB/s"
        )
        print(f"      zarrfs      {cpu}")
    for name, rounds in (("npy zarrfs", fs_rounds), ("npy zarr-python", zp_rounds)):
        seconds, busy = min(rounds)
        case.sides[name] = (mb / seconds, busy / mb)
    return versus(
        f"layouts npy.sum {label} vs zarr-python",
        mb / min(fs_rounds)[0],
        mb / min(zp_rounds)[0],
        "MiB/s",
        NPY_TARGET,
    )


@dataclass
class CaseCpu:
    """One case's best rounds, side by side: each side's MiB/s and the machine's CPU
    seconds per MiB in that round (what the bounds are made of)."""

    label: str
    sides: dict[str, tuple[float, float]] = field(default_factory=dict)

    def per_mib(self, *names: str) -> str:
        return ", ".join(
            f"{name} {1000 * self.sides[name][1]:.2f}" for name in names if name in self.sides
        )


def layout_case(
    b: Bench,
    layout: Layout,
    codec: str,
    data: np.ndarray,
    failures: list[str],
    cases: list[CaseCpu],
) -> list[Result]:
    """One store, made, warmed, read by all three (and the npy sum for NPY_CASE), removed."""
    label = f"{layout.name} v{layout.zarr_format} {codec}"
    store = b.work / f"layouts-{layout.name}-{codec}.zarr"
    mb = data.nbytes / MiB
    try:
        create_store(store, layout, codec, data)
        warm(store)
        ratio = data.nbytes / store_bytes(store)
        print(f"  {layout.describe()}, {codec} (compressed {ratio:.2f}x)")
        sides = compare_reads(b, layout, codec, store, data)
        results, failed = read_results(label, codec, sides)
        case = CaseCpu(label)
        for side in sides:
            best = side.best()
            if best is not None:
                case.sides[side.name] = (best, side.best_busy() / mb)
        cases.append(case)
        failures += [f"{label}: {failure}" for failure in failed]
        if (layout.name, codec) == NPY_CASE:
            try:  # the reads' results are kept when the npy part fails
                results.append(compare_npy(b, label, store, mb, case))
            except (BenchError, OSError) as e:
                failures.append(f"{label} npy.sum: {e}")
        return results
    finally:
        shutil.rmtree(store, ignore_errors=True)


def cpu_bound(case: CaseCpu, serving: Ceiling) -> float | None:
    """The rate of a daemon that decodes as tensorstore does (the machine's CPU per
    MiB in its best round) and serves as memfs does, every core busy all the time:
    zarrfs decodes with the same C libraries, so it cannot do better."""
    if "tensorstore" not in case.sides:
        return None
    return (os.cpu_count() or 1) / (case.sides["tensorstore"][1] + serving.busy_per_mib)


def bound_results(ceiling: Ceiling, cases: list[CaseCpu]) -> list[Result]:
    """What zarrfs could reach against tensorstore, case by case: the FUSE ceiling
    against the fastest tensorstore read (FUSE alone, decoding free), and each
    case's CPU bound."""
    rates = [case.sides["tensorstore"][0] for case in cases if "tensorstore" in case.sides]
    if not rates:
        return []
    results = [
        reference(
            f"layouts FUSE ceiling ({ceiling.mode}) vs fastest tensorstore",
            ceiling.rate,
            max(rates),
            "MiB/s",
            "ceiling",
        )
    ]
    for case in cases:
        rate = cpu_bound(case, ceiling)
        if rate is not None:
            ts_rate = case.sides["tensorstore"][0]
            results.append(
                reference(
                    f"layouts {case.label} CPU bound vs tensorstore",
                    rate,
                    ts_rate,
                    "MiB/s",
                    "bound",
                )
            )
    return results


def attach_bounds(
    results: list[Result], cases: list[CaseCpu], direct: Ceiling, mapped: Ceiling
) -> None:
    """Each case's figures get what bounds them: every side's CPU per MiB in its best
    round, the CPU bound, and the FUSE ceiling of the same access mode."""
    for case in cases:
        reads = case.per_mib("zarrfs", "zarr-python", "tensorstore")
        rate = cpu_bound(case, direct)
        within = f"; CPU bound {rate:,.0f} MiB/s" if rate is not None else ""
        npy = case.per_mib("npy zarrfs", "npy zarr-python")
        for r in results:
            if r.section.startswith(f"layouts {case.label} vs "):
                r.bound = f"machine ms CPU/MiB: {reads}{within}; {direct.text()}"
            elif r.section.startswith(f"layouts npy.sum {case.label} "):
                r.bound = f"machine ms CPU/MiB: {npy}; {mapped.text()}"


def layouts(b: Bench) -> list[Result]:
    data = layout_data(b)
    print(
        f"  float32 {data.shape} = {data.nbytes / MiB:.0f} MiB; dd bs=1M of array.raw on a "
        f"fresh mount vs zarr-python z[:] and tensorstore read(), best of {ROUNDS} rounds"
    )
    results: list[Result] = []
    failures: list[str] = []
    cases: list[CaseCpu] = []
    for layout in LAYOUTS:
        for codec in layout.codecs:
            try:
                results += layout_case(b, layout, codec, data, failures, cases)
            except (BenchError, OSError) as e:
                failures.append(f"{layout.name} v{layout.zarr_format} {codec}: {e}")
    try:
        direct, page, mapped = (read_ceiling(b.work, data.nbytes, mode) for mode in MODES)
        for ceiling in (direct, page, mapped):
            print(f"  {ceiling.text()}: {ceiling.cpu}")
        print(
            f"  CPU bound of each case: {os.cpu_count()} cores / (tensorstore's CPU s per MiB"
            f" + memfs's {direct.busy_per_mib * 1000:.2f} ms per MiB with direct_io)"
        )
        results += bound_results(direct, cases)
        attach_bounds(results, cases, direct, mapped)  # the page cache's: printed only
    except (BenchError, OSError) as e:
        failures.append(f"FUSE ceiling: {e}")
    if failures:
        raise BenchError("\n  ".join(failures), results)
    return results
