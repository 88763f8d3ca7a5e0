"""What CF, xarray, GDAL and zarr-conventions attributes mean, as GDAL (Debian's
gdal-bin) reads it from ``array.hdr`` on a real mount: the CRS, the geotransform,
nodata, scale and offset, and band names from a CF time axis."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
import trio
import zarr

from tests.support.headers import gdalinfo, header_fields, read_exact, require
from tests.support.info import field
from tests.support.mounting import mounted
from tests.support.stores import CountingStore
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.formats.metadata import hierarchy
from zarrfs.namespace.nodes import DirNode, FileNode
from zarrfs.namespace.tree import Tree

HDR = "array.hdr"
LAT = np.arange(89.875, 80, -0.25)  # cell centres, 40 rows, north first
LON = np.arange(-20.125, -10, 0.25)  # 41 columns
DAYS = np.array([0, 31, 60], dtype="<i8")  # 2000-01-01, 2000-02-01, 2000-03-01
DATES = ["2000-01-01T00:00:00", "2000-02-01T00:00:00", "2000-03-01T00:00:00"]


def wkt_of(code: str, form: str = "wkt2") -> str:
    """GDAL's own WKT of ``code``, pretty-printed on many lines as it writes it."""
    result = subprocess.run(
        ["gdalsrsinfo", "-o", form, code], capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


def coordinate(group: zarr.Group, name: str, values: np.ndarray, **attrs: object) -> None:
    z = group.create_array(name, shape=values.shape, chunks=(16,), dtype=values.dtype)
    z[...] = values
    z.attrs.update({"_ARRAY_DIMENSIONS": [name], **attrs})


def packed(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Temperatures in K packed as int16 (scale 0.01, offset 273.15), some missing."""
    values = rng.integers(-2000, 3000, size=shape, dtype="<i2")
    values[..., 0, :3] = -32768
    return values


def cf_store(root: Path) -> dict[str, np.ndarray]:
    """xarray's layout: a CF time axis, lat/lon coordinates, a ``spatial_ref``
    variable named by ``grid_mapping`` (EPSG:4326), packed int16 with _FillValue."""
    rng = np.random.default_rng(3)
    top = zarr.open_group(str(root), mode="w", zarr_format=2)
    top.attrs["Conventions"] = "CF-1.8"
    coordinate(top, "time", DAYS, units="days since 2000-01-01", calendar="standard")
    coordinate(top, "lat", LAT, units="degrees_north")
    coordinate(top, "lon", LON, units="degrees_east")
    ref = top.create_array("spatial_ref", shape=(), dtype="<i8")
    ref.attrs.update({"crs_wkt": wkt_of("EPSG:4326"), "_ARRAY_DIMENSIONS": []})
    values = {}
    for name, days in (("t2m", DAYS), ("bad_time", DAYS)):
        shape = (days.size, LAT.size, LON.size)
        z = top.create_array(name, shape=shape, chunks=(1, 16, 16), dtype="<i2")
        z.attrs.update(
            {
                "_ARRAY_DIMENSIONS": ["time" if name == "t2m" else "when", "lat", "lon"],
                "grid_mapping": "spatial_ref",
                "_FillValue": -32768,
                "scale_factor": 0.01,
                "add_offset": 273.15,
                "units": "K",
                "long_name": "2 metre temperature",
            }
        )
        values[name] = packed(rng, shape)
        z[...] = values[name]
    # A time axis whose units cannot be decoded: the bands are named by index.
    coordinate(top, "when", DAYS, units="fortnights since the flood")
    return values


def test_gdal_sees_the_crs_nodata_scale_offset_and_dates_of_a_cf_array(tmp_path: Path) -> None:
    require("gdalinfo", "gdalsrsinfo")
    root = tmp_path / "cf.zarr"
    values = cf_store(root)
    with mounted(root, "--read-only") as m:
        info = gdalinfo(m / "t2m" / "array.raw", "-stats")
        wkt = info["coordinateSystem"]["wkt"]
        # WKT2 given, WKT1 in the header (GDAL 3.6's ENVI driver reads no WKT2)
        assert wkt.startswith('GEOGCRS["WGS 84"') and wkt.endswith('ID["EPSG",4326]]')
        assert info["geoTransform"] == pytest.approx([-20.25, 0.25, 0, 90.0, 0, -0.25])
        assert [b["description"] for b in info["bands"]] == DATES
        for band, data in zip(info["bands"], values["t2m"]):
            assert band["noDataValue"] == -32768
            assert band["scale"] == 0.01 and band["offset"] == 273.15
            valid = data[data != -32768]
            assert (band["minimum"], band["maximum"]) == (valid.min(), valid.max())
        header = read_exact(m / "t2m" / HDR)
        fields = header_fields(header, "=")
        assert fields["data ignore value"] == "-32768"
        assert fields["data gain values"] == "{0.01, 0.01, 0.01}"
        assert fields["data offset values"] == "{273.15, 273.15, 273.15}"
        info = gdalinfo(m / "bad_time" / "array.raw")
        assert [b["description"] for b in info["bands"]] == ["when=0", "when=1", "when=2"]
        assert "EPSG" in info["coordinateSystem"]["wkt"]
        # The width reserved for dates is kept when they cannot be read (the
        # headers differ by the array's path alone: "bad_time" for "t2m").
        assert len(read_exact(m / "bad_time" / HDR)) == len(header) + 5


def test_info_shows_the_attributes_and_what_they_mean(tmp_path: Path) -> None:
    root = tmp_path / "cf.zarr"
    cf_store(root)
    with mounted(root, "--read-only") as m:
        text = (m / "t2m" / "info").read_text()
    assert field(text, "Conventions") == "CF-1.8"
    assert field(text, "CRS").startswith("EPSG:4326, WGS 84, WKT of ")
    assert field(text, "Coordinates") == "x lon, y lat"
    assert field(text, "Nodata") == "-32768"
    assert (field(text, "Scale factor"), field(text, "Add offset")) == ("0.01", "273.15")
    assert field(text, "Units") == "K"
    assert field(text, "Time axis") == "dimension 0 (time): days since 2000-01-01, standard"
    assert field(text, "long_name") == '"2 metre temperature"'


def test_gdal_sees_a_projected_crs_and_transform_from_attributes(tmp_path: Path) -> None:
    """zarr v3 with the zarr-conventions ``proj:code`` and ``spatial:transform`` (no
    WKT: WGS 84 / UTM 33N is known), and GDAL's own ``GeoTransform`` beside a WKT on
    a grid mapping variable as rioxarray writes it, neither with coordinates."""
    require("gdalinfo", "gdalsrsinfo")
    root = tmp_path / "proj.zarr"
    top = zarr.open_group(str(root), mode="w", zarr_format=3)
    dem = top.create_array(
        "dem", shape=(2, 50, 30), chunks=(1, 16, 16), dtype="<f4",
        dimension_names=["band", "y", "x"], fill_value=float("nan"),
    )  # fmt: skip
    dem[...] = np.arange(3000, dtype="<f4").reshape(2, 50, 30)
    dem.attrs.update(
        {
            "proj:code": "EPSG:32633",
            "spatial:transform": [30.0, 0.0, 500000.0, 0.0, -30.0, 4000000.0],
            "_FillValue": "NaN",
        }
    )
    ref = top.create_array("spatial_ref", shape=(), dtype="<i8")
    ref.attrs.update(
        {"spatial_ref": wkt_of("EPSG:3035", "wkt1"), "GeoTransform": "4000000 10 0 3000000 0 -10"}
    )
    grid = top.create_array("grid", shape=(20, 25), chunks=(16, 16), dtype="<u2")
    grid.attrs["grid_mapping"] = "spatial_ref"
    with mounted(root, "--read-only") as m:
        info = gdalinfo(m / "dem" / "array.raw")
        assert info["geoTransform"] == [500000.0, 30.0, 0.0, 4000000.0, 0.0, -30.0]
        assert info["coordinateSystem"]["wkt"].endswith('ID["EPSG",32633]]')
        assert [b["description"] for b in info["bands"]] == ["band=0", "band=1"]
        assert all(math.isnan(float(b["noDataValue"])) for b in info["bands"])
        info = gdalinfo(m / "grid" / "array.raw")
        assert info["geoTransform"] == [4000000.0, 10.0, 0.0, 3000000.0, 0.0, -10.0]
        assert info["coordinateSystem"]["wkt"].endswith('ID["EPSG",3035]]')
        assert "noDataValue" not in info["bands"][0]


def test_stat_reads_no_chunk_and_a_read_reads_the_time_axis_once(tmp_path: Path) -> None:
    root = tmp_path / "cf.zarr"
    cf_store(root)
    store = CountingStore(str(root))
    tree = Tree(store, ChunkCache(store, 2**22))
    node = tree.resolve("t2m")
    assert isinstance(node, DirNode)
    hdr = tree.lookup(node, HDR)
    assert isinstance(hdr, FileNode)
    size = hdr.view.size
    documents = {*hierarchy.NODE_KEYS, *hierarchy.ROOT_KEYS}

    def chunks_read() -> list[str]:
        return [k for k in store.gets if k.rpartition("/")[2] not in documents]

    assert not chunks_read()
    text = trio.run(hdr.view.read, 0, 1 << 20)
    assert len(text) == size
    assert f"band names = {{{', '.join(DATES)}}}".encode() in text
    read = sorted(k.partition("/")[0] for k in chunks_read())
    assert read == ["lat"] * 3 + ["lon"] * 3 + ["time"]  # every chunk once
