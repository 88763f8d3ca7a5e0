"""Benchmark zarrfs against zarr-python 3 and a memory-serving FUSE ceiling (not a test).

Creates its own Zarr v2 directory stores (float32, rows of 1024 values = 4 KiB, chunks
of 256 rows = 1 MiB) under ``--tmp-dir`` and measures, section by section, each figure
side by side with its reference in the same run, on the same store:

- read-seq: ``dd bs=1M`` of array.raw on a fresh mount vs zarr-python ``z[:]``, for
  blosc-lz4 (target >= 1.5x) and zlib-1 (target >= 1.0x).
- read-npy: ``np.load(array.npy, mmap_mode="r").sum()`` on a fresh mount vs
  ``z[:].sum()`` (blosc-lz4; target >= 1.0x).
- read-random: random 4 KiB preads into a hot 64 MiB array (target >= 10 000 reads/s)
  vs the same reads from scripts/memfs.py, a minimal pyfuse3 filesystem serving the
  bytes from memory (target >= 0.6x).
- memory: ``dd`` of an array 4x ``--size-mb`` with ``--cache-size 256M``: the daemon's
  peak RSS (VmHWM) < 256 MiB + 150 MiB.
- metadata: a consolidated group of 10 000 small arrays: mount (read-only) + ``ls -R``
  + stat of every file <= 2 s, beside scripts/memfs.py --tree (a tree of the same shape answered
  from tables in memory) as the ceiling; then a second ``ls -R`` (printed: names and
  attributes come from the kernel's caches, listings from the daemon).
- readers: 4 concurrent ``dd`` of 4 arrays (size/4 each) vs one alone: aggregate
  >= 0.9x, slowest reader >= 0.5x the fastest.
- write-seq: ``dd conv=notrunc,fsync`` into array.raw vs zarr-python ``z[:] = data``,
  blosc-lz4 and zlib-1 (target >= 1.0x), each started with nothing dirty in the page
  cache; also prints the rate of encoding alone on every core, which bounds both.
- write-random: random 4 KiB pwrites into a hot 64 MiB array (target >= 5 000 writes/s).
- sharded: a Zarr v3 sharded array (float32, 8192 columns, ``--size-mb`` up to 256 MiB,
  inner chunks 512x512 = 1 MiB, shards 2048x2048 of 16 inner chunks, blosc-lz4) written
  by zarr-python: ``dd bs=1M`` of array.raw on a fresh mount vs zarr-python ``z[:]``
  (target >= 1.5x; tensorstore's read printed for reference), and the rewrite ``dd
  conv=notrunc,fsync`` into array.raw vs zarr-python ``z[:] = data`` (target >= 1.0x),
  the rewritten stores read back by zarr-python and tensorstore. A part that fails
  (zarrfs shows no array.raw for the array, say) is an error of the section; the
  figures of the others are still reported.
- layouts (scripts/bench_layouts.py): the layouts people use, of a float32 array 16384
  columns wide (``--size-mb``, in whole shards of 16 MiB) written by zarr-python: rows
  (Zarr v2, chunks 16x16384 = 1 MiB, each a contiguous run of array.raw), tiles (v2,
  chunks 256x1024 = 1 MiB) and shards (v3, shards 256x16384 of 16 inner chunks
  256x1024), each with blosc-lz4 and with zlib-1 (v2) or gzip-1 (v3, which has no
  zlib). ``dd bs=1M`` of array.raw on a fresh mount vs zarr-python ``z[:]`` (target
  >= 1.5x blosc-lz4, >= 1.2x zlib-1 and gzip-1) and vs tensorstore's read (driver zarr
  or zarr3, target >= 1.0x), the best of 2 alternating rounds of each, every round
  printing where the CPU went (the daemon and dd, or the reader itself; the machine's
  busy and idle seconds); and ``np.load(array.npy, mmap_mode="r").sum()`` of the tiles
  blosc-lz4 array vs ``z[:].sum()`` (target >= 1.0x). Last, the bound: scripts/memfs.py
  serving as many bytes from memory (a daemon that only slices a buffer) read by the
  same dd, against the fastest tensorstore read of the section. A part that fails is
  an error of the section; the figures of the others are still reported.
- s3: a v3 array (float32, chunks of 1 MiB, blosc-lz4, ``--size-mb`` clamped to
  128..256 MiB, consolidated) mounted as s3://bucket/prefix from S3 servers that the
  section starts on 127.0.0.1. First from scripts/s3_server.py (a read-only S3 look-
  alike serving the store's directory, a worker process per CPU, bodies by sendfile,
  fast enough not to bound either side): ``dd bs=1M`` of array.raw on a fresh mount vs
  zarr-python ``z[:]`` through ``zarr.storage.ObjectStore`` over obstore's S3Store,
  zarrfs's own client (target >= 1.0x; the best of 5 alternating rounds of each;
  obstore's concurrent GETs alone, 8 and 32 at a time, printed as the server's
  ceiling). Each round prints where the CPU went (scripts/cpumeter.py: zarr-python
  or the daemon and dd, the server, the machine's busy and idle seconds), and the
  ratio the two best rounds' CPU allows at equal use of the cores. Then from moto, the
  store uploaded to it: the same comparison once, for reference (moto, Python answering
  one request at a time in its dispatcher, serves some 100-200 MiB/s and bounds both
  sides); the same dd with 20 ms added to every request by tests/support/fault_proxy.py vs
  through the proxy with none (target >= 0.7x); and mount + ``ls -R`` of a consolidated
  group of 1000 arrays: the object GETs (moto's request log) before the first chunk is
  read (target <= 1).

Reads see the store's compressed files warm in the OS page cache (each store is read
once beforehand): dropping the page cache is not portable, so both sides get it warm.

Exit status: 0 when every target is met, 1 when one is missed, 2 when the benchmark
(or a section of it) could not run.

    .venv/bin/python scripts/bench.py [--size-mb 1024] [--only read-seq,metadata]
                                      [--random-ops 20000] [--tmp-dir /var/tmp]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import zarr
import zarr.errors
import zarr.storage

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
# scripts/bench_layouts.py imports this module as ``bench``: run as a script, it is
# that same module (not a second copy with a BenchError of its own).
sys.modules.setdefault("bench", sys.modules[__name__])

import cpumeter  # noqa: E402
from memfs import memfs_mounted, treefs_mounted  # noqa: E402

from tests.support.mounting import Mounted, mounted  # noqa: E402

MiB = 2**20
PAGE = 4096
COLUMNS = 1024  # a row is 4 KiB of float32
CHUNK_ROWS = 256  # a chunk is 256 rows: 1 MiB
HOT_MB = 64  # the array of the random-read and random-write sections
MEMORY_CACHE_MB = 256
MEMORY_SLACK_MB = 150
METADATA_ARRAYS = 10_000
READERS = 4

CODECS = {
    "blosc-lz4": lambda: numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE),
    "zlib-1": lambda: numcodecs.Zlib(level=1),
}
READ_SEQ_TARGETS = {"blosc-lz4": 1.5, "zlib-1": 1.0}


class BenchError(Exception):
    """The benchmark could not run; the message says why. ``results``: what the section
    measured before it failed, reported all the same."""

    def __init__(self, message: str, results: list[Result] | None = None) -> None:
        super().__init__(message)
        self.results = results or []


# -- results ----------------------------------------------------------------------------


@dataclass
class Result:
    section: str
    figure: str
    reference: str
    ratio: float | None
    target: str
    passed: bool


def fmt(value: float, unit: str) -> str:
    return f"{value:,.0f} {unit}" if value >= 1000 else f"{value:.1f} {unit}"


def versus(section: str, value: float, reference: float, unit: str, target: float) -> Result:
    """``value`` over ``reference`` (both higher-is-better) against a ratio target."""
    ratio = value / reference
    return Result(
        section, fmt(value, unit), fmt(reference, unit), ratio, f">= {target}x", ratio >= target
    )


def reference(section: str, value: float, ref: float, unit: str, kind: str = "reference") -> Result:
    """``value`` beside ``ref`` (a ratio, no target): what bounds a figure or explains it."""
    return Result(section, fmt(value, unit), fmt(ref, unit), value / ref, f"({kind})", True)


def at_least(section: str, value: float, unit: str, target: float) -> Result:
    return Result(section, fmt(value, unit), "-", None, f">= {fmt(target, unit)}", value >= target)


def below(section: str, value: float, unit: str, target: float, strict: bool = True) -> Result:
    passed = value < target if strict else value <= target
    sign = "<" if strict else "<="
    return Result(section, fmt(value, unit), "-", None, f"{sign} {fmt(target, unit)}", passed)


def print_result(r: Result) -> None:
    ratio = f"  ratio {r.ratio:.2f}x" if r.ratio is not None else ""
    reference = f"  vs {r.reference}" if r.reference != "-" else ""
    verdict = "PASS" if r.passed else "MISS"
    print(f"  {r.section}: {r.figure}{reference}{ratio}  (target {r.target})  {verdict}")


def print_table(results: list[Result], errors: dict[str, str]) -> None:
    header = ("section", "zarrfs", "reference", "ratio", "target", "result")
    rows = [header]
    for r in results:
        ratio = f"{r.ratio:.2f}x" if r.ratio is not None else "-"
        rows.append(
            (r.section, r.figure, r.reference, ratio, r.target, "PASS" if r.passed else "MISS")
        )
    rows += [(name, "-", "-", "-", "-", "ERROR") for name in errors]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    print()
    for n, row in enumerate(rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))


# -- data and stores --------------------------------------------------------------------


def smooth(rows: slice, offset: float = 0.0) -> np.ndarray:
    """Smooth float32 values for the given rows (a field of waves plus a slow trend)."""
    i = np.arange(rows.start, rows.stop, dtype=np.float64)[:, None]
    j = np.arange(COLUMNS, dtype=np.float64)[None, :]
    values = 100.0 * np.sin(i / 700.0 + offset) * np.cos(j / 90.0) + i * 1e-3 + offset
    return values.astype("<f4")


def make_data(rows: int, offset: float = 0.0, noise: float = 0.0) -> np.ndarray:
    """``smooth`` values, plus Gaussian noise of this deviation (so it compresses like
    measured data rather than like a formula)."""
    data = np.empty((rows, COLUMNS), dtype="<f4")
    rng = np.random.default_rng(int(offset * 1000))
    for start in range(0, rows, 4096):
        block = slice(start, min(rows, start + 4096))
        data[block] = smooth(block, offset)
        if noise:
            data[block] += rng.normal(0.0, noise, data[block].shape).astype("<f4")
    return data


def new_group(store: Path) -> None:
    zarr.open_group(str(store), mode="w", zarr_format=2)


def add_array(store: Path, name: str, codec: str, rows: int) -> zarr.Array:
    """An empty v2 array ``name`` in the group at ``store`` (chunks of 1 MiB)."""
    return zarr.create_array(
        store=str(store / name),
        shape=(rows, COLUMNS),
        chunks=(CHUNK_ROWS, COLUMNS),
        dtype="<f4",
        zarr_format=2,
        compressors=CODECS[codec](),
        fill_value=0.0,
    )


def create_array(store: Path, rows: int, codec: str, initial: np.ndarray) -> zarr.Array:
    """A v2 group holding array ``arr`` (chunks of 1 MiB), filled with ``initial``."""
    new_group(store)
    z = add_array(store, "arr", codec, rows)
    z[...] = initial
    return z


def warm(store: Path) -> None:
    """Read every file of the store once, so its compressed chunks are in the page cache."""
    for directory, _, files in os.walk(store):
        for name in files:
            with open(os.path.join(directory, name), "rb") as f:
                while f.read(16 * MiB):
                    pass


def check_store(store: Path, data: np.ndarray, what: str) -> None:
    """Spot-check a few chunks (first, last, random ones) against the data."""
    z = zarr.open_array(str(store / "arr"), mode="r")
    chunks = -(-data.shape[0] // CHUNK_ROWS)
    for c in {0, chunks - 1, *random.sample(range(chunks), min(3, chunks))}:
        rows = slice(c * CHUNK_ROWS, min(data.shape[0], (c + 1) * CHUNK_ROWS))
        if not np.array_equal(z[rows], data[rows]):
            raise BenchError(f"{what}: chunk {c} holds other values than were written")


def check_file(path: Path, data: np.ndarray, what: str) -> None:
    """Compare the first and last MiB of a flat file with the data's bytes."""
    raw = data.reshape(-1).view(np.uint8)
    with open(path, "rb") as f:
        for offset in (0, max(0, raw.size - MiB)):
            f.seek(offset)
            if f.read(MiB) != raw[offset : offset + MiB].tobytes():
                raise BenchError(f"{what}: {path.name} at {offset} differs from the array")


# -- running things ---------------------------------------------------------------------


def log_tail(log: str, lines: int = 15) -> str:
    return "\n".join("    " + line for line in log.splitlines()[-lines:])


def dd_command(source: Path, target: Path | str, *flags: str) -> list[str]:
    return ["dd", f"if={source}", f"of={target}", "bs=1M", *flags, "status=none"]


def dd(m: Mounted, source: Path, target: Path | str, *flags: str) -> float:
    """Run dd through the mount ``m``; the wall time in seconds."""
    start = time.perf_counter()
    result = subprocess.run(dd_command(source, target, *flags), capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode:
        raise BenchError(
            f"dd {source} -> {target} failed (exit {result.returncode}): "
            f"{result.stderr.strip()}\n  Last lines of the zarrfs log:\n{log_tail(m.log())}"
        )
    return elapsed


def dd_concurrently(m: Mounted, sources: list[Path]) -> tuple[list[float], float]:
    """One dd to /dev/null per source, all at once: each one's seconds, and the wall time."""
    ends = [0.0] * len(sources)
    start = time.perf_counter()
    processes = [
        subprocess.Popen(dd_command(s, "/dev/null"), stderr=subprocess.PIPE) for s in sources
    ]

    def wait(i: int) -> None:
        processes[i].wait()
        ends[i] = time.perf_counter()

    threads = [threading.Thread(target=wait, args=(i,)) for i in range(len(sources))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for p, s in zip(processes, sources):
        assert p.stderr is not None
        if p.returncode:
            raise BenchError(
                f"dd {s} failed (exit {p.returncode}): {p.stderr.read().decode().strip()}\n"
                f"  Last lines of the zarrfs log:\n{log_tail(m.log())}"
            )
        p.stderr.close()
    return [end - start for end in ends], max(ends) - start


def random_reads(path: Path, size: int, count: int) -> float:
    """Seconds for ``count`` 4 KiB preads at random 4 KiB-aligned offsets of one fd.

    The file is read once first (hot). Every timed pread reaches the filesystem: readahead
    is off (POSIX_FADV_RANDOM) and the offsets run through random permutations of the
    pages, the file's page cache dropped (untimed) before each pass.
    """
    pages = size // PAGE
    rng = np.random.default_rng(2)
    fd = os.open(path, os.O_RDONLY)
    try:
        for offset in range(0, size, MiB):
            os.pread(fd, MiB, offset)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        elapsed = 0.0
        while count > 0:
            offsets = (rng.permutation(pages)[:count] * PAGE).tolist()
            count -= len(offsets)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            start = time.perf_counter()
            for offset in offsets:
                os.pread(fd, PAGE, offset)
            elapsed += time.perf_counter() - start
    finally:
        os.close(fd)
    return elapsed


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set size (VmHWM) in MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise BenchError(f"no VmHWM in /proc/{pid}/status")


def daemon_pid(m: Mounted) -> int:
    """The zarrfs daemon's pid: the mount root's user.zarrfs.pid, else our subprocess."""
    try:
        return int(os.getxattr(m.path, "user.zarrfs.pid"))
    except (OSError, ValueError):
        return m.process.pid


# -- the benchmark's state --------------------------------------------------------------


@dataclass
class Bench:
    work: Path
    size_mb: int
    random_ops: int
    _data: np.ndarray | None = None
    _stores: dict[str, Path] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return self.size_mb * MiB // (COLUMNS * 4)

    @property
    def hot_rows(self) -> int:
        return min(self.size_mb, HOT_MB) * MiB // (COLUMNS * 4)

    def mount(self, store: Path, *options: str) -> AbstractContextManager[Mounted]:
        return mounted(store, *options, log_dir=self.work)

    def data(self) -> np.ndarray:
        """The read sections' array: smooth float32 with a little noise, --size-mb."""
        if self._data is None:
            self._data = make_data(self.rows, noise=0.01)
        return self._data

    def read_store(self, codec: str) -> Path:
        """A store whose ``arr`` holds ``data()`` with this codec (made once, shared)."""
        if codec not in self._stores:
            store = self.work / f"read-{codec}.zarr"
            create_array(store, self.rows, codec, self.data())
            self._stores[codec] = store
        return self._stores[codec]


# -- sections ---------------------------------------------------------------------------


def read_seq(b: Bench) -> list[Result]:
    data = b.data()
    mb = data.nbytes / MiB
    print(f"  float32 {data.shape} = {mb:.0f} MiB; dd bs=1M on a fresh mount vs z[:]")
    results = []
    for codec, target in READ_SEQ_TARGETS.items():
        store = b.read_store(codec)
        warm(store)
        with b.mount(store) as m:
            fs_time = dd(m, m / "arr" / "array.raw", "/dev/null")
            check_file(m / "arr" / "array.raw", data, "read-seq")
        z = zarr.open_array(str(store / "arr"), mode="r")
        start = time.perf_counter()
        out = z[:]
        zp_time = time.perf_counter() - start
        if not np.array_equal(out, data):
            raise BenchError("read-seq: zarr-python read other values than were stored")
        del out
        results.append(versus(f"read-seq {codec}", mb / fs_time, mb / zp_time, "MiB/s", target))
    return results


def npy_sum(path: Path) -> tuple[float, float]:
    """``np.load(path, mmap_mode="r").sum()`` and its seconds (unmapped after)."""
    start = time.perf_counter()
    mapped = np.load(path, mmap_mode="r")
    total = float(mapped.sum())
    elapsed = time.perf_counter() - start
    del mapped  # unmap before unmounting
    return total, elapsed


def zarr_sum(store: Path) -> tuple[float, float]:
    """zarr-python's ``z[:].sum()`` of ``arr`` (opened fresh) and its seconds."""
    z = zarr.open_array(str(store / "arr"), mode="r")
    start = time.perf_counter()
    total = float(z[:].sum())
    return total, time.perf_counter() - start


def read_npy(b: Bench) -> list[Result]:
    store = b.read_store("blosc-lz4")
    mb = b.data().nbytes / MiB
    print("  np.load(array.npy, mmap_mode='r').sum() on a fresh mount vs z[:].sum()")
    warm(store)
    with b.mount(store) as m:
        fs_sum, fs_time = npy_sum(m / "arr" / "array.npy")
    zp_sum, zp_time = zarr_sum(store)
    if not np.isclose(fs_sum, zp_sum, rtol=1e-4):
        raise BenchError(f"read-npy: sum through the mount {fs_sum} != zarr-python's {zp_sum}")
    return [versus("read-npy blosc-lz4", mb / fs_time, mb / zp_time, "MiB/s", 1.0)]


def read_random(b: Bench) -> list[Result]:
    hot = b.data()[: b.hot_rows]
    store = b.work / "read-hot.zarr"
    create_array(store, b.hot_rows, "blosc-lz4", hot)
    warm(store)
    cache = f"{max(MEMORY_CACHE_MB, 2 * hot.nbytes // MiB)}M"
    count = b.random_ops
    print(
        f"  {count} random 4 KiB preads, one fd, into a hot {hot.nbytes / MiB:.0f} MiB "
        f"array (--cache-size {cache}) vs scripts/memfs.py serving as many bytes from memory"
    )
    with b.mount(store, "--cache-size", cache) as m:
        fs_rate = count / random_reads(m / "arr" / "array.raw", hot.nbytes, count)
        check_file(m / "arr" / "array.raw", hot, "read-random")
    with memfs_mounted(hot.nbytes, b.work) as (path, log):
        ceiling = count / random_reads(path, hot.nbytes, count)
    served = log.read_text().strip() or "memfs printed nothing"
    print(f"  ({served}: the {count} timed preads + the warm-up read's requests)")
    return [
        at_least("read-random", fs_rate, "reads/s", 10_000),
        versus("read-random vs ceiling", fs_rate, ceiling, "reads/s", 0.6),
    ]


def write_repeated_chunks(store: Path, rows: int) -> None:
    """Array ``arr``: every chunk the same highly compressible block, stored by hand."""
    new_group(store)
    add_array(store, "arr", "blosc-lz4", rows)
    block = np.tile(np.arange(COLUMNS, dtype="<f4"), (CHUNK_ROWS, 1))
    encoded = CODECS["blosc-lz4"]().encode(block)
    for c in range(rows // CHUNK_ROWS):
        (store / "arr" / f"{c}.0").write_bytes(encoded)
    z = zarr.open_array(str(store / "arr"), mode="r")
    if not (np.array_equal(z[:1], block[:1]) and np.array_equal(z[-1:], block[-1:])):
        raise BenchError("memory: zarr-python reads other values than were stored")


def memory(b: Bench) -> list[Result]:
    rows = 4 * b.rows
    store = b.work / "memory.zarr"
    write_repeated_chunks(store, rows)
    size_mb = rows * COLUMNS * 4 / MiB
    limit = MEMORY_CACHE_MB + MEMORY_SLACK_MB
    print(f"  dd of a {size_mb:.0f} MiB array with --cache-size {MEMORY_CACHE_MB}M")
    with b.mount(store, "--cache-size", f"{MEMORY_CACHE_MB}M") as m:
        pid = daemon_pid(m)
        before = peak_rss_mb(pid)
        elapsed = dd(m, m / "arr" / "array.raw", "/dev/null")
        peak = peak_rss_mb(pid)
    print(
        f"  daemon pid {pid}: VmHWM {before:.0f} MiB after mounting, {peak:.0f} MiB after "
        f"reading ({size_mb / elapsed:.0f} MiB/s)"
    )
    return [below("memory peak RSS", peak, "MiB", limit)]


def write_metadata_group(store: Path, count: int) -> None:
    """A group of ``count`` small arrays with no chunks, then consolidated metadata.

    zarr-python creates the first array; the others are copies of its ``.zarray``
    (writing the JSON directly is far faster than creating 10 000 arrays).
    """
    new_group(store)
    add_array(store, "a00000", "blosc-lz4", CHUNK_ROWS)
    zarray = (store / "a00000" / ".zarray").read_text()
    for i in range(count):
        directory = store / f"a{i:05d}"
        directory.mkdir(exist_ok=True)
        (directory / ".zarray").write_text(zarray)
        (directory / ".zattrs").write_text(json.dumps({"index": i}))
    zarr.consolidate_metadata(str(store))


def stat_everything(root: Path) -> int:
    """os.stat every file under ``root``; how many."""
    count = 0
    for directory, _, files in os.walk(root):
        for name in files:
            os.stat(os.path.join(directory, name))
            count += 1
    return count


def metadata(b: Bench) -> list[Result]:
    store = b.work / "metadata.zarr"
    start = time.perf_counter()
    write_metadata_group(store, METADATA_ARRAYS)
    print(
        f"  {METADATA_ARRAYS} arrays created and consolidated in "
        f"{time.perf_counter() - start:.1f} s (untimed)"
    )
    warm(store)
    start = time.perf_counter()
    # Read-only, as the ceiling's tree (a read-write mount also walks the store for
    # an earlier run's temporary files, paced, from 5 s after mounting).
    with b.mount(store, "--read-only") as m:
        mounted_at = time.perf_counter()
        ls = subprocess.run(["ls", "-R", str(m.path)], capture_output=True, text=True)
        listed_at = time.perf_counter()
        if ls.returncode:
            raise BenchError(f"ls -R failed: {ls.stderr.strip()}\n{log_tail(m.log())}")
        files = stat_everything(m.path)
        elapsed = time.perf_counter() - start
        # Names and attributes are cached by the kernel (entry and attribute timeouts),
        # directory listings are not (pyfuse3 cannot ask for FOPEN_CACHE_DIR).
        again = time.perf_counter()
        subprocess.run(["ls", "-R", str(m.path)], capture_output=True, check=True)
        again = time.perf_counter() - again
    print(
        f"  mount (process start to mounted) {mounted_at - start:.2f} s"
        f" + ls -R {listed_at - mounted_at:.2f} s "
        f"({len(ls.stdout.splitlines())} lines) + stat of {files} files "
        f"{elapsed - (listed_at - start):.2f} s; a second ls -R {again:.2f} s"
    )
    if files < 4 * METADATA_ARRAYS:
        raise BenchError(f"metadata: {files} files under the mount, expected >= 4 per array")
    per_array = files // METADATA_ARRAYS
    start = time.perf_counter()
    with treefs_mounted(METADATA_ARRAYS, per_array, b.work) as tree:
        ceiling_mounted = time.perf_counter()
        subprocess.run(["ls", "-R", str(tree)], capture_output=True, check=True)
        stat_everything(tree)
        ceiling = time.perf_counter() - start
    print(
        f"  ceiling: scripts/memfs.py --tree ({METADATA_ARRAYS} directories of {per_array}"
        f" files from memory): mount {ceiling_mounted - start:.2f} s, all {ceiling:.2f} s"
    )
    return [
        below("metadata mount+ls+stat", elapsed, "s", 2.0, strict=False),
        # No target of its own: the ceiling shows how much of the time is pyfuse3's.
        # lower is better here: the ratio is the ceiling's time over ours
        Result(
            "metadata vs memory ceiling",
            fmt(elapsed, "s"),
            fmt(ceiling, "s"),
            ceiling / elapsed,
            "(reference)",
            True,
        ),
    ]


def readers(b: Bench) -> list[Result]:
    data = b.data()
    rows = b.rows // READERS
    store = b.work / "readers.zarr"
    new_group(store)
    for k in range(READERS):
        add_array(store, f"a{k}", "blosc-lz4", rows)[...] = data[k * rows : (k + 1) * rows]
    warm(store)
    mb = rows * COLUMNS * 4 / MiB
    print(f"  {READERS} dd of different {mb:.0f} MiB arrays at once vs one alone (fresh mounts)")
    with b.mount(store) as m:
        single = mb / dd(m, m / "a0" / "array.raw", "/dev/null")
    with b.mount(store) as m:
        times, wall = dd_concurrently(m, [m / f"a{k}" / "array.raw" for k in range(READERS)])
    rates = [mb / t for t in times]
    print("  each reader: " + ", ".join(f"{r:.1f}" for r in rates) + " MiB/s")
    return [
        versus("readers aggregate", READERS * mb / wall, single, "MiB/s", 0.9),
        versus("readers slowest/fastest", min(rates), max(rates), "MiB/s", 0.5),
    ]


def encode_bound(codec: str, data: np.ndarray) -> float:
    """MiB/s of encoding alone: every core running the codec on chunks of ``data`` (up
    to 256 of them, spread over the whole array, as speed depends on the values),
    with nothing else to do: what both sides approach when encoding bounds them
    (measured minutes apart on a noisy machine, so either may exceed it)."""
    starts = range(0, len(data), CHUNK_ROWS)
    step = max(1, len(starts) // 256)
    chunks = [data[r : r + CHUNK_ROWS] for r in starts[::step]]
    compressor = CODECS[codec]()
    threads = os.cpu_count() or 1

    def encode(part: list[np.ndarray]) -> None:
        for chunk in part:
            compressor.encode(chunk)

    workers = [threading.Thread(target=encode, args=(chunks[i::threads],)) for i in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sum(c.nbytes for c in chunks) / MiB / (time.perf_counter() - start)


def write_seq_codec(b: Bench, codec: str, source: Path, data: np.ndarray) -> Result:
    initial = make_data(b.rows, offset=1.0)
    fs_store, zp_store = b.work / f"{codec}-zarrfs.zarr", b.work / f"{codec}-zarr.zarr"
    create_array(fs_store, b.rows, codec, initial)
    create_array(zp_store, b.rows, codec, initial)
    del initial
    with b.mount(fs_store) as m:
        # Both sides start with nothing dirty in the page cache (untimed): else the
        # side that runs first shares the disk and the journal with the write-back
        # of the stores and the source file just created.
        os.sync()
        fs_time = dd(m, source, m / "arr" / "array.raw", "conv=notrunc,fsync")
    check_store(fs_store, data, "zarrfs rewrite")
    z = zarr.open_array(str(zp_store / "arr"), mode="r+")
    os.sync()
    start = time.perf_counter()
    z[:] = data
    zp_time = time.perf_counter() - start
    start = time.perf_counter()
    os.sync()
    print(
        f"  {codec}: zarr-python's os.sync() after z[:] = data: {time.perf_counter() - start:.2f} s"
    )
    check_store(zp_store, data, "zarr-python rewrite")
    shutil.rmtree(fs_store)
    shutil.rmtree(zp_store)
    mb = data.nbytes / MiB
    print(
        f"  {codec}: encoding alone on {os.cpu_count()} cores, measured after both: "
        f"{encode_bound(codec, data):.1f} MiB/s; zarrfs {mb / fs_time:.1f}, "
        f"zarr-python {mb / zp_time:.1f}"
    )
    return versus(f"write-seq {codec}", mb / fs_time, mb / zp_time, "MiB/s", 1.0)


def write_seq(b: Bench) -> list[Result]:
    data = make_data(b.rows)
    print(
        f"  rewrite float32 {data.shape} = {data.nbytes / MiB:.0f} MiB: dd bs=1M "
        "conv=notrunc,fsync on a mount vs z[:] = data (both arrays filled before)"
    )
    source = b.work / "source.raw"
    data.tofile(source)
    try:
        return [write_seq_codec(b, codec, source, data) for codec in CODECS]
    finally:
        source.unlink()


def pwrite_all(m: Mounted, size: int, offsets: list[int], payloads: np.ndarray) -> float:
    """Random pwrites into ``arr`` after reading it once; the seconds of the pwrite loop."""
    fd = os.open(m / "arr" / "array.raw", os.O_RDWR)
    try:
        for offset in range(0, size, MiB):  # hot: every chunk decoded and cached once
            os.pread(fd, MiB, offset)
        start = time.perf_counter()
        for offset, payload in zip(offsets, payloads):
            os.pwrite(fd, payload.data, offset)
        elapsed = time.perf_counter() - start
        start = time.perf_counter()
        os.fsync(fd)
        print(f"  then fsync: {time.perf_counter() - start:.2f} s (untimed)")
    except OSError as e:
        raise BenchError(
            f"random writes through the mount failed: {e}\n  Does this zarrfs support "
            f"writes? Last lines of its log:\n{log_tail(m.log())}"
        ) from e
    finally:
        os.close(fd)
    return elapsed


def write_random(b: Bench) -> list[Result]:
    expected = make_data(b.hot_rows, offset=2.0)
    store = b.work / "write-hot.zarr"
    create_array(store, b.hot_rows, "blosc-lz4", expected)
    raw = expected.reshape(-1).view(np.uint8)
    count = b.random_ops
    rng = np.random.default_rng(1)
    offsets = (rng.integers(0, raw.size // PAGE, count) * PAGE).tolist()
    payloads = rng.random((count, PAGE // 4), dtype=np.float32)
    print(f"  {count} random 4 KiB pwrites into a hot {raw.size / MiB:.0f} MiB array")
    with b.mount(store) as m:
        elapsed = pwrite_all(m, raw.size, offsets, payloads)
    for offset, payload in zip(offsets, payloads):
        raw[offset : offset + PAGE] = payload.view(np.uint8)
    got = np.asarray(zarr.open_array(str(store / "arr"), mode="r")[...])
    if not np.array_equal(got.view(np.uint8), expected.view(np.uint8)):
        raise BenchError("random writes: the store holds other bytes than were written")
    return [at_least("write-random", count / elapsed, "writes/s", 5_000)]


# -- sharded Zarr v3 -----------------------------------------------------------------------

SHARDED_COLUMNS = 8192  # a row is 32 KiB of float32
SHARDED_MAX_MB = 256  # 8192 x 8192
INNER = (512, 512)  # an inner chunk: 1 MiB of float32
SHARD = (2048, 2048)  # a shard: 4 x 4 = 16 inner chunks
SHARDED_CODEC = "blosc-lz4"
SHARDED_TARGETS = {"read": 1.5, "write": 1.0}


def sharded_data(rows: int, offset: float = 0.0, noise: float = 0.0) -> np.ndarray:
    """``make_data`` laid out ``SHARDED_COLUMNS`` wide: (rows, 8192) float32."""
    per_row = SHARDED_COLUMNS // COLUMNS
    return make_data(rows * per_row, offset, noise).reshape(rows, SHARDED_COLUMNS)


def create_sharded(store: Path, initial: np.ndarray) -> None:
    """A v3 group holding the sharded array ``arr``, filled with ``initial`` by
    zarr-python (blosc-lz4 like the v2 sections' CODECS, here as a v3 codec)."""
    zarr.open_group(str(store), mode="w", zarr_format=3)
    z = zarr.create_array(
        store=str(store / "arr"),
        shape=initial.shape,
        chunks=INNER,
        shards=SHARD,
        dtype="<f4",
        zarr_format=3,
        compressors=blosc_lz4_v3(),
        fill_value=0.0,
    )
    z[...] = initial


def blosc_lz4_v3() -> zarr.codecs.BloscCodec:
    """CODECS["blosc-lz4"] as a Zarr v3 codec."""
    return zarr.codecs.BloscCodec(
        cname="lz4", clevel=5, shuffle=zarr.codecs.BloscShuffle.shuffle, typesize=4
    )


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def tensorstore_read(store: Path, driver: str = "zarr3") -> tuple[np.ndarray, float]:
    """The whole array ``arr`` read by tensorstore (opened fresh, no cache pool: its
    default; ``driver``: zarr3, or zarr for Zarr v2), and the seconds of the read alone."""
    try:
        import tensorstore
    except ImportError as e:
        raise BenchError(
            "tensorstore is not installed (it is in the test extra: scripts/install.sh)"
        ) from e
    spec = {"driver": driver, "kvstore": {"driver": "file", "path": str(store / "arr")}}
    array = tensorstore.open(spec, open=True, read=True).result()
    start = time.perf_counter()
    out = array.read().result()
    return out, time.perf_counter() - start


def sharded_raw(m: Mounted, what: str) -> Path:
    """array.raw of ``arr`` under the mount; a clear error when zarrfs shows none."""
    raw = m / "arr" / "array.raw"
    if not raw.is_file():
        try:
            shown = sorted(p.name for p in (m / "arr").iterdir())
        except OSError as e:
            shown = [f"(cannot list: {e})"]
        raise BenchError(
            f"{what}: the mount shows no arr/array.raw for the sharded array (shows "
            f"{shown}): does this zarrfs support sharded Zarr v3 arrays? Last lines of "
            f"its log:\n{log_tail(m.log())}"
        )
    return raw


def check_sharded_store(store: Path, data: np.ndarray, what: str) -> None:
    """The whole array, as zarr-python and as tensorstore read it, is ``data`` (bitwise)."""
    if not same_bits(np.asarray(zarr.open_array(str(store / "arr"), mode="r")[:]), data):
        raise BenchError(f"{what}: zarr-python reads other values than were written")
    if not same_bits(tensorstore_read(store)[0], data):
        raise BenchError(f"{what}: tensorstore reads other values than were written")


def sharded_read(b: Bench, data: np.ndarray, failures: list[str]) -> list[Result]:
    mb = data.nbytes / MiB
    store = b.work / "sharded-read.zarr"
    create_sharded(store, data)
    warm(store)
    z = zarr.open_array(str(store / "arr"), mode="r")
    start = time.perf_counter()
    out = z[:]
    zp_rate = mb / (time.perf_counter() - start)
    if not same_bits(out, data):
        raise BenchError("sharded read: zarr-python read other values than were stored")
    del out
    ts_rate = None
    try:
        out, ts_time = tensorstore_read(store)
        if not same_bits(out, data):
            raise BenchError("sharded read: tensorstore read other values than were stored")
        del out
        ts_rate = mb / ts_time
    except BenchError as e:
        failures.append(str(e))
    ts_text = f"{ts_rate:.1f} MiB/s" if ts_rate is not None else "failed"
    print(f"  read: zarr-python z[:] {zp_rate:.1f} MiB/s; tensorstore read {ts_text}")
    try:
        with b.mount(store) as m:
            raw = sharded_raw(m, "sharded read")
            fs_rate = mb / dd(m, raw, "/dev/null")
            check_file(raw, data, "sharded read")
    except (BenchError, AssertionError, OSError) as e:  # AssertionError: mounting
        failures.append(f"zarrfs read: {e}")
        return []
    finally:
        shutil.rmtree(store)
    results = [versus("sharded read-seq", fs_rate, zp_rate, "MiB/s", SHARDED_TARGETS["read"])]
    if ts_rate is not None:  # no target of its own
        results.append(reference("sharded read-seq vs tensorstore", fs_rate, ts_rate, "MiB/s"))
    return results


def sharded_write(b: Bench, data: np.ndarray, failures: list[str]) -> list[Result]:
    mb = data.nbytes / MiB
    initial = sharded_data(data.shape[0], offset=1.0)
    fs_store, zp_store = b.work / "sharded-zarrfs.zarr", b.work / "sharded-zarr.zarr"
    create_sharded(fs_store, initial)
    create_sharded(zp_store, initial)
    del initial
    source = b.work / "sharded-source.raw"
    data.tofile(source)
    fs_rate = None
    try:
        with b.mount(fs_store) as m:
            raw = sharded_raw(m, "sharded rewrite")
            os.sync()  # nothing dirty in the page cache, untimed (as write-seq)
            fs_rate = mb / dd(m, source, raw, "conv=notrunc,fsync")
        check_sharded_store(fs_store, data, "zarrfs sharded rewrite")
    except (BenchError, AssertionError, OSError) as e:
        failures.append(f"zarrfs rewrite: {e}")
    finally:
        source.unlink()
        shutil.rmtree(fs_store)
    z = zarr.open_array(str(zp_store / "arr"), mode="r+")
    os.sync()
    start = time.perf_counter()
    z[:] = data
    zp_rate = mb / (time.perf_counter() - start)
    start = time.perf_counter()
    os.sync()
    synced = time.perf_counter() - start
    fs_text = f"{fs_rate:.1f} MiB/s" if fs_rate is not None else "failed"
    print(
        f"  rewrite: zarrfs dd {fs_text}; zarr-python z[:] = data {zp_rate:.1f} MiB/s "
        f"(then os.sync() {synced:.2f} s, untimed)"
    )
    try:
        check_sharded_store(zp_store, data, "zarr-python sharded rewrite")
    finally:
        shutil.rmtree(zp_store)
    if fs_rate is None:
        return []
    return [versus("sharded write-seq", fs_rate, zp_rate, "MiB/s", SHARDED_TARGETS["write"])]


def sharded(b: Bench) -> list[Result]:
    rows = min(b.size_mb, SHARDED_MAX_MB) * MiB // (SHARDED_COLUMNS * 4)
    data = sharded_data(rows, noise=0.01)
    print(
        f"  v3 float32 {data.shape} = {data.nbytes / MiB:.0f} MiB, inner chunks {INNER}, "
        f"shards {SHARD}, {SHARDED_CODEC}: dd bs=1M on a fresh mount vs z[:], then the "
        "rewrite dd conv=notrunc,fsync vs z[:] = data"
    )
    failures: list[str] = []
    results = sharded_read(b, data, failures)
    results += sharded_write(b, data, failures)
    if failures:
        raise BenchError("\n  ".join(failures), results)
    return results


# -- S3 (servers on loopback: scripts/s3_server.py and moto) -----------------------------

S3_MIN_MB, S3_MAX_MB = 128, 256
S3_BUCKET = "zarrfs-bench"
S3_DELAY = 0.02  # seconds the proxy adds to every request
S3_METADATA_ARRAYS = 1000
S3_TARGETS = {"read": 1.0, "delayed": 0.7, "metadata GETs": 1}
S3_UPLOADERS = 8
S3_ROUNDS = 5  # of the read-seq comparison on scripts/s3_server.py, alternating
S3_MOTO_ROUNDS = 1  # of the same comparison on moto (a reference)
S3_CEILING_THREADS = (8, 32)  # obstore GETs in flight, for the server's ceiling
S3_SERVER = REPO / "scripts" / "s3_server.py"
S3_SERVER_STARTUP = 10.0  # seconds it may take to listen
# A request line of the werkzeug log moto writes: "GET /bucket/key?query HTTP/1.1" 200
# (other statuses than 200 in color: ANSI escapes, dropped first).
_MOTO_REQUEST = re.compile(r'"([A-Z]+) (\S+) HTTP/[\d.]+" (\d{3})')
_ANSI = re.compile(r"\x1b\[[\d;]*m")


@dataclass
class S3Server:
    endpoint: str
    log: Path
    client: Any  # boto3's S3 client

    def upload(self, store: Path, prefix: str) -> int:
        """Every file under the local ``store`` as ``prefix/<relative path>``; bytes sent."""
        files = [p for p in store.rglob("*") if p.is_file()]

        def put(path: Path) -> int:
            body = path.read_bytes()
            key = f"{prefix}/{path.relative_to(store).as_posix()}"
            self.client.put_object(Bucket=S3_BUCKET, Key=key, Body=body)
            return len(body)

        with ThreadPoolExecutor(S3_UPLOADERS) as pool:
            return sum(pool.map(put, files))

    def requests_since(self, offset: int) -> list[tuple[str, str, str]]:
        """(method, path, status) of each request moto logged past byte ``offset``."""
        time.sleep(0.3)  # moto logs a request once it has answered it
        with self.log.open("rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
        return [m.groups() for m in _MOTO_REQUEST.finditer(_ANSI.sub("", text))]


@contextmanager
def s3_server(work: Path) -> Iterator[S3Server]:
    """A moto server on 127.0.0.1 (tests/support/servers.py's), a bucket, and the AWS_*
    environment of this process (so of the zarrfs daemons it starts) pointed at it
    with the keys "testing"; all undone at the end."""
    import pytest  # tests/support/servers.py is a pytest plugin: its failures are pytest's

    from tests.support.servers import _start_moto, _stop, client, isolate_aws

    log = work / "moto.log"
    try:
        process, endpoint = _start_moto(log)
    except pytest.fail.Exception as e:
        raise BenchError(f"s3: {e}") from None
    try:
        with pytest.MonkeyPatch.context() as env:
            isolate_aws(env, work, endpoint)
            s3 = client(endpoint)
            s3.create_bucket(Bucket=S3_BUCKET)
            yield S3Server(endpoint, log, s3)
    finally:
        _stop(process)


@contextmanager
def fast_s3_server(root: Path, work: Path) -> Iterator[tuple[str, int]]:
    """scripts/s3_server.py serving the directory ``root`` as bucket S3_BUCKET on a
    free port of 127.0.0.1 (a worker process per CPU): its endpoint URL, and its
    process group (for its CPU time). It runs in a process group of its own, killed
    at the end by the server's PID, errors or not."""
    log = work / "s3_server.log"
    with log.open("ab") as err:
        process = subprocess.Popen(
            [sys.executable, str(S3_SERVER), str(root), "--bucket", S3_BUCKET],
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        assert process.stdout is not None
        # The server prints its URL once it listens, and nothing more.
        ready, _, _ = select.select([process.stdout], [], [], S3_SERVER_STARTUP)
        endpoint = process.stdout.readline().decode().strip() if ready else ""
        if not endpoint.startswith("http://127.0.0.1:"):
            tail = log.read_text(errors="replace")[-2000:]
            raise BenchError(f"s3: {S3_SERVER.name} did not come up; its log ends:\n{tail}")
        yield endpoint, process.pid
    finally:
        # The group is that of our child, which is not waited for yet: its PID (so
        # the group's id) cannot have been reused.
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(10)
        except ProcessLookupError:
            process.wait()
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


@contextmanager
def s3_endpoint(endpoint: str) -> Iterator[None]:
    """AWS_ENDPOINT_URL set to ``endpoint`` for what starts inside (a daemon)."""
    old = os.environ["AWS_ENDPOINT_URL"]
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    try:
        yield
    finally:
        os.environ["AWS_ENDPOINT_URL"] = old


def obstore_bucket(prefix: str) -> Any:
    """obstore's S3Store of the bucket, configured by the environment as zarrfs's is."""
    from obstore.store import S3Store

    return S3Store(S3_BUCKET, prefix=prefix, client_options={"allow_http": True})


def consolidate_v3(store: Path) -> None:
    """zarr.consolidate_metadata, without its warning that v3 consolidated metadata is
    not in the spec yet (zarrfs reads it all the same)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", zarr.errors.ZarrUserWarning)
        zarr.consolidate_metadata(str(store))


def create_s3_store(store: Path, data: np.ndarray) -> None:
    """A v3 group holding array ``arr`` (chunks of 1 MiB, blosc-lz4), consolidated."""
    zarr.open_group(str(store), mode="w", zarr_format=3)
    z = zarr.create_array(
        store=str(store / "arr"),
        shape=data.shape,
        chunks=(CHUNK_ROWS, COLUMNS),
        dtype="<f4",
        zarr_format=3,
        compressors=blosc_lz4_v3(),
        fill_value=0.0,
    )
    z[...] = data
    consolidate_v3(store)


def create_s3_metadata_group(store: Path, count: int) -> None:
    """A v3 group of ``count`` arrays with no chunks, consolidated: zarr-python creates
    the first, the others are copies of its zarr.json (as write_metadata_group)."""
    zarr.open_group(str(store), mode="w", zarr_format=3)
    zarr.create_array(
        store=str(store / "a0000"),
        shape=(CHUNK_ROWS, COLUMNS),
        chunks=(CHUNK_ROWS, COLUMNS),
        dtype="<f4",
        zarr_format=3,
        compressors=blosc_lz4_v3(),
        fill_value=0.0,
    )
    doc = json.loads((store / "a0000" / "zarr.json").read_text())
    for i in range(count):
        directory = store / f"a{i:04d}"
        directory.mkdir(exist_ok=True)
        (directory / "zarr.json").write_text(json.dumps({**doc, "attributes": {"index": i}}))
    consolidate_v3(store)


def obstore_ceiling(prefix: str, chunks: int, threads: int = 32) -> float:
    """Seconds for every chunk of ``arr`` fetched by obstore alone (``threads`` GETs in
    flight, nothing decoded): what the server can serve to one client."""
    import obstore

    bucket = obstore_bucket(prefix)
    keys = [f"arr/c/{c}/0" for c in range(chunks)]
    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        sizes = list(pool.map(lambda k: len(obstore.get(bucket, k).bytes()), keys))
    elapsed = time.perf_counter() - start
    if len(sizes) != chunks or not all(sizes):
        raise BenchError("s3: obstore fetched empty chunks")
    return elapsed


def zarr_python_s3_read(
    prefix: str, server: int | None = None
) -> tuple[np.ndarray, float, cpumeter.Usage]:
    """The whole array ``arr`` read by zarr-python 3 through zarr.storage.ObjectStore
    over obstore's S3Store (opened fresh), the seconds of ``z[:]`` alone, and where
    the CPU went meanwhile (``server``: the process group of the S3 server)."""
    store = zarr.storage.ObjectStore(obstore_bucket(prefix), read_only=True)
    z = zarr.open_array(store, path="arr", mode="r")
    meter = cpumeter.Meter(pgid=server)
    meter.start()
    start = time.perf_counter()
    out = z[:]
    elapsed = time.perf_counter() - start
    return out, elapsed, meter.stop()


def s3_dd(
    url: str, work: Path, data: np.ndarray, what: str, server: int | None = None
) -> tuple[float, cpumeter.Usage]:
    """Seconds of ``dd bs=1M`` of arr/array.raw on a fresh mount of ``url``, and where
    the CPU went meanwhile (``server``: the process group of the S3 server)."""
    with mounted(url, log_dir=work) as m:
        raw = m / "arr" / "array.raw"
        if not raw.is_file():
            raise BenchError(f"{what}: no arr/array.raw under the mount\n{log_tail(m.log())}")
        meter = cpumeter.Meter(pid=m.process.pid, pgid=server)
        meter.start()
        elapsed = dd(m, raw, "/dev/null")
        usage = meter.stop()
        check_file(raw, data, what)
    return elapsed, usage


@dataclass
class S3Reads:
    """The read-seq comparison on one server: each side's best round (MiB/s; zarrfs
    None where it failed), obstore's ceiling (MiB/s), and where the CPU went in each
    side's best round."""

    fs_rate: float | None
    zp_rate: float
    ceiling: float
    fs_cpu: cpumeter.Usage | None = None
    zp_cpu: cpumeter.Usage | None = None

    def bound(self) -> str:
        """What the CPU allows: the machine's busy seconds in zarr-python's best round
        over those in zarrfs's is the ratio the two reach when both keep the cores
        equally busy (on a machine shared with the server, each side's rate is
        bound by the CPU it and the server spend per byte)."""
        if self.fs_cpu is None or self.zp_cpu is None:
            return ""
        fs, zp = self.fs_cpu, self.zp_cpu
        return (
            f"CPU bound: the machine was busy {fs.busy:.2f} s for zarrfs's best round "
            f"(daemon {fs.watched:.2f}, dd {fs.children:.2f}, server {fs.server:.2f}) and "
            f"{zp.busy:.2f} s for zarr-python's (itself {zp.own:.2f}, server {zp.server:.2f}): "
            f"at equal use of the cores zarrfs reaches {zp.busy / fs.busy:.2f}x"
        )


def s3_read_comparison(
    b: Bench,
    server: str,
    url: str,
    data: np.ndarray,
    mb: int,
    compressed: int,
    rounds: int,
    failures: list[str],
    pgid: int | None = None,
) -> S3Reads:
    """obstore's ceiling, then ``rounds`` alternating rounds of zarr-python ``z[:]`` and
    zarrfs ``dd`` of ``url`` (s3://bucket/prefix), all from the server that
    AWS_ENDPOINT_URL names now (``server``: its name, for messages; ``pgid``: its
    process group, whose CPU time is shown beside each side's)."""
    prefix = url.removeprefix(f"s3://{S3_BUCKET}/")
    chunks = data.shape[0] // CHUNK_ROWS
    ceilings = {n: mb / obstore_ceiling(prefix, chunks, n) for n in S3_CEILING_THREADS}
    ceiling = max(ceilings.values())
    print(
        f"  obstore alone, {chunks} GETs: "
        + ", ".join(
            f"{n} at a time {rate:.1f} MiB/s (compressed {compressed / MiB / (mb / rate):.1f})"
            for n, rate in ceilings.items()
        )
    )
    # The two sides take turns (a server's rate drifts), and each one's best round counts.
    zp_rates: list[float] = []
    fs_rates: list[float] = []
    zp_usages: list[cpumeter.Usage] = []
    fs_usages: list[cpumeter.Usage] = []
    failed = False
    for n in range(rounds):
        out, zp_time, zp_cpu = zarr_python_s3_read(prefix, pgid)
        if not same_bits(out, data):
            raise BenchError(f"s3 read ({server}): zarr-python read other values than were stored")
        del out
        zp_rates.append(mb / zp_time)
        zp_usages.append(zp_cpu)
        fs_text, fs_cpu = "failed", None
        if not failed:
            try:
                fs_time, fs_cpu = s3_dd(url, b.work, data, f"s3 read ({server})", pgid)
                fs_rates.append(mb / fs_time)
                fs_usages.append(fs_cpu)
                fs_text = f"{fs_rates[-1]:.1f} MiB/s"
            except (BenchError, AssertionError, OSError) as e:  # AssertionError: mounting
                failures.append(f"zarrfs read ({server}): {e}")
                failed = True
        print(f"  round {n + 1}: zarr-python z[:] {zp_rates[-1]:.1f} MiB/s; zarrfs dd {fs_text}")
        print(f"    zarr-python {zp_cpu.describe('zarr-python', None, None)}")
        if fs_cpu is not None:
            print(f"    zarrfs {fs_cpu.describe(None, 'daemon', 'dd')}")
    if failed:
        return S3Reads(None, max(zp_rates), ceiling)
    best_fs = fs_rates.index(max(fs_rates))
    best_zp = zp_rates.index(max(zp_rates))
    return S3Reads(
        fs_rates[best_fs], zp_rates[best_zp], ceiling, fs_usages[best_fs], zp_usages[best_zp]
    )


def s3_read(b: Bench, server: S3Server, failures: list[str], results: list[Result]) -> None:
    """The read-seq comparisons on scripts/s3_server.py then on moto, and the read
    through the fault proxy (in front of moto); figures are added to ``results`` as
    they come, so that a failure later keeps them."""
    from tests.support.fault_proxy import FaultProxy

    mb = min(max(b.size_mb, S3_MIN_MB), S3_MAX_MB)
    data = make_data(mb * MiB // (COLUMNS * 4), noise=0.01)
    prefix = "read.zarr"
    url = f"s3://{S3_BUCKET}/{prefix}"
    # The bucket's directory for scripts/s3_server.py; the same files go to moto.
    root = b.work / "s3-bucket"
    store = root / prefix
    try:
        create_s3_store(store, data)
        compressed = sum(p.stat().st_size for p in store.rglob("*") if p.is_file())
        print(
            f"  v3 float32 {data.shape} = {mb} MiB, chunks ({CHUNK_ROWS}, {COLUMNS}), "
            f"blosc-lz4: {compressed / MiB:.0f} MiB of objects"
        )
        with fast_s3_server(root, b.work) as (endpoint, pgid), s3_endpoint(endpoint):
            print(
                f"  {S3_SERVER.name} at {endpoint} ({os.cpu_count()} worker processes), "
                "serving the store's directory:"
            )
            fast = s3_read_comparison(
                b, S3_SERVER.name, url, data, mb, compressed, S3_ROUNDS, failures, pgid
            )
        if fast.fs_rate is not None:
            results.append(
                versus("s3 read-seq", fast.fs_rate, fast.zp_rate, "MiB/s", S3_TARGETS["read"])
            )
            print(f"  {fast.bound()}")
            results.append(
                reference("s3 read-seq vs obstore GETs alone", fast.fs_rate, fast.ceiling, "MiB/s")
            )
        start = time.perf_counter()
        sent = server.upload(store, prefix)
        print(
            f"  moto at {server.endpoint}: {sent / MiB:.0f} MiB uploaded in "
            f"{time.perf_counter() - start:.1f} s (untimed)"
        )
        moto = s3_read_comparison(b, "moto", url, data, mb, compressed, S3_MOTO_ROUNDS, failures)
        if moto.fs_rate is not None:
            results.append(reference("s3 read-seq on moto", moto.fs_rate, moto.zp_rate, "MiB/s"))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    fs_rate = moto.fs_rate
    host, port = server.endpoint.removeprefix("http://").split(":")
    proxy = FaultProxy((host, int(port)), http=True)
    try:
        rates = {}
        with s3_endpoint(proxy.url.rstrip("/")):
            for delay in (0.0, S3_DELAY):
                proxy.delay = delay
                before = proxy.requests
                seconds, _ = s3_dd(url, b.work, data, f"s3 read, {delay * 1000:.0f} ms")
                rates[delay] = mb / seconds
                print(
                    f"  moto through the proxy, {delay * 1000:.0f} ms per request: "
                    f"{rates[delay]:.1f} MiB/s ({proxy.requests - before} requests)"
                )
        direct = f", {rates[S3_DELAY] / fs_rate:.2f}x of the direct read" if fs_rate else ""
        print(f"  delayed: {rates[S3_DELAY] / rates[0.0]:.2f}x of the proxied read{direct}")
        results.append(
            versus(
                f"s3 read-seq {S3_DELAY * 1000:.0f} ms/request vs 0 ms",
                rates[S3_DELAY],
                rates[0.0],
                "MiB/s",
                S3_TARGETS["delayed"],
            )
        )
    except (BenchError, AssertionError, OSError) as e:
        failures.append(f"zarrfs read through the proxy: {e}")
    finally:
        proxy.stop()


def s3_metadata(b: Bench, server: S3Server) -> list[Result]:
    prefix = "metadata.zarr"
    store = b.work / "s3-metadata.zarr"
    create_s3_metadata_group(store, S3_METADATA_ARRAYS)
    server.upload(store, prefix)
    shutil.rmtree(store)
    offset = server.log.stat().st_size
    start = time.perf_counter()
    with mounted(f"s3://{S3_BUCKET}/{prefix}", log_dir=b.work) as m:
        mounted_at = time.perf_counter()
        ls = subprocess.run(["ls", "-R", str(m.path)], capture_output=True, text=True)
        listed_at = time.perf_counter()
        if ls.returncode:
            raise BenchError(f"ls -R failed: {ls.stderr.strip()}\n{log_tail(m.log())}")
        arrays = sum(1 for line in ls.stdout.splitlines() if line.endswith("array.raw"))
        with open(m / "a0000" / "array.raw", "rb") as f:  # the first chunk read
            f.read(PAGE)
    if arrays != S3_METADATA_ARRAYS:
        raise BenchError(f"s3 metadata: ls -R shows {arrays} array.raw, not {S3_METADATA_ARRAYS}")
    requests = server.requests_since(offset)
    chunk = re.compile(rf"^/{S3_BUCKET}/{prefix}/a\d+/c/")
    first = next((n for n, (_, path, _) in enumerate(requests) if chunk.match(path)), None)
    if first is None:
        raise BenchError(f"s3 metadata: moto logged no chunk request: {requests}")
    before = requests[:first]
    gets = [path for method, path, _ in before if method == "GET" and "?" not in path]
    print(
        f"  {S3_METADATA_ARRAYS} arrays: mount (process start to mounted) "
        f"{mounted_at - start:.2f} s + ls -R {listed_at - mounted_at:.2f} s; "
        f"{len(before)} requests before the first chunk read: "
        + ", ".join(f"{method} {path} {status}" for method, path, status in before)
    )
    return [
        Result(
            "s3 metadata GETs (mount+ls -R)",
            f"{len(gets)} GET, {len(before)} requests",
            "-",
            None,
            f"<= {S3_TARGETS['metadata GETs']} GET",
            len(gets) <= S3_TARGETS["metadata GETs"],
        )
    ]


def layouts(b: Bench) -> list[Result]:
    """Rows, tiles and v3 shards vs zarr-python and tensorstore: scripts/bench_layouts.py."""
    import bench_layouts  # imports from this module, so imported once this one is complete

    return bench_layouts.layouts(b)


def s3(b: Bench) -> list[Result]:
    failures: list[str] = []
    results: list[Result] = []
    with s3_server(b.work) as server:
        print(f"  moto S3 server at {server.endpoint}, bucket {S3_BUCKET}")
        try:
            s3_read(b, server, failures, results)
        except (BenchError, AssertionError, OSError) as e:
            failures.append(str(e))
        try:
            results += s3_metadata(b, server)
        except (BenchError, AssertionError, OSError) as e:
            failures.append(str(e))
    if failures:
        raise BenchError("\n  ".join(failures), results)
    return results


SECTIONS: dict[str, Callable[[Bench], list[Result]]] = {
    "read-seq": read_seq,
    "read-npy": read_npy,
    "read-random": read_random,
    "memory": memory,
    "metadata": metadata,
    "readers": readers,
    "write-seq": write_seq,
    "write-random": write_random,
    "sharded": sharded,
    "layouts": layouts,
    "s3": s3,
}


# -- main -------------------------------------------------------------------------------


def run(bench: Bench, names: list[str]) -> tuple[list[Result], dict[str, str]]:
    results: list[Result] = []
    errors: dict[str, str] = {}
    for name in names:
        print(f"\n{name}")
        try:
            section = SECTIONS[name](bench)
        except (BenchError, AssertionError, OSError) as e:  # AssertionError: mounting
            errors[name] = str(e)
            print(f"  ERROR: {e}", file=sys.stderr)
            section = e.results if isinstance(e, BenchError) else []
            for r in section:
                print_result(r)
            results += section
            continue
        for r in section:
            print_result(r)
        results += section
    return results, errors


def check_tools() -> str | None:
    for tool in ("dd", "ls", "fusermount3"):
        if shutil.which(tool) is None:
            return f"{tool} not found"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse does not exist"
    return None


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="array size (default 1024)")
    parser.add_argument("--only", default=None, help="comma list of: " + ",".join(SECTIONS))
    parser.add_argument(
        "--random-ops",
        type=int,
        default=20000,
        help="random 4 KiB reads and writes (default 20000)",
    )
    parser.add_argument(
        "--tmp-dir",
        type=Path,
        default=Path("/var/tmp"),
        help="where the stores go, on disk (default /var/tmp)",
    )
    args = parser.parse_args()
    if args.size_mb < READERS or args.random_ops < 1:
        parser.error(f"--size-mb must be >= {READERS}, --random-ops >= 1")
    names = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else []
    names = names or list(SECTIONS)
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; known: {', '.join(SECTIONS)}")
    if not args.tmp_dir.is_dir():
        parser.error(f"--tmp-dir {args.tmp_dir} is not a directory")
    args.sections = names
    return args


def main() -> int:
    args = parse_args()
    problem = check_tools()
    if problem:
        print(f"bench: error: {problem}", file=sys.stderr)
        return 2
    try:
        work = Path(tempfile.mkdtemp(prefix="zarrfs-bench-", dir=args.tmp_dir))
    except OSError as e:
        print(f"bench: error: cannot create a directory in {args.tmp_dir}: {e}", file=sys.stderr)
        return 2
    print(
        f"stores under {work}; reads see the compressed store files warm in the OS page "
        "cache (each store is read once beforehand: dropping caches is not portable)"
    )
    try:
        results, errors = run(Bench(work, args.size_mb, args.random_ops), args.sections)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_table(results, errors)
    if errors:
        print("\nsome sections could not run: " + ", ".join(errors))
        return 2
    missed = [r.section for r in results if not r.passed]
    print("\nall targets met" if not missed else "\nMISSED: " + ", ".join(missed))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
