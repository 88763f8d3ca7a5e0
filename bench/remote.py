"""``s3``: a Zarr v3 array read from S3 servers that the section starts on 127.0.0.1.

The array: float32, 1024 columns, chunks of 1 MiB, blosc-lz4, ``--size-mb`` clamped
to 128..256 MiB, consolidated; mounted as s3://bucket/prefix.

- From scripts/s3_server.py (bench/s3servers.py): ``dd bs=1M`` of array.raw on a
  fresh mount vs zarr-python ``z[:]`` through ``zarr.storage.ObjectStore`` over
  obstore's S3Store, zarrfs's own client (target >= 1.0x; the best of 5
  alternating rounds of each; obstore's concurrent GETs alone, 8 and 32 at a
  time, printed as the server's ceiling). Each round prints where the CPU went
  (zarr-python, or the daemon and dd; the server; the machine's busy and idle
  seconds), and the ratio the two best rounds' CPU allows at equal use of the
  cores.
- From moto, the store uploaded to it: the same comparison once, for reference
  (moto, Python answering one request at a time, bounds both sides); the same dd
  with 20 ms added to every request by bench/proxy.py vs through the proxy with
  none (target >= 0.7x); and mount + ``ls -R`` of a consolidated group of 1000
  arrays: the object GETs (moto's request log) before the first chunk is read
  (target <= 1).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zarr
import zarr.errors
import zarr.storage

from bench import cpumeter
from bench.context import Bench
from bench.data import CHUNK_ROWS, COLUMNS, PAGE, MiB, blosc_lz4_v3, make_data, same_bits
from bench.mounting import metered_dd, mounted
from bench.proxy import DelayProxy
from bench.results import BenchError, Result, reference, versus
from bench.s3servers import BUCKET, FAST_SERVER, Moto, endpoint_set, fast_server, moto

MIN_MB, MAX_MB = 128, 256
DELAY = 0.02  # seconds the proxy adds to every request
METADATA_ARRAYS = 1000
TARGETS = {"read": 1.0, "delayed": 0.7, "metadata GETs": 1}
ROUNDS = 5  # of the read-seq comparison on scripts/s3_server.py, alternating
MOTO_ROUNDS = 1  # of the same comparison on moto (a reference)
CEILING_THREADS = (8, 32)  # obstore GETs in flight, for the server's ceiling


def obstore_bucket(prefix: str) -> Any:
    """obstore's S3Store of the bucket, configured by the environment as zarrfs's is."""
    from obstore.store import S3Store

    return S3Store(BUCKET, prefix=prefix, client_options={"allow_http": True})


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
    prefix = url.removeprefix(f"s3://{BUCKET}/")
    chunks = data.shape[0] // CHUNK_ROWS
    ceilings = {n: mb / obstore_ceiling(prefix, chunks, n) for n in CEILING_THREADS}
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
                fs_time, fs_cpu = metered_dd(url, b.work, data, f"s3 read ({server})", pgid)
                fs_rates.append(mb / fs_time)
                fs_usages.append(fs_cpu)
                fs_text = f"{fs_rates[-1]:.1f} MiB/s"
            except (BenchError, OSError) as e:
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


def s3_read(b: Bench, server: Moto, failures: list[str], results: list[Result]) -> None:
    """The read-seq comparisons on scripts/s3_server.py then on moto, and the read
    through the delay proxy (in front of moto); figures are added to ``results`` as
    they come, so that a failure later keeps them."""
    mb = min(max(b.size_mb, MIN_MB), MAX_MB)
    data = make_data(mb * MiB // (COLUMNS * 4), noise=0.01)
    prefix = "read.zarr"
    url = f"s3://{BUCKET}/{prefix}"
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
        with fast_server(root, b.work) as (endpoint, pgid), endpoint_set(endpoint):
            print(
                f"  {FAST_SERVER.name} at {endpoint} ({os.cpu_count()} worker processes), "
                "serving the store's directory:"
            )
            fast = s3_read_comparison(
                b, FAST_SERVER.name, url, data, mb, compressed, ROUNDS, failures, pgid
            )
        if fast.fs_rate is not None:
            bound = fast.bound()
            results.append(
                versus("s3 read-seq", fast.fs_rate, fast.zp_rate, "MiB/s", TARGETS["read"], bound)
            )
            print(f"  {bound}")
            results.append(
                reference("s3 read-seq vs obstore GETs alone", fast.fs_rate, fast.ceiling, "MiB/s")
            )
        start = time.perf_counter()
        sent = server.upload(store, prefix)
        print(
            f"  moto at {server.endpoint}: {sent / MiB:.0f} MiB uploaded in "
            f"{time.perf_counter() - start:.1f} s (untimed)"
        )
        on_moto = s3_read_comparison(b, "moto", url, data, mb, compressed, MOTO_ROUNDS, failures)
        if on_moto.fs_rate is not None:
            results.append(
                reference("s3 read-seq on moto", on_moto.fs_rate, on_moto.zp_rate, "MiB/s")
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    fs_rate = on_moto.fs_rate
    host, port = server.endpoint.removeprefix("http://").split(":")
    proxy = DelayProxy((host, int(port)))
    try:
        rates = {}
        with endpoint_set(proxy.url):
            for delay in (0.0, DELAY):
                proxy.delay = delay
                before = proxy.requests
                seconds, _ = metered_dd(url, b.work, data, f"s3 read, {delay * 1000:.0f} ms")
                rates[delay] = mb / seconds
                print(
                    f"  moto through the proxy, {delay * 1000:.0f} ms per request: "
                    f"{rates[delay]:.1f} MiB/s ({proxy.requests - before} requests)"
                )
        direct = f", {rates[DELAY] / fs_rate:.2f}x of the direct read" if fs_rate else ""
        print(f"  delayed: {rates[DELAY] / rates[0.0]:.2f}x of the proxied read{direct}")
        results.append(
            versus(
                f"s3 read-seq {DELAY * 1000:.0f} ms/request vs 0 ms",
                rates[DELAY],
                rates[0.0],
                "MiB/s",
                TARGETS["delayed"],
            )
        )
    except (BenchError, OSError) as e:
        failures.append(f"zarrfs read through the proxy: {e}")
    finally:
        proxy.stop()


def s3_metadata(b: Bench, server: Moto) -> list[Result]:
    prefix = "metadata.zarr"
    store = b.work / "s3-metadata.zarr"
    create_s3_metadata_group(store, METADATA_ARRAYS)
    server.upload(store, prefix)
    shutil.rmtree(store)
    offset = server.log.stat().st_size
    start = time.perf_counter()
    with mounted(f"s3://{BUCKET}/{prefix}", log_dir=b.work) as m:
        mounted_at = time.perf_counter()
        ls = subprocess.run(["ls", "-R", str(m.path)], capture_output=True, text=True)
        listed_at = time.perf_counter()
        if ls.returncode:
            raise BenchError(f"ls -R failed: {ls.stderr.strip()}\n{m.tail()}")
        arrays = sum(1 for line in ls.stdout.splitlines() if line.endswith("array.raw"))
        with open(m / "a0000" / "array.raw", "rb") as f:  # the first chunk read
            f.read(PAGE)
    if arrays != METADATA_ARRAYS:
        raise BenchError(f"s3 metadata: ls -R shows {arrays} array.raw, not {METADATA_ARRAYS}")
    requests = server.requests_since(offset)
    chunk = re.compile(rf"^/{BUCKET}/{prefix}/a\d+/c/")
    first = next((n for n, (_, path, _) in enumerate(requests) if chunk.match(path)), None)
    if first is None:
        raise BenchError(f"s3 metadata: moto logged no chunk request: {requests}")
    before = requests[:first]
    gets = [path for method, path, _ in before if method == "GET" and "?" not in path]
    print(
        f"  {METADATA_ARRAYS} arrays: mount (process start to mounted) "
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
            f"<= {TARGETS['metadata GETs']} GET",
            len(gets) <= TARGETS["metadata GETs"],
        )
    ]


def s3(b: Bench) -> list[Result]:
    failures: list[str] = []
    results: list[Result] = []
    with moto(b.work) as server:
        print(f"  moto S3 server at {server.endpoint}, bucket {BUCKET}")
        try:
            s3_read(b, server, failures, results)
        except (BenchError, OSError) as e:
            failures.append(str(e))
        try:
            results += s3_metadata(b, server)
        except (BenchError, OSError) as e:
            failures.append(str(e))
    if failures:
        raise BenchError("\n  ".join(failures), results)
    return results
