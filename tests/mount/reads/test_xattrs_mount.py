"""Extended attributes user.zarr.* on a real mount, as ``getfattr`` shows them."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.support.mounting import mounted


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
