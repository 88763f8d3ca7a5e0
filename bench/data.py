"""The data the sections read and write, the stores zarr-python makes of it, and the
checks that what was read or written is that data.

The v2 sections' array is float32, rows of 1024 values (4 KiB), chunks of 256 rows
(1 MiB); its values are smooth waves plus a little Gaussian noise, so that it
compresses like measured data rather than like a formula.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import zarr
import zarr.codecs

from bench.results import BenchError

MiB = 2**20
PAGE = 4096
COLUMNS = 1024  # a row is 4 KiB of float32
CHUNK_ROWS = 256  # a chunk is 256 rows: 1 MiB

CODECS: dict[str, Callable[[], Any]] = {
    "blosc-lz4": lambda: numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE),
    "zlib-1": lambda: numcodecs.Zlib(level=1),
}


def blosc_lz4_v3() -> zarr.codecs.BloscCodec:
    """CODECS["blosc-lz4"] as a Zarr v3 codec."""
    return zarr.codecs.BloscCodec(
        cname="lz4", clevel=5, shuffle=zarr.codecs.BloscShuffle.shuffle, typesize=4
    )


def smooth(rows: slice, offset: float = 0.0) -> np.ndarray:
    """Smooth float32 values for the given rows (a field of waves plus a slow trend)."""
    i = np.arange(rows.start, rows.stop, dtype=np.float64)[:, None]
    j = np.arange(COLUMNS, dtype=np.float64)[None, :]
    values = 100.0 * np.sin(i / 700.0 + offset) * np.cos(j / 90.0) + i * 1e-3 + offset
    return values.astype("<f4")


def make_data(rows: int, offset: float = 0.0, noise: float = 0.0) -> np.ndarray:
    """``smooth`` values, plus Gaussian noise of this deviation (so it compresses like
    measured data rather than like a formula)."""
    data = np.empty((rows, COLUMNS), dtype="<f4")
    rng = np.random.default_rng(int(offset * 1000))
    for start in range(0, rows, 4096):
        block = slice(start, min(rows, start + 4096))
        data[block] = smooth(block, offset)
        if noise:
            data[block] += rng.normal(0.0, noise, data[block].shape).astype("<f4")
    return data


def new_group(store: Path) -> None:
    zarr.open_group(str(store), mode="w", zarr_format=2)


def add_array(store: Path, name: str, codec: str, rows: int) -> zarr.Array:
    """An empty v2 array ``name`` in the group at ``store`` (chunks of 1 MiB)."""
    return zarr.create_array(
        store=str(store / name),
        shape=(rows, COLUMNS),
        chunks=(CHUNK_ROWS, COLUMNS),
        dtype="<f4",
        zarr_format=2,
        compressors=CODECS[codec](),
        fill_value=0.0,
    )


def create_array(store: Path, rows: int, codec: str, initial: np.ndarray) -> zarr.Array:
    """A v2 group holding array ``arr`` (chunks of 1 MiB), filled with ``initial``."""
    new_group(store)
    z = add_array(store, "arr", codec, rows)
    z[...] = initial
    return z


def warm(store: Path) -> None:
    """Read every file of the store once, so its compressed chunks are in the page cache."""
    for directory, _, files in os.walk(store):
        for name in files:
            with open(os.path.join(directory, name), "rb") as f:
                while f.read(16 * MiB):
                    pass


def store_bytes(store: Path) -> int:
    """The bytes of every file of the store."""
    return sum(
        os.path.getsize(os.path.join(directory, name))
        for directory, _, files in os.walk(store)
        for name in files
    )


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def check_store(store: Path, data: np.ndarray, what: str) -> None:
    """Spot-check a few chunks (first, last, random ones) against the data."""
    z = zarr.open_array(str(store / "arr"), mode="r")
    chunks = -(-data.shape[0] // CHUNK_ROWS)
    for c in {0, chunks - 1, *random.sample(range(chunks), min(3, chunks))}:
        rows = slice(c * CHUNK_ROWS, min(data.shape[0], (c + 1) * CHUNK_ROWS))
        if not np.array_equal(z[rows], data[rows]):
            raise BenchError(f"{what}: chunk {c} holds other values than were written")


def check_file(path: Path, data: np.ndarray, what: str) -> None:
    """Compare the first and last MiB of a flat file with the data's bytes."""
    raw = data.reshape(-1).view(np.uint8)
    with open(path, "rb") as f:
        for offset in (0, max(0, raw.size - MiB)):
            f.seek(offset)
            if f.read(MiB) != raw[offset : offset + MiB].tobytes():
                raise BenchError(f"{what}: {path.name} at {offset} differs from the array")
