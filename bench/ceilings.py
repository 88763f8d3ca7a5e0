"""The FUSE ceilings a missed figure is printed beside (bench/results.py's ``bound``).

bench/memfs.py serves as many bytes from memory, and the same reader reads them
with the same access mode as zarrfs: ``dd bs=1M`` with direct I/O (how zarrfs opens
array data by default) or through the page cache (``--kernel-cache``), or a shared
map summed by numpy (how ``np.load(array.npy, mmap_mode="r")`` reads). What FUSE and
a single-threaded pyfuse3 daemon allow on this machine with no decoding at all.
Each ceiling is measured once per run and size (the best of ``ROUNDS``), and shared
by the sections that need it.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench import cpumeter
from bench.data import MiB
from bench.mounting import dd_command, memfs_mounted
from bench.results import BenchError, cpu_per_mib

ROUNDS = 2
DIRECT_IO = "direct_io"
PAGE_CACHE = "page cache"
MAPPED = "mapped"
MODES = (DIRECT_IO, PAGE_CACHE, MAPPED)


@dataclass(frozen=True)
class Ceiling:
    mode: str
    rate: float  # MiB/s
    busy_per_mib: float  # the machine's CPU seconds per MiB in the best round
    cpu: str  # where the CPU went in the best round

    def text(self) -> str:
        return f"FUSE ceiling ({self.mode}, bench/memfs.py) {self.rate:,.0f} MiB/s"


_measured: dict[tuple[int, str], Ceiling] = {}


def read_ceiling(work: Path, nbytes: int, mode: str = DIRECT_IO) -> Ceiling:
    """memfs serving ``nbytes``, read in ``mode`` (one of MODES), best of ROUNDS."""
    if mode not in MODES:
        raise ValueError(f"unknown access mode {mode!r}")
    key = (nbytes, mode)
    if key not in _measured:
        _measured[key] = _measure(work, nbytes, mode)
    return _measured[key]


def read_bound(work: Path, nbytes: int, fs_busy: float, zp_busy: float, mode: str) -> str:
    """What bounds a read of ``nbytes``: both sides' CPU per MiB (the machine's, while
    each read) and the FUSE ceiling of zarrfs's access mode."""
    mb = nbytes / MiB
    ceiling = read_ceiling(work, nbytes, mode)
    sides = f"{cpu_per_mib('zarrfs', fs_busy, mb)}, {cpu_per_mib('zarr-python', zp_busy, mb)}"
    return f"machine {sides}; {ceiling.text()}"


def _measure(work: Path, nbytes: int, mode: str) -> Ceiling:
    best: Ceiling | None = None
    mb = nbytes / MiB
    for _ in range(ROUNDS):
        with memfs_mounted(nbytes, work, direct_io=mode == DIRECT_IO) as (path, _log):
            meter = cpumeter.Meter()
            meter.start()
            start = time.perf_counter()
            if mode == MAPPED:
                _map_and_sum(path)
            else:
                done = subprocess.run(dd_command(path, "/dev/null"), capture_output=True)
                if done.returncode:
                    raise BenchError(f"dd of bench/memfs.py ({mode}) failed: {done.stderr!r}")
            rate = mb / (time.perf_counter() - start)
            usage = meter.stop()
        if best is None or rate > best.rate:
            reader = {"numpy": usage.own} if mode == MAPPED else {"dd": usage.children}
            named = ", ".join(f"{name} {seconds:.2f}" for name, seconds in reader.items())
            cpu = f"CPU s: {named}; machine busy {usage.busy:.2f}, idle {usage.idle:.2f}"
            best = Ceiling(mode, rate, usage.busy / mb, cpu)
    assert best is not None
    return best


def _map_and_sum(path: Path) -> float:
    """numpy's sum of the file mapped read-only as float32 (its value unused)."""
    mapped = np.memmap(path, dtype="<f4", mode="r", shape=(path.stat().st_size // 4,))
    try:
        with np.errstate(all="ignore"):  # random bits: infinities and NaNs
            return float(mapped.sum())
    finally:
        del mapped  # unmapped before memfs is unmounted
