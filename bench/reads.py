"""Whole-array reads, timed: zarr-python 3's ``z[:]`` and ``z[:].sum()``, tensorstore's
``read()``, and numpy's sum of an ``array.npy`` mapped from a mount.

Each reader opens the array fresh, so no reader is helped by a cache another one
filled; the time is the read's alone (opening excluded).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import zarr

from bench.results import BenchError


def zarr_read(store: Path) -> tuple[np.ndarray, float]:
    """The whole array ``arr`` read by zarr-python's ``z[:]``, and its seconds."""
    z = zarr.open_array(str(store / "arr"), mode="r")
    start = time.perf_counter()
    out = z[:]
    return out, time.perf_counter() - start


def zarr_sum(store: Path) -> tuple[float, float]:
    """zarr-python's ``z[:].sum()`` of ``arr`` and its seconds."""
    z = zarr.open_array(str(store / "arr"), mode="r")
    start = time.perf_counter()
    total = float(z[:].sum())
    return total, time.perf_counter() - start


def npy_sum(path: Path) -> tuple[float, float]:
    """``np.load(path, mmap_mode="r").sum()`` and its seconds (unmapped after)."""
    start = time.perf_counter()
    mapped = np.load(path, mmap_mode="r")
    total = float(mapped.sum())
    elapsed = time.perf_counter() - start
    del mapped  # unmap before unmounting
    return total, elapsed


def tensorstore_read(store: Path, driver: str = "zarr3") -> tuple[np.ndarray, float]:
    """The whole array ``arr`` read by tensorstore (no cache pool: its default;
    ``driver``: zarr3, or zarr for Zarr v2), and the seconds of the read alone."""
    try:
        import tensorstore
    except ImportError as e:
        raise BenchError(
            "tensorstore is not installed (it is in the test extra: scripts/install.sh)"
        ) from e
    spec = {"driver": driver, "kvstore": {"driver": "file", "path": str(store / "arr")}}
    array = tensorstore.open(spec, open=True, read=True).result()
    start = time.perf_counter()
    out = array.read().result()
    return out, time.perf_counter() - start
