"""Read-ahead through a real mount: the kernel's read-ahead raised for the mount (or the
log says how), and streamed reads and mappings that see the writes made meanwhile."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import trio
import zarr

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


def test_the_daemon_exits_cleanly_while_read_ahead_decodes(tmp_path: Path) -> None:
    """Unmounted while its decoders still inflate tiles read ahead (libdeflate, with
    the GIL released), the daemon lets them end before it exits: its interpreter's
    teardown freed what they wrote into, and glibc aborted (``free(): corrupted``)
    or the process crashed, most times. ``mounted`` fails on a crash signal."""
    root = tmp_path / "tiles.zarr"
    data = np.random.default_rng(0).random((2048, 8192), dtype=np.float32)  # 64 MiB
    z = zarr.create_array(
        str(root), shape=data.shape, chunks=(256, 1024), dtype="<f4", zarr_format=2,
        compressors=[{"id": "zlib", "level": 1}],
    )  # fmt: skip
    z[...] = data
    size = data.nbytes
    for _ in range(3):
        with mounted(root, "--read-only") as m, open(m / "array.raw", "rb") as f:
            while f.read(1 << 20):
                pass
            # Read again from the start: the stripes after it are read ahead.
            assert os.pread(f.fileno(), 1 << 20, 0) == data[:32].tobytes()
            assert os.pread(f.fileno(), 1 << 20, size - (1 << 20)) == data[-32:].tobytes()
