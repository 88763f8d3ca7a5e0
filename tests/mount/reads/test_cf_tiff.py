"""``array.tif`` of xarray-style CF datasets through real mounts, as GDAL (Debian's
gdal-bin, which QGIS reads rasters through) and tifffile read it: the CRS, the
position (north up and south up), a 12-step time axis as bands with their dates,
nodata, scale and offset, and the values, against zarr-python's.

The datasets are written with zarr-python as xarray lays them out (Zarr v2 with
``_ARRAY_DIMENSIONS`` and ``_FillValue`` moved into ``fill_value``; Zarr v3 with
``dimension_names`` and ``_FillValue`` an attribute), and with xarray itself.
A missing program fails these tests (scripts/install.sh installs them): never a skip.
"""

from __future__ import annotations

import math
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tifffile
import xarray as xr
import zarr

from tests.support.headers import gdalinfo, require
from tests.support.info import field
from tests.support.mounting import Mounted, mounted

TIF = "array.tif"
LAT = np.arange(89.875, 80, -0.25)  # cell centres, 40 rows, north first
LON = np.arange(-20.125, -10, 0.25)  # 41 columns
DAYS = np.arange(12, dtype="<i8") * 31  # "days since 2000-01-01"
DATES = [f"{d}T00:00:00" for d in np.datetime64("2000-01-01") + DAYS.astype("m8[D]")]
NORTH_UP = [-20.25, 0.25, 0.0, 90.0, 0.0, -0.25]
SOUTH_UP = [-20.25, 0.25, 0.0, 80.0, 0.0, 0.25]
FILL = -32768
# What each variable is: its y coordinate, its grid mapping, the geotransform GDAL
# should report. "t2m" and "t2m_south_given" take their position from GDAL's
# GeoTransform attribute of their grid mapping; the others from the values of
# their coordinates.
VARIABLES = {
    "t2m": ("lat", "spatial_ref", NORTH_UP),
    "t2m_coords": ("lat", "crs", NORTH_UP),
    "t2m_south": ("lat_south", "crs", SOUTH_UP),
    "t2m_south_given": ("lat_south", "spatial_ref_south", SOUTH_UP),
}


def wkt_of(code: str) -> str:
    """GDAL's own WKT2 of ``code``, pretty-printed on many lines as it writes it."""
    result = subprocess.run(
        ["gdalsrsinfo", "-o", "wkt2", code], capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


def packed(rng: np.random.Generator) -> np.ndarray:
    """Temperatures in K packed as int16 (scale 0.01, offset 273.15), some missing."""
    values = rng.integers(-2000, 3000, size=(DAYS.size, LAT.size, LON.size), dtype="<i2")
    values[:, 0, :3] = FILL
    values[5, 7, 9] = FILL
    return values


def cf_store(root: Path, zarr_format: int) -> dict[str, np.ndarray]:
    """rioxarray's layout, written by zarr-python in xarray's way for ``zarr_format``."""
    top = zarr.open_group(str(root), mode="w", zarr_format=zarr_format)
    top.attrs["Conventions"] = "CF-1.8"
    wkt = wkt_of("EPSG:4326")

    def dimensions(names: list[str]) -> dict:
        return {"dimension_names": names} if zarr_format == 3 else {}

    def named(names: list[str]) -> dict:
        return {"_ARRAY_DIMENSIONS": names} if zarr_format == 2 else {}

    def coordinate(name: str, values: np.ndarray, **attrs: object) -> None:
        z = top.create_array(
            name, shape=values.shape, chunks=(16,), dtype=values.dtype, **dimensions([name])
        )
        z[...] = values
        z.attrs.update({**named([name]), **attrs})

    coordinate("time", DAYS, units="days since 2000-01-01", calendar="proleptic_gregorian")
    coordinate("lat", LAT, units="degrees_north", standard_name="latitude")
    coordinate("lat_south", LAT[::-1].copy(), units="degrees_north")
    coordinate("lon", LON, units="degrees_east", standard_name="longitude")
    for name, attrs in (
        ("spatial_ref", {"GeoTransform": " ".join(map(str, NORTH_UP))}),
        ("spatial_ref_south", {"GeoTransform": " ".join(map(str, SOUTH_UP))}),
        ("crs", {}),
    ):
        ref = top.create_array(name, shape=(), dtype="<i8", **dimensions([]))
        ref.attrs.update({"crs_wkt": wkt, "spatial_ref": wkt, **named([]), **attrs})
    rng = np.random.default_rng(23)
    values = {}
    for name, (lat, mapping, _) in VARIABLES.items():
        names = ["time", lat, "lon"]
        data = packed(rng)
        z = top.create_array(
            name,
            shape=data.shape,
            chunks=(1, 16, 16),
            dtype="<i2",
            # xarray: v2 keeps _FillValue as the Zarr fill value, v3 as an attribute
            fill_value=FILL if zarr_format == 2 else 0,
            **dimensions(names),
        )
        z[...] = data
        z.attrs.update(
            {
                **named(names),
                **({"_FillValue": FILL} if zarr_format == 3 else {}),
                "grid_mapping": mapping,
                "scale_factor": 0.01,
                "add_offset": 273.15,
                "units": "K",
                "long_name": "2 metre temperature",
            }
        )
        values[name] = z[...]
    # A plain array with the default fill value 0 and no xarray dimensions.
    plain = top.create_array("plain", shape=(3, 4, 5), chunks=(3, 4, 5), dtype="<i2")
    plain[...] = np.arange(60, dtype="<i2").reshape(3, 4, 5)
    values["plain"] = plain[...]
    return values


@dataclass
class Dataset:
    mount: Mounted
    values: dict[str, np.ndarray]
    zarr_format: int


@pytest.fixture(scope="module", params=[2, 3], ids=["v2", "v3"])
def dataset(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Dataset]:
    require("gdalinfo", "gdal_translate", "gdallocationinfo", "gdalsrsinfo")
    root = tmp_path_factory.mktemp(f"cf{request.param}") / "cf.zarr"
    values = cf_store(root, request.param)
    with mounted(root, "--read-only", log_dir=root.parent) as m:
        yield Dataset(m, values, request.param)


def valid(values: np.ndarray) -> np.ndarray:
    return values[values != FILL]


@pytest.mark.parametrize("name", sorted(VARIABLES))
def test_gdal_reads_crs_position_bands_dates_nodata_and_scale(dataset: Dataset, name: str) -> None:
    path = dataset.mount / name / TIF
    info = gdalinfo(path, "-stats")
    expected = dataset.values[name]
    assert 'ID["EPSG",4326]' in info["coordinateSystem"]["wkt"]
    assert info["geoTransform"] == VARIABLES[name][2]
    assert info["size"] == [LON.size, LAT.size]
    assert info["metadata"]["IMAGE_STRUCTURE"]["INTERLEAVE"] == "BAND"  # PlanarConfig 2
    assert info["metadata"][""]["long_name"] == "2 metre temperature"
    bands = info["bands"]
    assert len(bands) == DAYS.size
    assert [b["description"] for b in bands] == DATES
    for index, band in enumerate(bands):
        assert band["type"] == "Int16"
        assert band["noDataValue"] == FILL
        assert (band["scale"], band["offset"], band["unit"]) == (0.01, 273.15, "K")
        # statistics leave nodata out
        assert band["minimum"] == valid(expected[index]).min()
        assert band["maximum"] == valid(expected[index]).max()
        percent = float(band["metadata"][""]["STATISTICS_VALID_PERCENT"])
        assert percent == pytest.approx(
            100 * valid(expected[index]).size / expected[0].size, abs=0.01
        )


@pytest.mark.parametrize("name", sorted(VARIABLES))
def test_gdal_translate_and_tifffile_read_zarr_pythons_values(
    dataset: Dataset, name: str, tmp_path: Path
) -> None:
    path = dataset.mount / name / TIF
    expected = dataset.values[name]
    out = tmp_path / "out.raw"
    subprocess.run(["gdal_translate", "-q", "-of", "ENVI", str(path), str(out)], check=True)
    got = np.fromfile(out, dtype="<i2").reshape(expected.shape)
    np.testing.assert_array_equal(got, expected)
    with tifffile.TiffFile(path) as tif:
        page = tif.pages[0]
        assert (len(tif.pages), page.planarconfig, page.samplesperpixel) == (1, 2, DAYS.size)
        np.testing.assert_array_equal(tif.asarray(), expected)
        assert tif.pages[0].tags["GDAL_NODATA"].value == str(FILL)


@pytest.mark.parametrize("name", ["t2m", "t2m_south", "t2m_south_given"])
def test_gdal_finds_values_by_longitude_and_latitude(dataset: Dataset, name: str) -> None:
    """What QGIS's identify tool shows: the values of every band at a position."""
    expected = dataset.values[name]
    south = name.startswith("t2m_south")
    for row, column in ((3, 5), (30, 40)):
        lat = LAT[::-1][row] if south else LAT[row]
        command = ["gdallocationinfo", "-valonly", "-wgs84", str(dataset.mount / name / TIF)]
        result = subprocess.run(
            [*command, str(LON[column]), str(lat)], capture_output=True, text=True, check=True
        )
        got = [int(v) for v in result.stdout.split()]
        assert got == expected[:, row, column].tolist(), (row, column)


def test_unscaled_by_gdal_as_xarray_decodes(dataset: Dataset, tmp_path: Path) -> None:
    out = tmp_path / "kelvin.tif"
    path = dataset.mount / "t2m_south" / TIF
    command = ["gdal_translate", "-q", "-unscale", "-ot", "Float64", "-b", "6", str(path)]
    subprocess.run([*command, str(out)], check=True)
    got = tifffile.imread(out)
    packed_values = dataset.values["t2m_south"][5]
    expected = packed_values * 0.01 + 273.15
    mask = packed_values != FILL
    np.testing.assert_allclose(got[mask], expected[mask])


def test_a_plain_array_gets_no_nodata_from_its_default_fill_value(dataset: Dataset) -> None:
    info = gdalinfo(dataset.mount / "plain" / TIF)
    assert len(info["bands"]) == 1  # three pages: GDAL's subdatasets
    assert "noDataValue" not in info["bands"][0]
    assert "NODATA" not in (dataset.mount / "plain" / "array.hdr").read_text().upper()


# -- written by xarray ------------------------------------------------------------------


def xarray_dataset() -> xr.Dataset:
    rng = np.random.default_rng(5)
    raw = packed(rng)
    kelvin = np.where(raw == FILL, np.nan, raw * 0.01 + 273.15)
    time = xr.Variable(("time",), DAYS, {"units": "days since 2000-01-01"})
    t2m = xr.DataArray(
        kelvin,
        dims=("time", "lat", "lon"),
        coords={"time": time, "lat": LAT, "lon": LON},
        attrs={"grid_mapping": "spatial_ref", "units": "K"},
    )
    t2m.encoding.update(
        {"dtype": "int16", "_FillValue": FILL, "scale_factor": 0.01, "add_offset": 273.15}
    )
    spatial_ref = xr.DataArray(0, attrs={"crs_wkt": wkt_of("EPSG:4326")})
    return xr.Dataset({"t2m": t2m, "spatial_ref": spatial_ref})


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_gdal_reads_what_xarray_wrote(zarr_format: int, tmp_path: Path) -> None:
    require("gdalinfo", "gdalsrsinfo")
    root = tmp_path / "xr.zarr"
    ds = xarray_dataset()
    ds.to_zarr(root, zarr_format=zarr_format, consolidated=zarr_format == 2)
    written = zarr.open_array(str(root / "t2m"), mode="r")
    # Where xarray put _FillValue: the Zarr fill value in v2, an attribute in v3.
    assert ("_FillValue" in written.attrs) == (zarr_format == 3)
    with mounted(root, "--read-only", log_dir=tmp_path) as m:
        info = gdalinfo(m / "t2m" / TIF)
        expected = written[...]
        with tifffile.TiffFile(m / "t2m" / TIF) as tif:
            np.testing.assert_array_equal(tif.asarray(), expected)
    assert 'ID["EPSG",4326]' in info["coordinateSystem"]["wkt"]
    assert info["geoTransform"] == NORTH_UP
    bands = info["bands"]
    assert [b["description"] for b in bands] == DATES
    assert {b["noDataValue"] for b in bands} == {FILL}
    assert {(b["scale"], b["offset"]) for b in bands} == {(0.01, 273.15)}
    opened = xr.open_zarr(root, zarr_format=zarr_format, consolidated=zarr_format == 2)
    decoded = opened["t2m"].values
    unpacked = np.where(expected == FILL, np.nan, expected * 0.01 + 273.15)
    np.testing.assert_allclose(unpacked, decoded)
    assert not math.isnan(float(np.nanmean(decoded)))


def test_info_says_which_files_an_array_has_and_why_not(dataset: Dataset) -> None:
    text = (dataset.mount / "t2m" / "info").read_text()
    assert field(text, "Views") == "array.raw, array.npy, array.hdr, array.nhdr, array.tif"
    assert field(text, "Nodata") == str(FILL)
    assert field(text, "Band axis") == "dimension 0"
    text = (dataset.mount / "lat" / "info").read_text()
    assert field(text, "No array.tif") == "fewer than 2 dimensions"
    assert "array.tif" not in os.listdir(dataset.mount / "lat")


def test_statistics_are_computed_not_saved_beside_the_file(dataset: Dataset) -> None:
    """GDAL (and QGIS through it) cannot save ``array.tif.aux.xml`` in an array's
    directory: it warns, and goes on with the statistics it computed."""
    path = dataset.mount / "t2m" / TIF
    result = subprocess.run(["gdalinfo", "-stats", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "Unable to save auxiliary information" in result.stderr
    assert "STATISTICS_MEAN" in result.stdout
    assert not (dataset.mount / "t2m" / "array.tif.aux.xml").exists()
