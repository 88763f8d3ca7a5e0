"""Sequential reads of v2 row chunks (1024 columns, chunks of 256 rows = 1 MiB).

- ``read-seq``: ``dd bs=1M`` of array.raw on a fresh mount vs zarr-python ``z[:]``,
  for blosc-lz4 (target >= 1.5x) and zlib-1 (target >= 1.0x).
- ``read-npy``: ``np.load(array.npy, mmap_mode="r").sum()`` on a fresh mount vs
  ``z[:].sum()`` (blosc-lz4; target >= 1.0x).
- ``readers``: 4 concurrent ``dd`` of 4 arrays (size/4 each) vs one alone:
  aggregate >= 0.9x, slowest reader >= 0.5x the fastest.
- ``memory``: ``dd`` of an array 4x ``--size-mb`` with ``--cache-size 256M``: the
  daemon's peak RSS (VmHWM) < 256 MiB + 150 MiB.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import zarr

from bench import cpumeter
from bench.ceilings import DIRECT_IO, MAPPED, read_bound
from bench.context import Bench
from bench.data import (
    CHUNK_ROWS,
    CODECS,
    COLUMNS,
    MiB,
    add_array,
    check_file,
    new_group,
    warm,
)
from bench.mounting import daemon_pid, dd, dd_concurrently, peak_rss_mb
from bench.profiling import profiled
from bench.reads import npy_sum, zarr_read, zarr_sum
from bench.results import BenchError, Result, below, cpu_per_mib, versus

READ_SEQ_TARGETS = {"blosc-lz4": 1.5, "zlib-1": 1.0}
READERS = 4
MEMORY_CACHE_MB = 256
MEMORY_SLACK_MB = 150


def read_seq(b: Bench) -> list[Result]:
    data = b.data()
    mb = data.nbytes / MiB
    print(f"  float32 {data.shape} = {mb:.0f} MiB; dd bs=1M on a fresh mount vs z[:]")
    results = []
    for codec, target in READ_SEQ_TARGETS.items():
        store = b.read_store(codec)
        warm(store)
        with b.mount(store) as m:
            with profiled(m.process.pid, f"read-seq {codec}"):
                meter = cpumeter.Meter()
                meter.start()
                fs_time = dd(m, m / "arr" / "array.raw", "/dev/null")
                fs_busy = meter.stop().busy
            check_file(m / "arr" / "array.raw", data, "read-seq")
        meter = cpumeter.Meter()
        meter.start()
        out, zp_time = zarr_read(store)
        zp_busy = meter.stop().busy
        if not np.array_equal(out, data):
            raise BenchError("read-seq: zarr-python read other values than were stored")
        del out
        bound = read_bound(b.work, data.nbytes, fs_busy, zp_busy, DIRECT_IO)
        results.append(
            versus(f"read-seq {codec}", mb / fs_time, mb / zp_time, "MiB/s", target, bound)
        )
    return results


def read_npy(b: Bench) -> list[Result]:
    store = b.read_store("blosc-lz4")
    mb = b.data().nbytes / MiB
    print("  np.load(array.npy, mmap_mode='r').sum() on a fresh mount vs z[:].sum()")
    warm(store)
    with b.mount(store) as m:
        meter = cpumeter.Meter()
        meter.start()
        fs_sum, fs_time = npy_sum(m / "arr" / "array.npy")
        fs_busy = meter.stop().busy
    meter = cpumeter.Meter()
    meter.start()
    zp_sum, zp_time = zarr_sum(store)
    zp_busy = meter.stop().busy
    if not np.isclose(fs_sum, zp_sum, rtol=1e-4):
        raise BenchError(f"read-npy: sum through the mount {fs_sum} != zarr-python's {zp_sum}")
    bound = read_bound(b.work, b.data().nbytes, fs_busy, zp_busy, MAPPED)
    return [versus("read-npy blosc-lz4", mb / fs_time, mb / zp_time, "MiB/s", 1.0, bound)]


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
        meter = cpumeter.Meter()
        meter.start()
        single = mb / dd(m, m / "a0" / "array.raw", "/dev/null")
        alone = meter.stop()
    with b.mount(store) as m, profiled(m.process.pid, "readers together"):
        meter = cpumeter.Meter()
        meter.start()
        times, wall = dd_concurrently(m, [m / f"a{k}" / "array.raw" for k in range(READERS)])
        together = meter.stop()
    rates = [mb / t for t in times]
    print("  each reader: " + ", ".join(f"{r:.1f}" for r in rates) + " MiB/s")
    # What bounds readers at once: the CPU each MiB costs then, against alone, and
    # whether the cores were idle (a lock or a queue) or all busy (the CPU).
    bound = (
        f"machine {cpu_per_mib('alone', alone.busy, mb)}, "
        f"{cpu_per_mib('together', together.busy, READERS * mb)}; "
        f"idle {together.idle:.2f} s of {together.busy + together.idle:.2f} s together"
    )
    return [
        versus("readers aggregate", READERS * mb / wall, single, "MiB/s", 0.9, bound),
        versus("readers slowest/fastest", min(rates), max(rates), "MiB/s", 0.5, bound),
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
