"""``write-seq``: the sequential rewrite of a whole v2 array (row chunks of 1 MiB).

``dd bs=1M conv=notrunc,fsync`` into array.raw vs zarr-python ``z[:] = data``, for
blosc-lz4 and zlib-1 (target >= 1.0x), each side on its own copy of the same filled
store and started with nothing dirty in the page cache. zarrfs's time includes
making every chunk durable (its fsync); zarr-python's ``os.sync()`` after the write
is printed, untimed. The rate of encoding alone on every core, which bounds both
sides, is printed beside them.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import zarr

from bench.context import Bench
from bench.data import CHUNK_ROWS, CODECS, MiB, check_store, create_array, make_data
from bench.mounting import dd
from bench.results import Result, versus

TARGET = 1.0  # zarrfs / zarr-python


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
    return versus(f"write-seq {codec}", mb / fs_time, mb / zp_time, "MiB/s", TARGET)


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
