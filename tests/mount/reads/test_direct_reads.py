"""Reads of array.raw and array.npy bypass the page cache where the kernel and the
libfuse that scripts/install.sh builds allow shared mappings of direct_io files
(fuse/directio.py): each read is one copy into the reader's buffer, and mmap, shared
or private, read-only or writable, still works. ``--kernel-cache`` keeps the page
cache. Whether a read reached the daemon is told by ``.zarrfs/stats``' bytes_read:
the page cache answers a second read of the same bytes itself."""

from __future__ import annotations

import json
import mmap
from pathlib import Path

import numpy as np
import pytest
import zarr

from tests.support.mounting import Mounted, mounted

SHAPE, CHUNKS = (256, 512), (64, 128)


def tiles(root: Path) -> np.ndarray:
    data = np.arange(np.prod(SHAPE), dtype="<f4").reshape(SHAPE)
    zarr.create_array(store=str(root), shape=SHAPE, chunks=CHUNKS, dtype="<f4")[...] = data
    return data


def stats(m: Mounted) -> dict:
    return json.loads((m / ".zarrfs" / "stats").read_bytes())


def settled(m: Mounted) -> dict:
    """The stats once the mount knows whether it reads direct: it asks at the first
    open of array data (and says so in its log either way)."""
    with open(m / "array.raw", "rb") as f:
        f.read(1)
    log = m.log()
    assert "page cache" in log, log
    return stats(m)


def test_reads_bypass_the_page_cache_and_mappings_still_work(tmp_path: Path) -> None:
    data = tiles(tmp_path)
    with mounted(tmp_path, "--read-only") as m:
        before = settled(m)
        assert before["direct_reads"] is True
        raw = m / "array.raw"
        for _ in range(2):
            assert raw.read_bytes() == data.tobytes()
        # Both reads reached the daemon: nothing was kept in the page cache.
        assert stats(m)["bytes_read"] - before["bytes_read"] == 2 * data.nbytes
        npy = np.load(m / "array.npy", mmap_mode="r")  # MAP_SHARED, read-only
        assert isinstance(npy, np.memmap) and np.array_equal(npy, data)
        del npy
        with open(raw, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            assert mm[: data.nbytes] == data.tobytes()
        with open(raw, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) as mm:
            mm[:4] = b"\0\0\0\0"  # a private copy: the file is unchanged
        assert raw.read_bytes()[:4] == data.tobytes()[:4]


def test_kernel_cache_reads_through_the_page_cache(tmp_path: Path) -> None:
    data = tiles(tmp_path)
    with mounted(tmp_path, "--read-only", "--kernel-cache") as m:
        assert stats(m)["direct_reads"] is False
        raw = m / "array.raw"
        for _ in range(2):
            assert raw.read_bytes() == data.tobytes()
        assert stats(m)["bytes_read"] == data.nbytes  # the second read: the kernel's
        assert np.array_equal(np.load(m / "array.npy", mmap_mode="r"), data)


@pytest.mark.parametrize("options", [(), ("--kernel-cache",)], ids=["direct", "kernel-cache"])
def test_a_writable_shared_mapping_stores_what_it_changed(
    tmp_path: Path, options: tuple[str, ...]
) -> None:
    data = tiles(tmp_path)
    with mounted(tmp_path, "--rw", *options) as m:
        if not options:
            assert settled(m)["direct_reads"] is True
        arr = np.load(m / "array.npy", mmap_mode="r+")
        arr[10, 20:30] = -1.0
        arr[200, :] = 7.0
        arr.flush()  # msync: the pages reach the daemon as writes, then an fsync
        expected = data.copy()
        expected[10, 20:30] = -1.0
        expected[200, :] = 7.0
        # In the store now, before any close or unmount.
        assert np.array_equal(zarr.open_array(str(tmp_path), mode="r")[...], expected)
        del arr
        assert (m / "array.raw").read_bytes() == expected.tobytes()
    assert np.array_equal(zarr.open_array(str(tmp_path), mode="r")[...], expected)


def test_a_write_is_seen_by_a_mapping_made_after_it(tmp_path: Path) -> None:
    data = tiles(tmp_path)
    with mounted(tmp_path, "--rw") as m:
        settled(m)
        raw = m / "array.raw"
        with open(raw, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            assert mm[:8] == data.tobytes()[:8]
        with open(raw, "r+b") as f:
            f.write(b"\x01\x02\x03\x04")
        with open(raw, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            assert mm[:8] == b"\x01\x02\x03\x04" + data.tobytes()[4:8]
