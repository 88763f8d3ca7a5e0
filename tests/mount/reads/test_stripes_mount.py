"""Stripes through a real mount: tiled and sharded arrays read whole through array.raw and
array.npy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

from tests.support.mounting import mounted


def test_tiles_and_shards_read_through_a_mount(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    tiles = rng.standard_normal((300, 700)).astype("<f4")
    zarr.open_group(str(tmp_path), mode="w", zarr_format=3)
    zarr.create_array(
        store=str(tmp_path / "tiles"),
        shape=tiles.shape,
        chunks=(64, 128),
        dtype="<f4",
        zarr_format=3,
    )[...] = tiles
    zarr.create_array(
        store=str(tmp_path / "shards"),
        shape=tiles.shape,
        chunks=(32, 128),
        shards=(64, 256),
        dtype="<f4",
        zarr_format=3,
    )[...] = tiles
    with mounted(tmp_path, "--read-only") as m:
        for name in ("tiles", "shards"):
            assert (m / name / "array.raw").read_bytes() == tiles.tobytes(), name
            arr = np.load(m / name / "array.npy", mmap_mode="r")
            total = float(np.asarray(arr, dtype="f8").sum())
            del arr
            assert total == pytest.approx(float(tiles.astype("f8").sum()))
