"""``s3-flush``: fsync of many dirty chunks on an S3 mount whose every request waits
0.3 s (moto behind bench/proxy.py), against the same PUTs one at a time.

The array: v3 float32, 64 chunks of 64 KiB (1024 columns, 16 rows each), stored
uncompressed, none stored at first. Written whole, a chunk per pwrite from the last
to the first (no write continues the one before: nothing is stored behind the
writer, every chunk waits for the fsync), then fsync'ed
(64 new objects: one PUT each); written again and fsync'ed (64 PUTs conditional on
the ETags the first answered). Each fsync is timed alone. The PUTs are sent at once,
up to core/pool.py's PUT_THREADS (32), so a flush should take about
ceil(64 / 32) = 2 round trips (0.6 s), not 64 (19.2 s); the target is a quarter of
the one-at-a-time time, with room for the server (moto answers in Python) and for
the S3 store's per-object write locks, which two keys can share.
"""

from __future__ import annotations

import math
import os
import time

import numpy as np
import zarr

from bench.context import Bench
from bench.data import COLUMNS
from bench.proxy import DelayProxy
from bench.results import BenchError, Result, below, reference
from bench.s3servers import BUCKET, endpoint_set, moto

DELAY = 0.3  # seconds the proxy adds to every request
CHUNKS, CHUNK_ROWS = 64, 16
PUTS_IN_FLIGHT = 32  # core/pool.py's PUT_THREADS


def s3_flush(b: Bench) -> list[Result]:
    prefix = "flush.zarr"
    store = b.work / "s3-flush.zarr"
    zarr.create_array(
        store=str(store),
        shape=(CHUNKS * CHUNK_ROWS, COLUMNS),
        chunks=(CHUNK_ROWS, COLUMNS),
        dtype="<f4",
        fill_value=0.0,
        compressors=None,
    )
    data = np.arange(CHUNKS * CHUNK_ROWS * COLUMNS, dtype="<f4").reshape(-1, COLUMNS) + 1
    sequential = CHUNKS * DELAY
    ideal = math.ceil(CHUNKS / PUTS_IN_FLIGHT) * DELAY
    results: list[Result] = []
    with moto(b.work) as server:
        server.upload(store, prefix)
        host, port = server.endpoint.removeprefix("http://").split(":")
        proxy = DelayProxy((host, int(port)))
        try:
            with endpoint_set(proxy.url), b.mount(f"s3://{BUCKET}/{prefix}") as m:
                fd = os.open(m / "array.raw", os.O_RDWR)
                try:
                    proxy.delay = DELAY
                    for what, values in (("new objects", data), ("replaced", data * 2)):
                        write_backwards(fd, values)
                        before = proxy.requests
                        start = time.perf_counter()
                        os.fsync(fd)
                        seconds = time.perf_counter() - start
                        print(
                            f"  fsync of {CHUNKS} chunks ({what}), {DELAY * 1000:.0f} ms per "
                            f"request: {seconds:.2f} s, {proxy.requests - before} requests "
                            f"(one at a time: {sequential:.1f} s; {PUTS_IN_FLIGHT} at a time: "
                            f"{ideal:.1f} s)"
                        )
                        name = f"s3 fsync {CHUNKS} chunks, {what}, {DELAY * 1000:.0f} ms/request"
                        bound = (
                            f"{PUTS_IN_FLIGHT} PUTs at a time: {ideal:.1f} s; one at a "
                            f"time: {sequential:.1f} s ({proxy.requests - before} requests)"
                        )
                        results.append(below(name, seconds, "s", sequential / 4, bound=bound))
                        results.append(
                            reference(f"{name} vs ideal", seconds, ideal, "s", "PUTs at once")
                        )
                    proxy.delay = 0.0
                finally:
                    os.close(fd)
        except (BenchError, OSError) as e:
            raise BenchError(f"s3-flush: {e}", results) from e
        finally:
            proxy.stop()
    return results


def write_backwards(fd: int, values: np.ndarray) -> None:
    """Each chunk's rows with a pwrite of its own, the last chunk first."""
    raw = values.tobytes()
    size = CHUNK_ROWS * COLUMNS * 4
    for offset in range((CHUNKS - 1) * size, -1, -size):
        os.pwrite(fd, raw[offset : offset + size], offset)
