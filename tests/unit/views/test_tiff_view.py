"""``array.tif``'s view (views/tiff.py) over an array state, with conventions made
here: bands, CRS and nodata as GDAL reads them; sizes and ranges; read-only."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tifffile
import trio
import zarr

from zarrfs.core.arrays import ArrayState
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.errors import AccessDeniedError
from zarrfs.formats.conventions import Conventions, Crs
from zarrfs.formats.metadata.v2 import parse_array
from zarrfs.stores.directory import DirectoryStore
from zarrfs.views.tiff import TiffView, tiff_view


def state_of(root: Path, name: str) -> ArrayState:
    meta = parse_array(name, (root / name / ".zarray").read_bytes(), None)
    return ArrayState(meta, {}, ChunkCache(DirectoryStore(str(root)), 1 << 22))


@pytest.fixture
def cube(tmp_path: Path) -> tuple[Path, np.ndarray]:
    root = tmp_path / "s.zarr"
    group = zarr.open_group(str(root), mode="w", zarr_format=2)
    data = np.arange(3 * 5 * 7, dtype=">i2").reshape(3, 5, 7)
    z = group.create_array("cube", shape=data.shape, chunks=(2, 2, 4), dtype=">i2")
    z[...] = data
    return root, data


def whole(view: TiffView) -> bytes:
    return trio.run(view.read, 0, view.size + 10)


def test_band_axis_gives_one_image_of_bands_gdal_reads(
    cube: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    root, data = cube
    conventions = Conventions(
        crs=Crs(epsg=32633),
        geotransform=(500000.0, 10.0, 0.0, 4e6, 0.0, -10.0),
        nodata=-1,
        band_axis=0,
        scale_factor=0.1,
    )
    view = TiffView(state_of(root, "cube"), None, conventions, None)
    path = tmp_path / "cube.tif"
    path.write_bytes(whole(view))
    assert path.stat().st_size == view.size
    result = subprocess.run(["gdalinfo", "-json", str(path)], capture_output=True, text=True)
    info = json.loads(result.stdout)
    assert len(info["bands"]) == 3 and info["size"] == [7, 5]
    assert [b["noDataValue"] for b in info["bands"]] == [-1, -1, -1]
    assert [b["scale"] for b in info["bands"]] == [0.1, 0.1, 0.1]
    assert 'ID["EPSG",32633]' in info["coordinateSystem"]["wkt"]
    np.testing.assert_array_equal(tifffile.imread(path), data)


def test_pages_without_a_band_axis_and_any_range(cube: tuple[Path, np.ndarray]) -> None:
    root, data = cube
    view = TiffView(state_of(root, "cube"), None, Conventions(), None)
    everything = whole(view)
    assert everything.endswith(data.tobytes())
    with tifffile.TiffFile(io.BytesIO(everything)) as tif:
        assert len(tif.pages) == 3
    for offset, size in [(0, 3), (5, 300), (100, 1000), (view.size - 4, 100), (view.size, 5)]:
        assert trio.run(view.read, offset, size) == everything[offset : offset + size]


def test_read_only_volatile_and_counted(cube: tuple[Path, np.ndarray]) -> None:
    root, _ = cube
    view = tiff_view(state_of(root, "cube"), None, Conventions, lambda names: None)
    assert view is not None
    assert view.volatile and view.reads_counted and not view.writable
    with pytest.raises(AccessDeniedError):
        trio.run(view.write, 0, b"II")


def test_no_view_where_tiff_cannot_show_the_array(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    group = zarr.open_group(str(root), mode="w", zarr_format=2)
    group.create_array("flags", shape=(4, 3), chunks=(2, 3), dtype="|b1")
    group.create_array("line", shape=(12,), chunks=(4,), dtype="<f4")
    group.create_array("tall", shape=(10**7, 2, 2), chunks=(10**6, 2, 2), dtype="|u1")
    group.create_array("empty", shape=(0, 3), chunks=(2, 3), dtype="<f4")
    for name in ("flags", "line", "tall"):
        assert tiff_view(state_of(root, name), None, Conventions, lambda n: None) is None
    empty = tiff_view(state_of(root, "empty"), None, Conventions, lambda n: None)
    assert empty is not None and empty.size == 0 and whole(empty) == b""
