"""Close-to-open through a real mount: another program changes the store under a
read-only mount (an append, a rewritten chunk, a new or removed array, a new
consolidated document), and an open, lookup or stat after ``--metadata-ttl`` (or after
``.zarrfs/refresh``) shows the store as it is now, kernel caches included."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

from tests.support.mounting import mounted

TTL = 0.3


def _raw(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _array(root: Path, name: str, zarr_format: int, rows: int = 4) -> zarr.Array:
    arr = zarr.create_array(
        str(root / name),
        shape=(rows, 3),
        chunks=(2, 3),
        dtype="<i4",
        fill_value=0,
        zarr_format=zarr_format,
    )
    arr[:] = np.arange(rows * 3, dtype="<i4").reshape(rows, 3)
    return arr


def _stale_then_fresh(path: Path, expected: bytes) -> None:
    """After the TTL, an open shows ``expected`` (polled briefly: the mount's clock and
    this process's are the same machine's, but a loaded machine delays the daemon)."""
    time.sleep(TTL * 1.5)
    deadline = time.monotonic() + 5
    while _raw(path) != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _raw(path) == expected


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_an_append_by_another_program_is_seen_after_the_ttl(
    tmp_path: Path, zarr_format: int
) -> None:
    root = tmp_path / "s.zarr"
    zarr.open_group(str(root), mode="w", zarr_format=zarr_format)
    arr = _array(root, "a", zarr_format)
    with mounted(root, "--read-only", "--metadata-ttl", str(TTL)) as m:
        raw = m / "a" / "array.raw"
        assert _raw(raw) == arr[:].tobytes()
        arr.resize((7, 3))
        arr[4:] = np.full((3, 3), 77, dtype="<i4")
        expected = zarr.open_array(str(root / "a"))[:].tobytes()
        _stale_then_fresh(raw, expected)
        assert os.stat(raw).st_size == len(expected) == 7 * 3 * 4
        loaded = np.load(m / "a" / "array.npy")
        assert loaded.shape == (7, 3) and loaded.tobytes() == expected


def test_a_rewritten_chunk_is_seen_after_the_ttl_not_the_cached_one(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    arr = _array(tmp_path, "s.zarr", 2)
    with mounted(root, "--read-only", "--metadata-ttl", str(TTL)) as m:
        raw = m / "array.raw"
        before = _raw(raw)  # in the chunk cache and the kernel's page cache
        assert before == arr[:].tobytes()
        arr[0:2] = -1
        _stale_then_fresh(raw, arr[:].tobytes())


def test_within_the_ttl_the_mount_serves_what_it_knows(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    arr = _array(tmp_path, "s.zarr", 2)
    with mounted(root, "--read-only", "--metadata-ttl", "600") as m:
        raw = m / "array.raw"
        before = _raw(raw)
        arr.resize((6, 3))
        arr[0:2] = -1
        assert _raw(raw) == before and os.stat(raw).st_size == len(before)


def test_refresh_makes_everything_current_now(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    zarr.open_group(str(root), mode="w", zarr_format=2)
    arr = _array(root, "a", 2)
    with mounted(root, "--read-only", "--metadata-ttl", "600") as m:
        raw = m / "a" / "array.raw"
        assert _raw(raw) == arr[:].tobytes()
        assert sorted(os.listdir(m.path)) == [".zarrfs", ".zattrs", ".zgroup", "a", "group.nc"]
        arr.resize((5, 3))
        arr[:] = 5
        _array(root, "b", 2)
        # A read of refresh refreshes: the kernel refuses writes to a read-only mount.
        assert _raw(m / ".zarrfs" / "refresh") == b""
        assert _raw(raw) == arr[:].tobytes()
        assert os.stat(raw).st_size == 5 * 3 * 4
        assert sorted(os.listdir(m.path)) == [".zarrfs", ".zattrs", ".zgroup", "a", "b", "group.nc"]
        assert _raw(m / "b" / "array.raw") == np.arange(12, dtype="<i4").tobytes()


def test_echo_to_refresh_on_a_read_write_mount(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    arr = _array(tmp_path, "s.zarr", 3)
    with mounted(root, "--rw", "--metadata-ttl", "600") as m:
        raw = m / "array.raw"
        assert _raw(raw) == arr[:].tobytes()
        arr[:] = 9
        subprocess.run(["bash", "-c", f"echo 1 > {m / '.zarrfs' / 'refresh'}"], check=True)
        assert _raw(raw) == arr[:].tobytes()


def test_arrays_added_and_removed_by_another_program(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    group = zarr.open_group(str(root), mode="w", zarr_format=3)
    _array(root, "a", 3)
    _array(root, "b", 3)
    with mounted(root, "--read-only", "--metadata-ttl", str(TTL)) as m:
        assert sorted(os.listdir(m.path)) == [".zarrfs", "a", "b", "group.nc", "zarr.json"]
        assert _raw(m / "b" / "array.raw")
        shutil.rmtree(root / "b")
        _array(root, "c", 3, rows=2)
        group.attrs["title"] = "changed"
        time.sleep(TTL * 1.5)
        assert sorted(os.listdir(m.path)) == [".zarrfs", "a", "c", "group.nc", "zarr.json"]
        assert not (m / "b").exists()
        assert _raw(m / "c" / "array.raw") == np.arange(6, dtype="<i4").tobytes()
        assert b"changed" in _raw(m / "zarr.json")
        assert _raw(m / "a" / "array.raw") == np.arange(12, dtype="<i4").tobytes()


def test_xarray_append_to_a_consolidated_store_is_seen(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    first = xr.Dataset(
        {"t2m": (("time", "x"), np.arange(6, dtype="<f4").reshape(2, 3))},
        coords={"time": np.arange(2, dtype="<i8"), "x": np.arange(3, dtype="<i8")},
    )
    first.to_zarr(root, mode="w", consolidated=True, zarr_format=2)
    with mounted(root, "--read-only", "--metadata-ttl", str(TTL)) as m:
        raw = m / "t2m" / "array.raw"
        assert _raw(raw) == first["t2m"].values.tobytes()
        more = xr.Dataset(
            {"t2m": (("time", "x"), np.full((3, 3), 7, dtype="<f4"))},
            coords={"time": np.arange(2, 5, dtype="<i8"), "x": np.arange(3, dtype="<i8")},
        )
        more.to_zarr(root, append_dim="time", consolidated=True)
        expected = zarr.open_array(str(root / "t2m"))[:]
        assert expected.shape == (5, 3)
        _stale_then_fresh(raw, expected.tobytes())
        assert np.load(m / "time" / "array.npy").tolist() == [0, 1, 2, 3, 4]


def _directory_reads(m: Path) -> int:
    return int(json.loads(_raw(m / ".zarrfs" / "stats"))["directory_reads"])


def test_the_kernel_answers_a_listing_again_until_the_names_change(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    zarr.open_group(str(root), mode="w", zarr_format=2)
    _array(root, "a", 2)
    with mounted(root, "--read-only", "--metadata-ttl", "600") as m:
        listed = sorted(os.listdir(m.path))
        assert listed == [".zarrfs", ".zattrs", ".zgroup", "a", "group.nc"]
        before = _directory_reads(m.path)
        for _ in range(3):  # each an open, then readdir answered by the kernel
            assert sorted(os.listdir(m.path)) == listed
            assert sorted(os.listdir(m / "a")) == sorted(os.listdir(m / "a"))
        after_a = _directory_reads(m.path)
        assert sorted(os.listdir(m.path)) == listed
        assert _directory_reads(m.path) == after_a
        # "a" was listed for the first time above: one listing's requests, no more.
        assert after_a - before <= 2
        _array(root, "b", 2)
        assert sorted(os.listdir(m.path)) == listed  # within the TTL
        assert _raw(m / ".zarrfs" / "refresh") == b""
        assert sorted(os.listdir(m.path)) == [*listed[:4], "b", "group.nc"]
        assert _directory_reads(m.path) > after_a
        # The new listing names each entry's new number, as lookups do.
        listed_inodes = {e.name: e.inode() for e in os.scandir(m.path)}
        assert listed_inodes["b"] == os.stat(m / "b").st_ino
        assert listed_inodes["a"] == os.stat(m / "a").st_ino
