"""``metadata``: listing a consolidated group of 10 000 small arrays (no chunks).

A read-only mount, ``ls -R`` and a stat of every file (target <= 2 s), beside
bench/memfs.py's tree of the same shape answered from tables in memory (the
ceiling: what pyfuse3 and trio alone cost; target >= 0.9x its speed, its bound each
daemon's CPU seconds, and zarrfs's per array); then a second ``ls -R`` (printed:
names and attributes come from the kernel's caches, listings from the daemon).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import zarr

from bench import cpumeter
from bench.context import Bench
from bench.data import CHUNK_ROWS, add_array, new_group, warm
from bench.mounting import treefs_mounted
from bench.profiling import profiled
from bench.results import BenchError, Result, below, fmt

ARRAYS = 10_000
TARGET_SECONDS = 2.0
CEILING_TARGET = 0.9  # the ceiling's time over zarrfs's


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
    write_metadata_group(store, ARRAYS)
    print(
        f"  {ARRAYS} arrays created and consolidated in "
        f"{time.perf_counter() - start:.1f} s (untimed)"
    )
    warm(store)
    start = time.perf_counter()
    # Read-only, as the ceiling's tree (a read-write mount also walks the store for
    # an earlier run's temporary files, paced, from 5 s after mounting).
    with b.mount(store, "--read-only") as m:
        with profiled(m.process.pid, "metadata ls -R and stat"):
            mounted_at = time.perf_counter()
            ls = subprocess.run(["ls", "-R", str(m.path)], capture_output=True, text=True)
            listed_at = time.perf_counter()
            if ls.returncode:
                raise BenchError(f"ls -R failed: {ls.stderr.strip()}\n{m.tail()}")
            files = stat_everything(m.path)
            elapsed = time.perf_counter() - start
        # The daemon's own CPU (imports, the consolidated document, every handler).
        daemon_cpu = cpumeter.process(m.process.pid)
        # Names and attributes are cached by the kernel (entry and attribute timeouts),
        # directory listings are not (pyfuse3 cannot ask for FOPEN_CACHE_DIR).
        again = time.perf_counter()
        subprocess.run(["ls", "-R", str(m.path)], capture_output=True, check=True)
        again = time.perf_counter() - again
        again_cpu = cpumeter.process(m.process.pid) - daemon_cpu
    print(
        f"  mount (process start to mounted) {mounted_at - start:.2f} s"
        f" + ls -R {listed_at - mounted_at:.2f} s "
        f"({len(ls.stdout.splitlines())} lines) + stat of {files} files "
        f"{elapsed - (listed_at - start):.2f} s; a second ls -R {again:.2f} s\n"
        f"  daemon CPU: {daemon_cpu:.2f} s to the end of the stats, {again_cpu:.2f} s"
        " in the second ls -R"
    )
    if files < 4 * ARRAYS:
        raise BenchError(f"metadata: {files} files under the mount, expected >= 4 per array")
    per_array = files // ARRAYS
    start = time.perf_counter()
    with treefs_mounted(ARRAYS, per_array, b.work) as mounted_tree:
        tree = mounted_tree.path
        ceiling_mounted = time.perf_counter()
        subprocess.run(["ls", "-R", str(tree)], capture_output=True, check=True)
        ceiling_listed = time.perf_counter()
        stat_everything(tree)
        ceiling = time.perf_counter() - start
        ceiling_cpu = cpumeter.process(mounted_tree.process.pid)
        ceiling_again = time.perf_counter()
        subprocess.run(["ls", "-R", str(tree)], capture_output=True, check=True)
        ceiling_again = time.perf_counter() - ceiling_again
    # The same requests, phase by phase: what zarrfs's own work adds to each.
    print(
        f"  ceiling: bench/memfs.py --tree ({ARRAYS} directories of {per_array}"
        f" files from memory): mount {ceiling_mounted - start:.2f} s"
        f" + ls -R {ceiling_listed - ceiling_mounted:.2f} s"
        f" + stat {ceiling - (ceiling_listed - start):.2f} s = {ceiling:.2f} s;"
        f" a second ls -R {ceiling_again:.2f} s"
    )
    extra = daemon_cpu - ceiling_cpu
    bound = (
        f"daemon CPU to the end of the stats: zarrfs {daemon_cpu:.2f} s, the tree "
        f"{ceiling_cpu:.2f} s (what pyfuse3 and trio cost); zarrfs's own work "
        f"{1e6 * extra / ARRAYS:.0f} us per array"
    )
    print(f"  {bound}")
    return [
        below("metadata mount+ls+stat", elapsed, "s", TARGET_SECONDS, strict=False, bound=bound),
        # Lower is better here: the ratio is the ceiling's time over ours.
        Result(
            "metadata vs memory ceiling",
            fmt(elapsed, "s"),
            fmt(ceiling, "s"),
            ceiling / elapsed,
            f">= {CEILING_TARGET}x",
            ceiling / elapsed >= CEILING_TARGET,
            bound,
        ),
    ]
