"""Random 4 KiB reads and writes into a hot array (``--size-mb`` up to 64 MiB, v2 row
chunks, blosc-lz4), ``--random-ops`` of each.

- ``read-random``: preads on one fd (target >= 10 000 reads/s), vs the same reads
  from bench/memfs.py, a pyfuse3 filesystem serving the bytes from memory, opened
  with direct I/O as zarrfs opens them (target >= 0.6x: what FUSE alone allows).
- ``write-random``: pwrites after reading the array once (target >= 10 000 writes/s),
  the store checked to hold every byte written; beside it the daemon's CPU per
  write and the same pwrites into bench/writefs.py (what FUSE alone allows).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import zarr

from bench import cpumeter
from bench.context import Bench
from bench.data import PAGE, MiB, check_file, create_array, make_data, warm
from bench.mounting import Mounted, memfs_mounted
from bench.profiling import profiled
from bench.results import BenchError, Result, at_least, reference, versus
from bench.writefs import writefs_mounted

CACHE_MIN_MB = 256  # --cache-size of the read mount: this, or twice the array


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


def read_random(b: Bench) -> list[Result]:
    hot = b.data()[: b.hot_rows]
    store = b.work / "read-hot.zarr"
    create_array(store, b.hot_rows, "blosc-lz4", hot)
    warm(store)
    cache = f"{max(CACHE_MIN_MB, 2 * hot.nbytes // MiB)}M"
    count = b.random_ops
    print(
        f"  {count} random 4 KiB preads, one fd, into a hot {hot.nbytes / MiB:.0f} MiB "
        f"array (--cache-size {cache}) vs bench/memfs.py serving as many bytes from memory"
    )
    with b.mount(store, "--cache-size", cache) as m:
        fs_rate = count / random_reads(m / "arr" / "array.raw", hot.nbytes, count)
        check_file(m / "arr" / "array.raw", hot, "read-random")
    # The same access mode as zarrfs's read-only opens: direct I/O.
    with memfs_mounted(hot.nbytes, b.work, direct_io=True) as (path, log):
        ceiling = count / random_reads(path, hot.nbytes, count)
    served = log.read_text().strip() or "memfs printed nothing"
    print(f"  ({served}: the {count} timed preads + the warm-up read's requests)")
    bound = f"FUSE ceiling (direct_io, bench/memfs.py, the same preads) {ceiling:,.0f} reads/s"
    return [
        at_least("read-random", fs_rate, "reads/s", 10_000, bound),
        versus("read-random vs ceiling", fs_rate, ceiling, "reads/s", 0.6, bound),
    ]


def pwrites(fd: int, offsets: list[int], payloads: np.ndarray) -> float:
    start = time.perf_counter()
    for offset, payload in zip(offsets, payloads):
        os.pwrite(fd, payload.data, offset)
    return time.perf_counter() - start


def pwrite_all(
    m: Mounted, size: int, offsets: list[int], payloads: np.ndarray
) -> tuple[float, float]:
    """Random pwrites into ``arr`` after reading it once: the seconds of the pwrite
    loop, and the daemon's CPU seconds meanwhile."""
    fd = os.open(m / "arr" / "array.raw", os.O_RDWR)
    try:
        for offset in range(0, size, MiB):  # hot: every chunk decoded and cached once
            os.pread(fd, MiB, offset)
        with profiled(m.process.pid, "write-random"):
            meter = cpumeter.Meter(pid=m.process.pid)
            meter.start()
            elapsed = pwrites(fd, offsets, payloads)
            cpu = meter.stop().watched
        start = time.perf_counter()
        os.fsync(fd)
        print(f"  then fsync: {time.perf_counter() - start:.2f} s (untimed)")
    except OSError as e:
        raise BenchError(
            f"random writes through the mount failed: {e}\n  Does this zarrfs support "
            f"writes? Last lines of its log:\n{m.tail()}"
        ) from e
    finally:
        os.close(fd)
    return elapsed, cpu


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
        elapsed, cpu = pwrite_all(m, raw.size, offsets, payloads)
    with writefs_mounted(raw.size, b.work) as (path, _):
        fd = os.open(path, os.O_RDWR)
        try:
            ceiling = count / pwrites(fd, offsets, payloads)
        finally:
            os.close(fd)
    bound = (
        f"the daemon's CPU: {1e6 * cpu / count:.0f} us per write; FUSE ceiling "
        f"(bench/writefs.py, the same pwrites) {ceiling:,.0f} writes/s"
    )
    print(f"  {bound}")
    for offset, payload in zip(offsets, payloads):
        raw[offset : offset + PAGE] = payload.view(np.uint8)
    got = np.asarray(zarr.open_array(str(store / "arr"), mode="r")[...])
    if not np.array_equal(got.view(np.uint8), expected.view(np.uint8)):
        raise BenchError("random writes: the store holds other bytes than were written")
    return [
        at_least("write-random", count / elapsed, "writes/s", 10_000, bound),
        reference("write-random vs ceiling", count / elapsed, ceiling, "writes/s", "FUSE ceiling"),
    ]
