"""A store on a tmpfs of its own (mounted by the test: the tests run as root), and a
store on one left nearly full, for tests of ENOSPC."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import zarr

SHAPE = (256, 1024)
CHUNKS = (64, 1024)
CHUNK_BYTES = CHUNKS[0] * CHUNKS[1]
LEFT_FREE = 16 * 1024  # less than one chunk


@contextmanager
def tiny_tmpfs(path: Path, size: str = "1M") -> Iterator[Path]:
    path.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        check=True,
        capture_output=True,
    )
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


@contextmanager
def full_store(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(array store, filler file) on a tmpfs with less than a chunk left free."""
    with tiny_tmpfs(tmp_path / "tiny") as tiny:
        store = tiny / "a.zarr"
        zarr.create_array(
            store=str(store),
            shape=SHAPE,
            chunks=CHUNKS,
            dtype="u1",
            zarr_format=2,
            compressors=None,
            fill_value=0,
        )
        filler = tiny / "filler"
        with open(filler, "wb") as f:
            f.write(b"\xff" * (free_bytes(tiny) - LEFT_FREE))
        assert free_bytes(tiny) < CHUNK_BYTES, free_bytes(tiny)
        yield store, filler


def random_data() -> bytes:
    return np.random.default_rng().integers(0, 256, SHAPE, dtype="u1").tobytes()
