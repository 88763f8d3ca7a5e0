"""Extended attributes user.zarr.*: pure mapping, and getfattr on a real mount."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from tests.mounting import mounted
from zarrfs.formats.v2 import parse_array, parse_group
from zarrfs.views.xattrs import array_xattrs, group_xattrs


def test_array_xattrs_from_metadata(example_store: Path) -> None:
    temperature = example_store / "weather/temperature"
    meta = parse_array(
        "weather/temperature",
        (temperature / ".zarray").read_bytes(),
        (temperature / ".zattrs").read_bytes(),
    )
    got = array_xattrs(meta)
    assert json.loads(got["user.zarr.shape"]) == [24, 10, 12]
    assert json.loads(got["user.zarr.chunks"]) == [8, 5, 6]
    assert json.loads(got["user.zarr.dtype"]) == "<i2"
    assert got["user.zarr.order"] == b"C"
    assert got["user.zarr.format"] == b"2"
    assert got["user.zarr.fill_value"] == b"0"
    assert json.loads(got["user.zarr.compressor"]) == {"id": "zlib", "level": 1}
    assert json.loads(got["user.zarr.filters"]) is None
    assert json.loads(got["user.zarr.dimensions"]) == ["time", "lat", "lon"]
    assert json.loads(got["user.zarr.attrs.units"]) == "0.1 degC"


def test_group_xattrs(example_store: Path) -> None:
    meta = parse_group("", (example_store / ".zgroup").read_bytes(), b'{"a": [1, 2]}')
    assert group_xattrs(meta) == {"user.zarr.format": b"2", "user.zarr.attrs.a": b"[1, 2]"}


def test_getfattr_on_a_mount(example_store: Path, tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    shutil.copytree(example_store, store)
    with mounted(store, log_dir=tmp_path) as m:
        for path in ("weather/temperature", "weather/temperature/array.raw"):
            out = subprocess.run(
                ["getfattr", "-d", "--absolute-names", str(m / path)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            assert 'user.zarr.shape="[24, 10, 12]"' in out, out
            assert "user.zarr.dimensions=" in out
        assert os.getxattr(m / "foo/bar/array.npy", "user.zarr.shape") == b"[100, 60]"
        assert "user.zarr.attrs.title" in os.listxattr(m.path)
        assert os.listxattr(m / "foo/bar/.zarray") == []
        # the shape attribute follows a resize through the mount
        with open(m / "foo/bar/array.raw", "r+b") as f:
            f.truncate(10 * 60 * 4)
        assert os.getxattr(m / "foo/bar", "user.zarr.shape") == b"[10, 60]"
        try:
            os.setxattr(m / "foo/bar", "user.zarr.shape", b"[1, 1]")
            raise AssertionError("setxattr succeeded")
        except OSError as e:
            assert e.errno in (1, 13, 30, 95)
