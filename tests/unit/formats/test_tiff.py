"""The TIFF layout of ``array.tif`` (formats/tiff): header + the array's bytes, read
back by tifffile (and, for the geo tags, by GDAL's gdalinfo) from memory."""

from __future__ import annotations

import io
import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tifffile
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrfs.formats.conventions import Conventions, Crs
from zarrfs.formats.tiff import TiffLayout, geo_tags, header_bytes, tiff_layout, tiff_sample
from zarrfs.formats.tiff.geo import (
    MAX_METADATA_BANDS,
    MAX_WKT,
    NORTH_UP,
    TURNED,
    metadata_xml,
)
from zarrfs.formats.tiff.header import further_ifds, ifd_bytes
from zarrfs.formats.tiff.layout import CLASSIC_LIMIT, MAX_HEADER, MAX_STRIP

DTYPES = ["|u1", "|i1", "<u2", ">u2", "<i2", ">i2", "<u4", ">i4", "<u8", ">i8"]
DTYPES += ["<f2", ">f2", "<f4", ">f4", "<f8", ">f8", "<c8", ">c8", "<c16", ">c16"]
SHAPES = [(1, 1), (5, 7), (13, 1), (1, 9), (3, 5, 7), (2, 3, 4, 5), (1, 1, 2, 1, 3)]
NO_TIFF = ["|b1", "|S5", "<U3", "|V8", "<M8[s]", "<m8[ms]", "<f16"]
STRUCTURED = np.dtype([("a", "<i4"), ("b", "<f4")])


def values(dtype: np.dtype, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    native = dtype.newbyteorder("=")
    if dtype.kind in "iu":
        info = np.iinfo(native)
        out = rng.integers(info.min, info.max, size=shape, dtype=native, endpoint=True)
    elif dtype.kind == "f":
        out = (rng.standard_normal(shape) * 100).astype(native)
    else:
        out = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(native)
    return out.astype(dtype)


def tiff_file(layout: TiffLayout, data: np.ndarray, geotransform=None) -> bytes:
    out = header_bytes(layout, 0, layout.data_offset, geotransform) + data.tobytes()
    assert len(out) == layout.file_size
    return out


def layout_of(dtype: np.dtype, shape: tuple[int, ...], **kwargs: object) -> TiffLayout:
    found = tiff_layout(dtype, shape, **kwargs)  # type: ignore[arg-type]
    assert isinstance(found, TiffLayout), found
    return found


@pytest.mark.parametrize("bigtiff", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_tifffile_reads_the_array(dtype: str, shape: tuple[int, ...], bigtiff: bool) -> None:
    data = values(np.dtype(dtype), shape)
    layout = layout_of(data.dtype, shape, bigtiff=bigtiff)
    with tifffile.TiffFile(io.BytesIO(tiff_file(layout, data))) as tif:
        assert tif.is_bigtiff == bigtiff
        assert tif.byteorder == (">" if layout.order == ">" else "<")
        assert len(tif.pages) == math.prod(shape[:-2])
        read = tif.asarray(key=range(len(tif.pages))) if len(tif.pages) > 1 else tif.asarray()
    np.testing.assert_array_equal(read.reshape(shape), data)
    assert (layout.order == ">") == (np.dtype(dtype).byteorder == ">")


@settings(max_examples=80, deadline=None)
@given(
    dtype=st.sampled_from(DTYPES),
    shape=st.lists(st.integers(1, 6), min_size=2, max_size=4).map(tuple),
    bigtiff=st.booleans(),
    bands=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_any_array_reads_back(
    dtype: str, shape: tuple[int, ...], bigtiff: bool, bands: bool, seed: int
) -> None:
    data = values(np.dtype(dtype), shape, seed)
    layout = layout_of(data.dtype, shape, bigtiff=bigtiff, bands=bands)
    with tifffile.TiffFile(io.BytesIO(tiff_file(layout, data))) as tif:
        pages = len(tif.pages)
        read = tif.asarray(key=range(pages)) if pages > 1 else tif.asarray()
    assert pages == layout.pages
    np.testing.assert_array_equal(read.reshape(shape), data)


@pytest.mark.parametrize("dtype", ["|u1", ">i2", "<f4", ">c16"])
def test_bands_are_one_image_of_separate_planes(dtype: str) -> None:
    shape = (4, 6, 5)
    data = values(np.dtype(dtype), shape, 3)
    layout = layout_of(data.dtype, shape, bands=True)
    assert (layout.pages, layout.samples) == (1, 4)
    with tifffile.TiffFile(io.BytesIO(tiff_file(layout, data))) as tif:
        page = tif.pages[0]
        assert (len(tif.pages), page.planarconfig, page.samplesperpixel) == (1, 2, 4)
        assert list(page.extrasamples) == [0, 0, 0]
        np.testing.assert_array_equal(tif.asarray(), data)


def test_bands_apply_to_three_dimensions_only() -> None:
    layout = layout_of(np.dtype("<u2"), (2, 3, 4, 5), bands=True)
    assert (layout.pages, layout.samples) == (6, 1)


@pytest.mark.parametrize(
    "dtype, shape",
    [("<f8", (3, 1000, 1000)), ("|u1", (5, 3 << 20)), ("<u2", (100000, 3)), (">f4", (7, 70000))],
)
def test_strips_are_bounded_and_whole_rows(dtype: str, shape: tuple[int, ...]) -> None:
    layout = layout_of(np.dtype(dtype), shape)
    row = shape[-1] * np.dtype(dtype).itemsize
    assert layout.rows_per_strip >= 1
    assert layout.rows_per_strip * row <= max(MAX_STRIP, row)
    assert layout.strips_per_plane == -(-shape[-2] // layout.rows_per_strip)
    header = header_bytes(layout, 0, layout.data_offset)
    # Parse the IFDs without data: tifffile reads the strip tables lazily.
    with tifffile.TiffFile(io.BytesIO(header + b"\0" * 16)) as tif:
        page = tif.pages[0]
        assert page.rowsperstrip == layout.rows_per_strip
        assert page.dataoffsets[0] == layout.data_offset
        assert sum(page.databytecounts) == layout.plane_bytes
        assert all(0 < n <= max(MAX_STRIP, row) for n in page.databytecounts)


def test_classic_below_4_gib_bigtiff_from_there() -> None:
    small = layout_of(np.dtype("<u1"), (65535, 65535))
    assert not small.bigtiff and small.file_size < CLASSIC_LIMIT
    large = layout_of(np.dtype("<u1"), (65537, 65537))
    assert large.bigtiff and large.file_size >= CLASSIC_LIMIT
    header = header_bytes(large, 0, large.data_offset)
    with tifffile.TiffFile(io.BytesIO(header)) as tif:
        assert tif.is_bigtiff
        offsets = tif.pages[0].dataoffsets
        assert offsets[-1] + tif.pages[0].databytecounts[-1] == large.file_size
    assert layout_of(np.dtype("<u1"), (4, 4), bigtiff=False).bigtiff is False


@pytest.mark.parametrize("dtype", NO_TIFF)
def test_dtypes_without_a_tiff_sample_have_no_file(dtype: str) -> None:
    assert tiff_sample(np.dtype(dtype)) is None
    assert isinstance(tiff_layout(np.dtype(dtype), (3, 4)), str)


def test_other_arrays_without_a_file() -> None:
    assert isinstance(tiff_layout(STRUCTURED, (3, 4)), str)
    assert isinstance(tiff_layout(np.dtype("<f4"), (7,)), str)
    assert isinstance(tiff_layout(np.dtype("<f4"), ()), str)
    assert "length 0" in str(tiff_layout(np.dtype("<f4"), (0, 4)))
    assert "header" in str(tiff_layout(np.dtype("<f4"), (10**7, 2, 2)))
    assert "header" in str(tiff_layout(np.dtype("<u1"), (10**6, 1, 1)))
    assert "bands" in str(tiff_layout(np.dtype("<u1"), (70000, 1, 1), bands=True))
    big = tiff_layout(np.dtype("<u1"), (300000, 1, 1))
    assert isinstance(big, TiffLayout) and big.data_offset <= MAX_HEADER


@settings(max_examples=60, deadline=None)
@given(
    pages=st.integers(1, 40),
    height=st.integers(1, 50),
    width=st.integers(1, 50),
    bigtiff=st.booleans(),
    geo=st.booleans(),
    data=st.data(),
)
def test_any_range_of_the_header_is_that_slice_of_it(
    pages: int, height: int, width: int, bigtiff: bool, geo: bool, data: st.DataObject
) -> None:
    tags = geo_tags(Conventions(crs=Crs(epsg=4326), nodata=-1), coordinates=True) if geo else None
    kwargs = {"geo": tags} if tags is not None else {}
    layout = layout_of(np.dtype(">i2"), (pages, height, width), bigtiff=bigtiff, **kwargs)
    whole = header_bytes(layout, 0, layout.data_offset, NORTH_UP)
    assert len(whole) == layout.data_offset
    offset = data.draw(st.integers(0, layout.data_offset + 10))
    size = data.draw(st.integers(0, layout.data_offset + 10))
    assert header_bytes(layout, offset, size, NORTH_UP) == whole[offset : offset + size]


@pytest.mark.parametrize("bigtiff", [False, True])
@pytest.mark.parametrize("shape", [(5, 3, 4), (6, 2, 600, 1000), (40, 1, 1)], ids=str)
def test_ifds_made_at_once_are_those_made_one_by_one(shape: tuple[int, ...], bigtiff: bool) -> None:
    layout = layout_of(np.dtype(">f8"), shape, bigtiff=bigtiff)
    one_by_one = b"".join(ifd_bytes(layout, i, None) for i in range(layout.pages))
    start = layout.ifd_offset(0)
    assert header_bytes(layout, start, len(one_by_one)) == one_by_one
    assert further_ifds(layout, 2, layout.pages - 2) == one_by_one[layout.ifd_offset(2) - start :]


# -- geo tags ---------------------------------------------------------------------------

UTM_WKT = (
    'PROJCS["WGS 84 / UTM zone 33N",GEOGCS["WGS 84",DATUM["WGS_1984",SPHEROID["WGS 84",'
    '6378137,298.257223563]],PRIMEM["Greenwich",0],UNIT["degree",0.0174532925199433]],'
    'PROJECTION["Transverse_Mercator"],PARAMETER["latitude_of_origin",0],'
    'PARAMETER["central_meridian",15],PARAMETER["scale_factor",0.9996],'
    'PARAMETER["false_easting",500000],PARAMETER["false_northing",0],UNIT["metre",1]]'
)
GT = (500000.0, 10.0, 0.0, 4000000.0, 0.0, -10.0)


def gdalinfo(path: Path) -> dict:
    result = subprocess.run(["gdalinfo", "-json", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def write(
    path: Path,
    conventions: Conventions,
    geotransform: tuple[float, ...] | None = None,
    *,
    bands: bool = False,
    coordinates: bool = False,
) -> Path:
    shape = (2, 3, 4) if bands else (3, 4)
    data = np.arange(math.prod(shape), dtype="<f4").reshape(shape)
    geo = geo_tags(conventions, bands=shape[0] if bands else 1, coordinates=coordinates)
    layout = layout_of(data.dtype, shape, geo=geo, bands=bands)
    path.write_bytes(tiff_file(layout, data, geotransform))
    return path


def test_gdal_reads_an_epsg_crs_position_nodata_scale_offset_and_description(
    tmp_path: Path,
) -> None:
    conventions = Conventions(
        crs=Crs(epsg=32633),
        geotransform=GT,
        nodata=-9999,
        scale_factor=0.5,
        add_offset=1.0,
        long_name='air <temperature> "2 m" & more',
        units="K",
    )
    info = gdalinfo(write(tmp_path / "a.tif", conventions))
    assert info["geoTransform"] == list(GT)
    assert 'ID["EPSG",32633]' in info["coordinateSystem"]["wkt"]
    assert info["metadata"][""]["AREA_OR_POINT"] == "Area"
    band = info["bands"][0]
    assert band["noDataValue"] == -9999
    assert (band["scale"], band["offset"], band["unit"]) == (0.5, 1.0, "K")
    assert band["description"] == 'air <temperature> "2 m" + more'


@pytest.mark.parametrize(
    "south_up",
    [(10.0, 0.5, 0.0, 50.0, 0.0, 0.25), (10.0, -0.5, 0.0, 50.0, 0.0, -0.25)],
    ids=["y increasing", "x decreasing"],
)
def test_gdal_reads_a_geographic_crs_and_a_south_up_grid(
    tmp_path: Path, south_up: tuple[float, ...]
) -> None:
    conventions = Conventions(crs=Crs(epsg=4326), geotransform=south_up, nodata=float("nan"))
    info = gdalinfo(write(tmp_path / "a.tif", conventions))
    assert info["geoTransform"] == list(south_up)
    assert 'ID["EPSG",4326]' in info["coordinateSystem"]["wkt"]
    assert info["bands"][0]["noDataValue"] == "NaN"


def test_gdal_reads_a_crs_known_by_its_wkt_alone(tmp_path: Path) -> None:
    info = gdalinfo(write(tmp_path / "a.tif", Conventions(crs=Crs(wkt=UTM_WKT), geotransform=GT)))
    assert info["coordinateSystem"]["wkt"].startswith('PROJCRS["WGS 84 / UTM zone 33N"')
    assert info["geoTransform"] == list(GT)
    too_long = Crs(wkt=UTM_WKT + " " * MAX_WKT)
    info = gdalinfo(write(tmp_path / "b.tif", Conventions(crs=too_long, geotransform=GT)))
    assert "coordinateSystem" not in info and info["geoTransform"] == list(GT)


@pytest.mark.parametrize("geotransform", [None, GT, (1.0, 2.0, 0.0, 3.0, 0.0, 4.0)])
def test_geotransform_from_coordinates_has_a_fixed_size(
    tmp_path: Path, geotransform: tuple[float, ...] | None
) -> None:
    conventions = Conventions(crs=Crs(epsg=32633), x_coordinate="x", y_coordinate="y")
    path = write(tmp_path / "a.tif", conventions, geotransform, coordinates=True)
    geo = geo_tags(conventions, coordinates=True)
    # One size whatever the coordinates give: the larger form's room is kept.
    assert path.stat().st_size == layout_of(np.dtype("<f4"), (3, 4), geo=geo).data_offset + 48
    info = gdalinfo(path)
    assert info.get("geoTransform", [0, 1, 0, 0, 0, 1]) == list(geotransform or (0, 1, 0, 0, 0, 1))
    assert 'ID["EPSG",32633]' in info["coordinateSystem"]["wkt"]


def test_gdal_reads_bands_with_their_scale(tmp_path: Path) -> None:
    conventions = Conventions(scale_factor=2.0, band_axis=0)
    info = gdalinfo(write(tmp_path / "a.tif", conventions, bands=True))
    assert [b["scale"] for b in info["bands"]] == [2.0, 2.0]
    assert "geoTransform" not in info


def test_band_metadata_is_bounded() -> None:
    conventions = Conventions(scale_factor=2.0, units="K")
    assert metadata_xml(conventions, MAX_METADATA_BANDS) is not None
    assert metadata_xml(conventions, MAX_METADATA_BANDS + 1) is None


def test_turned_stands_for_the_larger_form() -> None:
    small = geo_tags(Conventions(geotransform=NORTH_UP)).entries(None)
    large = geo_tags(Conventions(geotransform=TURNED)).entries(None)
    assert sum(e[2] for e in small if e[1] == 12) < sum(e[2] for e in large if e[1] == 12)
