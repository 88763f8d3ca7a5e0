"""Read-ahead through a real mount: the kernel's read-ahead raised for the mount (or the
log says how), and streamed reads and mappings that see the writes made meanwhile."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import trio

from tests.support.mounting import mounted
from tests.support.stores import zlib_array

ROWS, COLUMNS, CHUNK_ROWS = 64, 256, 4  # 16 chunks of 4 KiB


def write_store(root: Path) -> np.ndarray:
    return zlib_array(root, ROWS, COLUMNS, CHUNK_ROWS)


def bdi_read_ahead(mountpoint: Path) -> int:
    dev = os.stat(mountpoint).st_dev
    path = f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb"
    with open(path) as f:
        return int(f.read())


@pytest.mark.parametrize(("option", "expected"), [((), 1024), (("--readahead", "256K"), 256)])
def test_mount_raises_read_ahead(tmp_path: Path, option: tuple[str, ...], expected: int) -> None:
    write_store(tmp_path / "s.zarr")
    with mounted(tmp_path / "s.zarr", "--read-only", *option) as m:
        assert (m / "array.raw").stat().st_size == ROWS * COLUMNS * 4  # INIT is answered
        if os.geteuid() != 0:  # the bdi file is root's: the log says what to run
            for _ in range(100):
                if f"echo {expected} >" in m.log():
                    return
                trio.run(trio.sleep, 0.02)
            raise AssertionError(m.log())
        for _ in range(100):
            if bdi_read_ahead(m.path) == expected:
                break
            trio.run(trio.sleep, 0.02)
        assert bdi_read_ahead(m.path) == expected


def test_streamed_reads_through_a_mount_see_writes(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    data = write_store(root)
    with mounted(root) as m:
        raw = m / "array.raw"
        assert raw.read_bytes() == data.tobytes()  # cached, and read ahead
        mapped = np.load(m / "array.npy", mmap_mode="r")
        assert float(mapped.sum()) == float(data.sum())
        patch = np.full((8, COLUMNS), -1.0, dtype="<f4")
        with open(raw, "r+b") as f:
            f.seek(10 * COLUMNS * 4)
            f.write(patch.tobytes())
            os.fsync(f.fileno())
        data[10:18] = patch
        assert raw.read_bytes() == data.tobytes()
        assert float(np.asarray(mapped).sum()) == float(data.sum())
        del mapped
