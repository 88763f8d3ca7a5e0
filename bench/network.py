"""``network``: S3 over a network like a cloud VM's, side by side in one run.

scripts/s3_server.py serves a directory as the bucket on 127.0.0.1, behind
bench/shaping.py: 15 ms each way (30 ms round trips, and one more for each new
connection's handshake) and 50 MB/s per connection on the response direction. Every
reader is pointed at the proxy (zarrfs and obstore through AWS_ENDPOINT_URL,
tensorstore through its s3 kvstore's ``endpoint``); the proxy counts the requests.

1. **First read** of a float32 array of 16384 columns (``--size-mb`` up to 512 MiB),
   blosc-lz4, in two layouts of the ``layouts`` section: v2 tiles 256 x 1024, and
   v3 shards 256 x 16384 of tiles 256 x 1024. ``dd bs=1M`` of array.raw on a fresh
   read-only mount (its caches cold, no disk cache) vs zarr-python 3 ``z[:]``
   through zarr.storage.ObjectStore over obstore (its default concurrency: 10
   requests) vs tensorstore's read through its s3 kvstore (its default: 32). Best
   of ROUNDS alternating rounds; targets: >= 1.5x zarr-python, >= 1.0x tensorstore.
   Each round's CPU is printed: the reader's, the server's and the proxy's, and per
   MiB.
2. **Second read with the disk cache**: a mount with ``--disk-cache DIR`` reads the
   array once (filling DIR; printed), then new mounts with the same DIR are timed,
   its entries fresh (``--metadata-ttl 3600``: no request) and stale (``--metadata-ttl
   5``, 5 s past: every entry revalidated by a conditional GET, as a read some
   time later is), vs zarrfs reading the same array from the bucket's directory (a
   local store); target >= 0.8x for both.
3. **Listing**: mount (process start to mounted) + ``ls -R`` of a consolidated v3
   group of 1000 arrays: the requests the proxy saw (target <= 3) and the wall time
   (target < 1 s + a round trip for each of those requests and connections).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench import cpumeter
from bench.context import Bench
from bench.data import MiB, same_bits, store_bytes
from bench.layouts import LAYOUTS, ROW_BLOCK, Layout, Side, create_store, layout_data
from bench.mounting import ROOT, metered_dd, mounted
from bench.remote import create_s3_metadata_group, zarr_python_s3_read
from bench.results import BenchError, Result, below, versus
from bench.s3servers import BUCKET, REGION, aws_environment, environment, fast_server
from bench.shaping import RATE, RTT, Counts, Proxy, shaping_proxy

MAX_MB = 512
CODEC = "blosc-lz4"
CASES = tuple(layout for layout in LAYOUTS if layout.name in ("tiles", "shards"))
ROUNDS = 2
LIST_ARRAYS = 1000
TARGETS = {"zarr-python": 1.5, "tensorstore": 1.0, "disk cache": 0.8, "list requests": 3}
LIST_SECONDS = 1.0  # besides the round trips of the listing's requests
FRESH = ("--metadata-ttl", "3600")  # disk cache entries served without asking the store
STALE_TTL = 5.0  # the stale rounds' --metadata-ttl: their entries are older than it
STALE = ("--metadata-ttl", f"{STALE_TTL:g}")
STALE_AFTER = STALE_TTL + 0.5  # seconds after which it has passed

Round = tuple[float, cpumeter.Usage, float]  # seconds, CPU meanwhile, the reader's CPU s


@dataclass
class Network:
    """What every read of the section is given."""

    b: Bench
    root: Path  # the bucket's directory
    proxy: Proxy
    server: int  # the S3 server's process group
    # The proxy's counts as the last zarrfs read ended (its check's reads after it
    # are not the read's).
    read_end: Counts | None = None

    def url(self, prefix: str) -> str:
        return f"s3://{BUCKET}/{prefix}"

    def proxy_cpu(self) -> float:
        return cpumeter.process(self.proxy.process.pid)


def network_data(b: Bench) -> np.ndarray:
    """``layout_data``, at most MAX_MB of it, in whole blocks of 256 rows: a view."""
    data = layout_data(b)
    rows = min(data.shape[0], MAX_MB * MiB // (data.shape[1] * 4))
    if rows >= ROW_BLOCK:
        rows -= rows % ROW_BLOCK
    return data[:rows]


# -- the readers ------------------------------------------------------------------------------


def zarr_python_round(net: Network, prefix: str, data: np.ndarray, what: str) -> Round:
    out, elapsed, usage = zarr_python_s3_read(prefix, net.server)
    if not same_bits(out, data):
        raise BenchError(f"{what}: zarr-python read other values than were stored")
    return elapsed, usage, usage.own


def tensorstore_round(
    net: Network, prefix: str, layout: Layout, data: np.ndarray, what: str
) -> Round:
    """tensorstore's read through its s3 kvstore (anonymous: the server checks no
    signature), opened fresh, no cache pool; the seconds of the read alone."""
    import tensorstore

    kvstore = {
        "driver": "s3",
        "bucket": BUCKET,
        "path": f"{prefix}/arr/",
        "endpoint": net.proxy.url,
        "aws_region": REGION,
        "aws_credentials": {"type": "anonymous"},
    }
    spec = {"driver": layout.ts_driver, "kvstore": kvstore}
    array = tensorstore.open(spec, open=True, read=True).result()
    meter = cpumeter.Meter(pgid=net.server)
    meter.start()
    start = time.perf_counter()
    out = array.read().result()
    elapsed = time.perf_counter() - start
    usage = meter.stop()
    if not same_bits(out, data):
        raise BenchError(f"{what}: tensorstore read other values than were stored")
    return elapsed, usage, usage.own


def zarrfs_round(
    net: Network, store: str | Path, data: np.ndarray, what: str, *options: str
) -> Round:
    """``dd bs=1M`` of array.raw on a fresh read-only mount of ``store``."""

    def read_done() -> None:
        net.read_end = net.proxy.counts()

    elapsed, usage = metered_dd(
        store, net.b.work, data, what, net.server, ("--read-only", *options), read_done
    )
    return elapsed, usage, usage.watched + usage.children


def run_round(net: Network, side: Side, mb: float, read: Callable[[], Round]) -> str:
    """One round of ``side`` unless it failed before; the line of its CPU and the
    requests it made ("" when it failed)."""
    if side.failure is not None:
        return ""
    before, proxy_cpu = net.proxy.counts(), net.proxy_cpu()
    net.read_end = None
    try:
        elapsed, usage, reader = read()
    except (BenchError, OSError, ValueError) as e:  # ValueError: tensorstore's errors
        side.failure = f"{side.name}: {e}"
        return ""
    proxy_cpu = net.proxy_cpu() - proxy_cpu
    sent = requests_since(net.proxy, before, net.read_end)
    side.rates.append(mb / elapsed)
    side.busy.append(reader)
    return (
        f"{sent.requests} requests on {sent.connections} new connections; CPU s: "
        f"{side.name} {reader:.2f} ({reader / mb * 1000:.2f} ms/MiB), server "
        f"{usage.server:.2f}, proxy {proxy_cpu:.2f}; machine busy {usage.busy:.2f}, "
        f"idle {usage.idle:.2f}"
    )


def requests_since(proxy: Proxy, before: Counts, until: Counts | None = None) -> Counts:
    now = proxy.counts() if until is None else until
    return Counts(
        now.requests - before.requests,
        now.connections - before.connections,
        now.bytes_down - before.bytes_down,
    )


def rounds(net: Network, mb: float, readers: list[tuple[Side, Callable[[], Round]]]) -> None:
    """ROUNDS alternating rounds of the readers, each printed."""
    for n in range(ROUNDS):
        lines = {side.name: run_round(net, side, mb, read) for side, read in readers}
        print(f"    round {n + 1}: " + "; ".join(f"{s.name} {s.last()}" for s, _ in readers))
        for name, line in lines.items():
            if line:
                print(f"      {name:<11} {line}")


def cpu_bound(mb: float, *sides: Side) -> str:
    """What bounds a figure here: each side's own CPU per MiB in its best round (the
    daemon and dd, or the reader's process) and the network each connection sees."""
    named = ", ".join(
        f"{side.name} {1000 * side.best_busy() / mb:.2f}" for side in sides if side.rates
    )
    return (
        f"own ms CPU/MiB in the best rounds: {named}; the network: {RATE / 1e6:.0f} MB/s "
        f"a connection, {1000 * RTT:.0f} ms round trip"
    )


def best_range(side: Side) -> str:
    return f"{min(side.rates):.1f}-{max(side.rates):.1f} MiB/s" if side.rates else "-"


# -- the parts ----------------------------------------------------------------------------------


def first_reads(
    net: Network, layout: Layout, label: str, data: np.ndarray, failures: list[str]
) -> list[Result]:
    """zarrfs vs zarr-python vs tensorstore, each reading the array afresh."""
    prefix = f"{layout.name}.zarr"
    what = f"network {label}"
    zp, ts, fs = Side("zarr-python"), Side("tensorstore"), Side("zarrfs")
    rounds(
        net,
        data.nbytes / MiB,
        [
            (zp, lambda: zarr_python_round(net, prefix, data, what)),
            (ts, lambda: tensorstore_round(net, prefix, layout, data, what)),
            (fs, lambda: zarrfs_round(net, net.url(prefix), data, what)),
        ],
    )
    failures += [f"{label}: {s.failure}" for s in (zp, ts, fs) if s.failure is not None]
    fs_rate = fs.best()
    if fs_rate is None:
        return []
    results = []
    for ref in (zp, ts):
        ref_rate = ref.best()
        if ref_rate is not None:
            print(f"    {ref.name} {best_range(ref)}, zarrfs {best_range(fs)}")
            results.append(
                versus(
                    f"network {label} vs {ref.name}",
                    fs_rate,
                    ref_rate,
                    "MiB/s",
                    TARGETS[ref.name],
                    cpu_bound(data.nbytes / MiB, fs, ref),
                )
            )
    return results


def cached_reads(
    net: Network, layout: Layout, label: str, data: np.ndarray, failures: list[str]
) -> list[Result]:
    """A mount with --disk-cache fills it; then, alternating, new mounts read from it
    with its entries fresh (--metadata-ttl 3600: served without a request) and stale
    (--metadata-ttl 5, past: each entry revalidated by a conditional request), and the
    bucket's directory is read as a local store."""
    prefix = f"{layout.name}.zarr"
    what = f"network {label} disk cache"
    mb = data.nbytes / MiB
    cache = net.b.work / f"network-disk-cache-{layout.name}"
    options = ("--disk-cache", str(cache))
    before = net.proxy.counts()
    fill, _, _ = zarrfs_round(net, net.url(prefix), data, what, *options)
    stamped = [time.monotonic()]  # when entries were last validated
    sent = requests_since(net.proxy, before, net.read_end)
    print(
        f"    filling the disk cache (a first read): {mb / fill:.1f} MiB/s, "
        f"{sent.requests} requests, {store_bytes(cache) / MiB:.0f} MiB in {cache.name}"
    )

    def revalidated() -> Round:
        time.sleep(max(0.0, stamped[0] + STALE_AFTER - time.monotonic()))
        try:
            return zarrfs_round(net, net.url(prefix), data, what, *options, *STALE)
        finally:
            stamped[0] = time.monotonic()

    fresh, stale, local = Side("fresh cache"), Side("stale cache"), Side("local")
    rounds(
        net,
        mb,
        [
            (fresh, lambda: zarrfs_round(net, net.url(prefix), data, what, *options, *FRESH)),
            (stale, revalidated),
            (local, lambda: zarrfs_round(net, net.root / prefix, data, f"network {label} local")),
        ],
    )
    shutil.rmtree(cache, ignore_errors=True)
    sides = (fresh, stale, local)
    failures += [f"{label}: {s.failure}" for s in sides if s.failure is not None]
    local_rate = local.best()
    results = []
    for side, text in ((fresh, "fresh"), (stale, "revalidated")):
        rate = side.best()
        if rate is not None and local_rate is not None:
            results.append(
                versus(
                    f"network {label} disk cache, {text}, vs local store",
                    rate,
                    local_rate,
                    "MiB/s",
                    TARGETS["disk cache"],
                    cpu_bound(mb, side, local),
                )
            )
    return results


def listing(net: Network) -> list[Result]:
    """Mount + ls -R of the consolidated group: requests and wall time."""
    prefix = "metadata.zarr"
    before = net.proxy.counts()
    start = time.perf_counter()
    with mounted(net.url(prefix), "--read-only", log_dir=net.b.work) as m:
        mounted_at = time.perf_counter()
        ls = subprocess.run(["ls", "-R", str(m.path)], capture_output=True, text=True)
        listed_at = time.perf_counter()
        sent = requests_since(net.proxy, before)
        if ls.returncode:
            raise BenchError(f"network listing: ls -R failed: {ls.stderr.strip()}\n{m.tail()}")
    arrays = sum(1 for line in ls.stdout.splitlines() if line.endswith("array.raw"))
    if arrays != LIST_ARRAYS:
        raise BenchError(f"network listing: ls -R shows {arrays} array.raw, not {LIST_ARRAYS}")
    seconds = listed_at - start
    bound = LIST_SECONDS + (sent.requests + sent.connections) * RTT
    print(
        f"  {LIST_ARRAYS} consolidated arrays: mount (process start to mounted) "
        f"{mounted_at - start:.2f} s + ls -R {listed_at - mounted_at:.2f} s; "
        f"{sent.requests} requests on {sent.connections} connections "
        f"(bound {LIST_SECONDS:.0f} s + {sent.requests + sent.connections} round trips)"
    )
    limit = TARGETS["list requests"]
    return [
        Result(
            "network mount+ls -R requests",
            f"{sent.requests} requests",
            "-",
            None,
            f"<= {limit}",
            sent.requests <= limit,
        ),
        below(
            "network mount+ls -R time",
            seconds * 1000,
            "ms",
            bound * 1000,
            bound=f"mount {mounted_at - start:.2f} s (process start to mounted), "
            f"ls -R {listed_at - mounted_at:.2f} s, {sent.requests} requests",
        ),
    ]


def network(b: Bench) -> list[Result]:
    data = network_data(b)
    mb = data.nbytes / MiB
    root = b.work / "network-bucket"
    results: list[Result] = []
    failures: list[str] = []
    try:
        for layout in CASES:
            create_store(root / f"{layout.name}.zarr", layout, CODEC, data)
        create_s3_metadata_group(root / "metadata.zarr", LIST_ARRAYS)
        print(
            f"  float32 {data.shape} = {mb:.0f} MiB, {CODEC}, served by scripts/s3_server.py "
            f"through bench/shaping.py: {RTT * 500:.0f} ms each way, {RATE / 1e6:.0f} MB/s "
            f"per connection; best of {ROUNDS} rounds"
        )
        with (
            fast_server(root, b.work) as (endpoint, pgid),
            shaping_proxy(endpoint, cwd=str(ROOT)) as proxy,
            environment(aws_environment(b.work, proxy.url)),
        ):
            net = Network(b, root, proxy, pgid)
            for layout in CASES:
                label = f"{layout.name} v{layout.zarr_format}"
                ratio = data.nbytes / store_bytes(root / f"{layout.name}.zarr")
                print(f"  {layout.describe()}, compressed {ratio:.2f}x; first reads:")
                for part in (first_reads, cached_reads):
                    try:
                        results += part(net, layout, label, data, failures)
                    except (BenchError, OSError) as e:
                        failures.append(f"{label} {part.__name__}: {e}")
            try:
                results += listing(net)
            except (BenchError, OSError) as e:
                failures.append(f"listing: {e}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if failures:
        raise BenchError("\n  ".join(failures), results)
    return results
