"""``write-seq``: the sequential rewrite of a whole array, rows and tiles.

``dd bs=1M conv=notrunc,fsync`` into array.raw vs zarr-python ``z[:] = data``
(target >= 1.0x), each side on its own copy of the same filled store and started
with nothing dirty in the page cache:

- rows: Zarr v2, chunks of 1 MiB each a run of array.raw (1024 columns), with
  blosc-lz4 and zlib-1;
- tiles: bench/layouts.py's tiles (chunks 256x1024 of a 16384-column array), with
  blosc-lz4; bench/sharded.py rewrites v3 shards alike.

zarrfs's time includes making every chunk durable (its fsync); zarr-python's
``os.sync()`` after the write is printed, untimed. Beside each case, the bounds:
the CPU seconds per MiB of each side (the daemon and dd; zarr-python's process),
the rate of encoding alone on every core, and the FUSE ceiling, bench/writefs.py
taking the same dd from memory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import zarr

from bench import cpumeter
from bench.context import Bench
from bench.data import CHUNK_ROWS, CODECS, COLUMNS, MiB, check_store, create_array, make_data
from bench.layouts import LAYOUT_COLUMNS, LAYOUTS, ROW_BLOCK, create_store
from bench.mounting import Mounted, dd, dd_command
from bench.profiling import profiled
from bench.results import BenchError, Result, versus
from bench.writefs import writefs_mounted

TARGET = 1.0  # zarrfs / zarr-python
CEILING_MAX_MB = 256  # the FUSE ceiling writes at most this much (held in memory)


def encode_bound(codec: str, data: np.ndarray) -> float:
    """MiB/s of encoding alone: every core running the codec on chunks of ``data`` (up
    to 256 of them, spread over the whole array, as speed depends on the values),
    with nothing else to do: what both sides approach when encoding bounds them
    (measured minutes apart on a noisy machine, so either may exceed it)."""
    data = data.reshape(-1, COLUMNS)
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


def zarrfs_rewrite(m: Mounted, source: Path) -> tuple[float, float]:
    """``dd conv=notrunc,fsync`` of ``source`` into arr/array.raw: (seconds, CPU
    seconds of the daemon and dd)."""
    os.sync()  # nothing dirty in the page cache (untimed), as for zarr-python
    with profiled(m.process.pid, f"rewrite {source.name}"):
        meter = cpumeter.Meter(pid=m.process.pid)
        meter.start()
        elapsed = dd(m, source, m / "arr" / "array.raw", "conv=notrunc,fsync")
        usage = meter.stop()
    return elapsed, usage.watched + usage.children


def zarr_python_rewrite(store: Path, data: np.ndarray, what: str) -> tuple[float, float]:
    """``z[:] = data`` into ``store``'s arr: (seconds, CPU seconds of this process);
    the ``os.sync()`` after it is printed, untimed."""
    z = zarr.open_array(str(store / "arr"), mode="r+")
    os.sync()
    meter = cpumeter.Meter()
    meter.start()
    start = time.perf_counter()
    z[:] = data
    elapsed = time.perf_counter() - start
    usage = meter.stop()
    start = time.perf_counter()
    os.sync()
    synced = time.perf_counter() - start
    print(f"  {what}: zarr-python's os.sync() after z[:] = data: {synced:.2f} s (untimed)")
    return elapsed, usage.own


def write_ceiling(b: Bench, source: Path) -> float:
    """MiB/s of the same ``dd conv=notrunc,fsync`` into bench/writefs.py (at most
    CEILING_MAX_MB of ``source``): what FUSE allows a pyfuse3 + trio daemon."""
    mb = min(source.stat().st_size // MiB, CEILING_MAX_MB)
    with writefs_mounted(mb * MiB, b.work) as (path, _):
        start = time.perf_counter()
        command = dd_command(source, path, f"count={mb}", "conv=notrunc,fsync")
        done = subprocess.run(command, capture_output=True, text=True)
        elapsed = time.perf_counter() - start
    if done.returncode:
        raise BenchError(f"dd into bench/writefs.py failed: {done.stderr.strip()}")
    return mb / elapsed


def rewrite_bound(
    mb: float, zarrfs: tuple[float, float], zp: tuple[float, float], ceiling: float
) -> str:
    """The measured bounds of a rewrite: each side's CPU per MiB and the FUSE ceiling."""
    (fs_time, fs_cpu), (zp_time, zp_cpu) = zarrfs, zp
    return (
        f"zarrfs {mb / fs_time:.1f} MiB/s, {1000 * fs_cpu / mb:.2f} ms CPU/MiB "
        f"(daemon + dd); zarr-python {mb / zp_time:.1f} MiB/s, {1000 * zp_cpu / mb:.2f} ms "
        f"CPU/MiB; FUSE ceiling (bench/writefs.py, same dd) {ceiling:.0f} MiB/s"
    )


def rewrite_case(
    b: Bench,
    what: str,
    create: Callable[[Path, np.ndarray], None],
    initial: np.ndarray,
    data: np.ndarray,
    check: Callable[[Path, str], None],
    source: Path,
    ceiling: float,
) -> Result:
    fs_store, zp_store = b.work / "rewrite-zarrfs.zarr", b.work / "rewrite-zarr.zarr"
    try:
        create(fs_store, initial)
        create(zp_store, initial)
        with b.mount(fs_store) as m:
            zarrfs = zarrfs_rewrite(m, source)
        check(fs_store, f"zarrfs {what} rewrite")
        zp = zarr_python_rewrite(zp_store, data, what)
        check(zp_store, f"zarr-python {what} rewrite")
    finally:
        shutil.rmtree(fs_store, ignore_errors=True)
        shutil.rmtree(zp_store, ignore_errors=True)
    mb = data.nbytes / MiB
    bound = rewrite_bound(mb, zarrfs, zp, ceiling)
    print(f"  {what}: {bound}")
    return versus(f"write-seq {what}", mb / zarrfs[0], mb / zp[0], "MiB/s", TARGET, bound)


def rows_case(b: Bench, codec: str, source: Path, data: np.ndarray, ceiling: float) -> Result:
    def create(store: Path, values: np.ndarray) -> None:
        create_array(store, b.rows, codec, values)

    def check(store: Path, what: str) -> None:
        check_store(store, data, what)

    initial = make_data(b.rows, offset=1.0)
    result = rewrite_case(b, f"rows {codec}", create, initial, data, check, source, ceiling)
    print(
        f"  rows {codec}: encoding alone on {os.cpu_count()} cores: "
        f"{encode_bound(codec, data):.1f} MiB/s"
    )
    return result


def tiles_case(b: Bench, ceiling: float) -> Result:
    """bench/layouts.py's tiles, blosc-lz4: ``--size-mb`` in whole rows of tiles."""
    layout = next(x for x in LAYOUTS if x.name == "tiles")
    per_row = LAYOUT_COLUMNS // COLUMNS
    rows = max(ROW_BLOCK, b.rows // per_row // ROW_BLOCK * ROW_BLOCK)
    data = make_data(rows * per_row, noise=0.01).reshape(rows, LAYOUT_COLUMNS)
    initial = make_data(rows * per_row, offset=1.0).reshape(rows, LAYOUT_COLUMNS)
    source = b.work / "tiles-source.raw"
    data.tofile(source)

    def create(store: Path, values: np.ndarray) -> None:
        create_store(store, layout, "blosc-lz4", values)

    def check(store: Path, what: str) -> None:
        got = np.asarray(zarr.open_array(str(store / "arr"), mode="r")[:])
        if not np.array_equal(got.view(np.uint32), data.view(np.uint32)):
            raise BenchError(f"{what}: the store holds other values than were written")

    try:
        return rewrite_case(b, "tiles blosc-lz4", create, initial, data, check, source, ceiling)
    finally:
        source.unlink()


def write_seq(b: Bench) -> list[Result]:
    data = make_data(b.rows)
    print(
        f"  rewrite float32 {data.shape} = {data.nbytes / MiB:.0f} MiB (rows; tiles 16384 "
        "wide): dd bs=1M conv=notrunc,fsync on a mount vs z[:] = data (both arrays filled "
        "before)"
    )
    source = b.work / "source.raw"
    data.tofile(source)
    try:
        ceiling = write_ceiling(b, source)
        results = [rows_case(b, codec, source, data, ceiling) for codec in CODECS]
    finally:
        source.unlink()
    del data
    results.append(tiles_case(b, ceiling))
    return results
