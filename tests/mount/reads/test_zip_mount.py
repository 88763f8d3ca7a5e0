"""A .zip archive in zarr-python's ZipStore layout, mounted for real: read-only
without being told (one line says so), every array byte-identical, sharded ones
read by ranges of the archive; a file that is no zip is refused in one line."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest
import zarr

from tests.support.cli import assert_one_error_line, run_cli
from tests.support.mounting import mounted
from tests.support.stores import plain_and_sharded


def make_zip(path: Path) -> dict[str, np.ndarray]:
    store = zarr.storage.ZipStore(str(path), mode="w")
    arrays = plain_and_sharded(store)
    store.close()
    return arrays


def test_a_zip_archive_mounts_read_only(tmp_path: Path) -> None:
    archive = tmp_path / "data.zip"
    arrays = make_zip(archive)
    with mounted(archive) as m:
        names = [".zarrfs", "group.nc", "plain", "sharded", "zarr.json"]
        assert sorted(os.listdir(m.path)) == names
        for name, data in arrays.items():
            assert (m.path / name / "array.raw").read_bytes() == data.tobytes()
            loaded = np.load(m.path / name / "array.npy", mmap_mode="r")
            assert np.array_equal(loaded, data)
            del loaded
        with pytest.raises(OSError) as info, open(m.path / "plain" / "array.raw", "r+b") as f:
            f.write(b"x")
        assert info.value.errno == errno.EROFS
    log = m.log()
    assert "read-only" in log


def test_a_file_that_is_no_zip_is_refused_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.zip"
    bad.write_bytes(os.urandom(4096))
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    result = run_cli("mount", str(bad), str(mountpoint))
    assert_one_error_line(result, "bad.zip")
    assert not os.path.ismount(mountpoint)
