"""``sharded``: a Zarr v3 sharded array written by zarr-python (float32, 8192 columns,
``--size-mb`` up to 256 MiB, inner chunks 512x512 = 1 MiB, shards 2048x2048 of 16
inner chunks, blosc-lz4).

- read: ``dd bs=1M`` of array.raw on a fresh mount vs zarr-python ``z[:]`` (target
  >= 1.5x; tensorstore's read printed beside it, no target);
- rewrite: ``dd conv=notrunc,fsync`` into array.raw vs zarr-python ``z[:] = data``
  (target >= 1.0x), the rewritten stores read back whole by zarr-python and
  tensorstore; beside it, as in write-seq, each side's CPU per MiB and the FUSE
  ceiling (bench/writefs.py taking the same dd).

A part that fails (zarrfs shows no array.raw for the array, say) is an error of the
section; the figures of the others are still reported.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import zarr

from bench import cpumeter
from bench.ceilings import DIRECT_IO, read_bound
from bench.context import Bench
from bench.data import (
    COLUMNS,
    MiB,
    blosc_lz4_v3,
    check_file,
    make_data,
    same_bits,
    warm,
)
from bench.mounting import Mounted, dd
from bench.profiling import profiled
from bench.reads import tensorstore_read, zarr_read
from bench.results import BenchError, Result, reference, versus
from bench.writes import rewrite_bound, write_ceiling, zarr_python_rewrite, zarrfs_rewrite

SHARDED_COLUMNS = 8192  # a row is 32 KiB of float32
SHARDED_MAX_MB = 256  # 8192 x 8192
INNER = (512, 512)  # an inner chunk: 1 MiB of float32
SHARD = (2048, 2048)  # a shard: 4 x 4 = 16 inner chunks
SHARDED_CODEC = "blosc-lz4"
TARGETS = {"read": 1.5, "write": 1.0}


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
            f"its log:\n{m.tail()}"
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
    meter = cpumeter.Meter()
    meter.start()
    out, zp_time = zarr_read(store)
    zp_busy = meter.stop().busy
    zp_rate = mb / zp_time
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
            with profiled(m.process.pid, "sharded read"):
                meter = cpumeter.Meter()
                meter.start()
                fs_rate = mb / dd(m, raw, "/dev/null")
                fs_busy = meter.stop().busy
            check_file(raw, data, "sharded read")
    except (BenchError, OSError) as e:
        failures.append(f"zarrfs read: {e}")
        return []
    finally:
        shutil.rmtree(store)
    bound = read_bound(b.work, data.nbytes, fs_busy, zp_busy, DIRECT_IO)
    results = [versus("sharded read-seq", fs_rate, zp_rate, "MiB/s", TARGETS["read"], bound)]
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
    zarrfs = None
    try:
        with b.mount(fs_store) as m:
            sharded_raw(m, "sharded rewrite")
            zarrfs = zarrfs_rewrite(m, source)
        check_sharded_store(fs_store, data, "zarrfs sharded rewrite")
        ceiling = write_ceiling(b, source)
    except (BenchError, OSError) as e:
        failures.append(f"zarrfs rewrite: {e}")
        zarrfs = None
    finally:
        source.unlink()
        shutil.rmtree(fs_store)
    zp = zarr_python_rewrite(zp_store, data, "rewrite")
    try:
        check_sharded_store(zp_store, data, "zarr-python sharded rewrite")
    finally:
        shutil.rmtree(zp_store)
    if zarrfs is None:
        print(f"  rewrite: zarrfs failed; zarr-python z[:] = data {mb / zp[0]:.1f} MiB/s")
        return []
    bound = rewrite_bound(mb, zarrfs, zp, ceiling)
    print(f"  rewrite: {bound}")
    fs_rate, zp_rate = mb / zarrfs[0], mb / zp[0]
    return [versus("sharded write-seq", fs_rate, zp_rate, "MiB/s", TARGETS["write"], bound)]


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
