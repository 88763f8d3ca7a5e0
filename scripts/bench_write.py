"""Benchmark the zarrfs write path against zarr-python 3 (not a test).

For each codec (blosc lz4 + shuffle, zlib level 1) and a float32 array of smooth data
in chunks of 1 MiB (default 1 GiB in all, ``--size-mb`` for less), both arrays filled
beforehand with other values:

- zarrfs: ``dd if=<source raw> of=<mount>/arr/array.raw bs=1M conv=notrunc,fsync``
  through a ``zarrfs mount -f`` of the store (timed: dd until it exits, fsync and close
  included), then the store is spot-checked with zarr-python;
- zarr-python: ``z[:] = data`` in this process on a same-shaped array with the same
  codec (timed: the assignment only; a following ``os.sync()`` is shown apart).

Target: zarrfs MB/s >= 1.0 x zarr-python's. Then random 4 KiB pwrites at 4 KiB-aligned
offsets into a hot array (read once through the mount first, so its chunks are cached):
target >= 5000 writes/s (the pwrite loop; the final fsync is timed apart), the result
checked against the expected bytes after unmount.

Exit status: 0 when every target is met, 1 when one is missed, 2 when the benchmark
could not run (e.g. the mount refuses writes).

    .venv/bin/python scripts/bench_write.py [--size-mb 1024] [--random-writes 20000]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numcodecs
import numpy as np
import zarr

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.mounting import mounted  # noqa: E402

MiB = 2**20
COLUMNS = 1024  # a row is 4 KiB of float32
CHUNK_ROWS = 256  # a chunk is 256 rows: 1 MiB
SEQUENTIAL_TARGET = 1.0  # zarrfs MB/s over zarr-python MB/s
RANDOM_TARGET = 5000.0  # 4 KiB pwrites per second

CODECS = {
    "blosc-lz4": lambda: numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE),
    "zlib-1": lambda: numcodecs.Zlib(level=1),
}


class BenchError(Exception):
    """The benchmark could not run; the message says why."""


def smooth(rows: slice, offset: float = 0.0) -> np.ndarray:
    """Smooth float32 values for the given rows (a field of waves plus a slow trend)."""
    i = np.arange(rows.start, rows.stop, dtype=np.float64)[:, None]
    j = np.arange(COLUMNS, dtype=np.float64)[None, :]
    values = 100.0 * np.sin(i / 700.0 + offset) * np.cos(j / 90.0) + i * 1e-3 + offset
    return values.astype("<f4")


def make_data(rows: int, offset: float = 0.0) -> np.ndarray:
    data = np.empty((rows, COLUMNS), dtype="<f4")
    for start in range(0, rows, 4096):
        block = slice(start, min(rows, start + 4096))
        data[block] = smooth(block, offset)
    return data


def create_array(store: Path, rows: int, codec: str, initial: np.ndarray) -> zarr.Array:
    """A v2 group holding array ``arr`` (chunks of 1 MiB), filled with ``initial``."""
    zarr.open_group(str(store), mode="w", zarr_format=2)
    z = zarr.create_array(
        store=str(store / "arr"),
        shape=(rows, COLUMNS),
        chunks=(CHUNK_ROWS, COLUMNS),
        dtype="<f4",
        zarr_format=2,
        compressors=CODECS[codec](),
        fill_value=0.0,
    )
    z[...] = initial
    return z


def check_store(store: Path, data: np.ndarray, what: str) -> None:
    """Spot-check a few chunks (first, last, random ones) against the data."""
    z = zarr.open_array(str(store / "arr"), mode="r")
    chunks = -(-data.shape[0] // CHUNK_ROWS)
    for c in {0, chunks - 1, *random.sample(range(chunks), min(3, chunks))}:
        rows = slice(c * CHUNK_ROWS, min(data.shape[0], (c + 1) * CHUNK_ROWS))
        if not np.array_equal(z[rows], data[rows]):
            raise BenchError(f"{what}: chunk {c} holds other values than were written")


def log_tail(log: str, lines: int = 15) -> str:
    return "\n".join("    " + line for line in log.splitlines()[-lines:])


def bench_zarrfs_sequential(store: Path, source: Path, data: np.ndarray) -> float:
    with mounted(store) as m:
        target = m / "arr" / "array.raw"
        start = time.perf_counter()
        result = subprocess.run(
            ["dd", f"if={source}", f"of={target}", "bs=1M", "conv=notrunc,fsync", "status=none"],
            capture_output=True,
            text=True,
        )
        elapsed = time.perf_counter() - start
        if result.returncode:
            raise BenchError(
                f"writing through the mount failed (dd exit {result.returncode}): "
                f"{result.stderr.strip()}\n  Does this zarrfs support writes? "
                f"Last lines of its log:\n{log_tail(m.log())}"
            )
    check_store(store, data, "zarrfs rewrite")
    return elapsed


def bench_zarr_python(store: Path, data: np.ndarray) -> tuple[float, float]:
    z = zarr.open_array(str(store / "arr"), mode="r+")
    start = time.perf_counter()
    z[:] = data
    elapsed = time.perf_counter() - start
    start = time.perf_counter()
    os.sync()
    synced = time.perf_counter() - start
    check_store(store, data, "zarr-python rewrite")
    return elapsed, synced


def bench_random_writes(store: Path, expected: np.ndarray, count: int) -> tuple[float, float]:
    """Random 4 KiB pwrites into ``arr`` (already holding ``expected``); updates it."""
    raw = expected.reshape(-1).view(np.uint8)
    pages = raw.size // 4096
    rng = np.random.default_rng(1)
    offsets = rng.integers(0, pages, count) * 4096
    payloads = rng.random((count, 1024), dtype=np.float32)
    with mounted(store) as m:
        path = m / "arr" / "array.raw"
        fd = os.open(path, os.O_RDWR)
        try:
            # Hot: every chunk decoded once, so the writes find their chunks cached.
            for offset in range(0, raw.size, MiB):
                os.pread(fd, MiB, offset)
            start = time.perf_counter()
            for offset, payload in zip(offsets.tolist(), payloads):
                os.pwrite(fd, payload.data, offset)
            elapsed = time.perf_counter() - start
            start = time.perf_counter()
            os.fsync(fd)
            synced = time.perf_counter() - start
        except OSError as e:
            raise BenchError(
                f"random writes through the mount failed: {e}\n  Does this zarrfs support "
                f"writes? Last lines of its log:\n{log_tail(m.log())}"
            ) from e
        finally:
            os.close(fd)
    for offset, payload in zip(offsets.tolist(), payloads):
        raw[offset : offset + 4096] = payload.view(np.uint8)
    got = np.asarray(zarr.open_array(str(store / "arr"), mode="r")[...])
    if not np.array_equal(got.view(np.uint8), expected.view(np.uint8)):
        raise BenchError("random writes: the store holds other bytes than were written")
    return elapsed, synced


def run(args: argparse.Namespace, work: Path) -> bool:
    rows = args.size_mb * MiB // (COLUMNS * 4)
    size = rows * COLUMNS * 4
    print(f"data: float32 ({rows}, {COLUMNS}) = {size / MiB:.0f} MiB, chunks of 1 MiB")
    data = make_data(rows)
    initial = make_data(rows, offset=1.0)
    source = work / "source.raw"
    data.tofile(source)
    ok = True

    print(f"\nsequential rewrite (target: zarrfs >= {SEQUENTIAL_TARGET:.1f} x zarr-python)")
    print(f"  {'codec':<10} {'zarrfs dd':>12} {'zarr-python':>12} {'ratio':>7}  (+ os.sync)")
    for codec in CODECS:
        fs_store, zp_store = work / f"{codec}-zarrfs.zarr", work / f"{codec}-zarr.zarr"
        create_array(fs_store, rows, codec, initial)
        create_array(zp_store, rows, codec, initial)
        fs_time = bench_zarrfs_sequential(fs_store, source, data)
        zp_time, zp_sync = bench_zarr_python(zp_store, data)
        fs_rate, zp_rate = size / MiB / fs_time, size / MiB / zp_time
        ratio = fs_rate / zp_rate
        met = ratio >= SEQUENTIAL_TARGET
        ok &= met
        print(
            f"  {codec:<10} {fs_rate:>7.1f} MB/s {zp_rate:>7.1f} MB/s {ratio:>6.2f}x"
            f"  ({zp_sync:.2f} s)  {'ok' if met else 'MISSED'}"
        )
        shutil.rmtree(fs_store)
        shutil.rmtree(zp_store)

    hot_rows = min(rows, args.hot_mb * MiB // (COLUMNS * 4))
    hot = make_data(hot_rows, offset=2.0)
    hot_store = work / "hot.zarr"
    create_array(hot_store, hot_rows, "blosc-lz4", hot)
    elapsed, synced = bench_random_writes(hot_store, hot, args.random_writes)
    rate = args.random_writes / elapsed
    met = rate >= RANDOM_TARGET
    ok &= met
    print(
        f"\nrandom 4 KiB pwrites into a hot {hot.nbytes / MiB:.0f} MiB array (blosc-lz4): "
        f"{rate:,.0f} writes/s over {args.random_writes} (target >= {RANDOM_TARGET:,.0f}), "
        f"then fsync {synced:.2f} s  {'ok' if met else 'MISSED'}"
    )
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="array size (default 1024)")
    parser.add_argument("--hot-mb", type=int, default=64, help="random-write array (default 64)")
    parser.add_argument("--random-writes", type=int, default=20000, help="default 20000")
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temp dir")
    args = parser.parse_args()
    if args.size_mb < 1 or args.hot_mb < 1 or args.random_writes < 1:
        parser.error("sizes and counts must be positive")
    work = Path(tempfile.mkdtemp(prefix="zarrfs-bench-", dir=args.workdir))
    try:
        ok = run(args, work)
    except (BenchError, AssertionError) as e:  # AssertionError: from tests.mounting
        print(f"\nbench_write: error: {e}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\nall targets met" if ok else "\na target was MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
