"""The meaning of the values in ENVI's header (formats/sidecars.py): CRS, nodata,
gains and offsets, band names; their text, its safety, and a size that no value
read at read time changes."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrfs.formats.conventions.cf import MAX_BANDS, TIME_LABEL_WIDTH, known_wkt
from zarrfs.formats.sidecars import (
    MapInfo,
    band_names,
    envi_header,
    geotransform_map_info,
    map_info_line,
)

DIMS = ("time", "lat", "lon")


def lines(header: bytes) -> list[str]:
    return header.decode("ascii").splitlines()


def test_envi_header_with_meaning() -> None:
    wkt = known_wkt(4326)
    header = envi_header(
        np.dtype("<i2"),
        (2, 3, 4),
        path="t2m",
        dimensions=DIMS,
        map_info=map_info_line(geotransform_map_info((-20, 0.25, 0, 90, 0, -0.25)), None),
        crs_wkt=wkt,
        nodata=-32768,
        scale=0.01,
        offset=273.15,
        names=band_names((2, 3, 4), DIMS, time_axis=0, time_labels=["2000-01-01T00:00:00"] * 2),
    )
    rows = lines(header)
    assert rows[10].rstrip() == "map info = {Arbitrary, 1, 1, -20.0, 90.0, 0.25, 0.25, 0, North}"
    assert rows[11:] == [
        f"coordinate system string = {{{wkt}}}",
        "data ignore value = -32768",
        "data gain values = {0.01, 0.01}",
        "data offset values = {273.15, 273.15}",
        "band names = {2000-01-01T00:00:00, 2000-01-01T00:00:00}",
    ]


def test_nodata_gain_and_offset_numbers() -> None:
    def fields(**meaning: object) -> list[str]:
        return lines(envi_header(np.dtype("<f4"), (3, 2, 2), path="a", dimensions=None, **meaning))[
            10:
        ]

    assert fields(nodata=math.nan) == ["data ignore value = nan"]
    assert fields(scale=2.0) == [
        "data gain values = {2.0, 2.0, 2.0}",
        "data offset values = {0.0, 0.0, 0.0}",
    ]
    assert fields(offset=-1.5)[0] == "data gain values = {1.0, 1.0, 1.0}"
    # one value per band, and no more bands than MAX_BANDS get them
    many = envi_header(np.dtype("<f4"), (MAX_BANDS + 1, 1, 1), path="a", dimensions=None, scale=2.0)
    assert b"gain" not in many


def test_a_wkt_that_could_break_the_header_is_left_out() -> None:
    for wkt in ('GEOGCS["x"]}\nmap info = {UTM', 'GEOGCS["caf\u00e9"]', 'GEOGCS["x"]\x00'):
        header = envi_header(np.dtype("u1"), (2, 2), path="a", dimensions=None, crs_wkt=wkt)
        assert b"coordinate system string" not in header


def test_geotransform_map_info() -> None:
    assert geotransform_map_info((1, 2, 0, 3, 0, -4)) == MapInfo(x0=1, y0=3, dx=2, dy=-4)
    assert geotransform_map_info((1, 2, 0.1, 3, 0, -4)) is None  # rotated
    assert geotransform_map_info((1, -2, 0, 3, 0, -4)) is None  # x decreasing
    assert geotransform_map_info((1, 2, 0, 3, 0, 0)) is None
    assert geotransform_map_info((math.inf, 2, 0, 3, 0, -4)) is None
    assert geotransform_map_info(None) is None


def test_band_names() -> None:
    assert band_names((2, 3, 4), DIMS) == ["time=0", "time=1"]
    assert band_names((2, 2, 3, 4), ("t", "z", "y", "x")) == [
        "t=0 z=0",
        "t=0 z=1",
        "t=1 z=0",
        "t=1 z=1",
    ]
    assert band_names((2, 3, 4), None) == ["dim0=0", "dim0=1"]
    assert band_names((2, 3, 4), ("a,b}{", "y", "x")) == ["a?b??=0", "a?b??=1"]
    assert band_names((3, 4), ("y", "x")) is None
    assert band_names((MAX_BANDS + 1, 1, 1), None) is None
    assert band_names((0, 1, 1), None) is None


@settings(max_examples=200, deadline=None)
@given(
    shape=st.lists(st.integers(1, 12), min_size=3, max_size=5),
    name=st.text(max_size=60),
    time_axis=st.integers(0, 2),
    read=st.booleans(),
)
def test_band_names_have_one_width_whatever_the_dates(
    shape: list[int], name: str, time_axis: int, read: bool
) -> None:
    dims = (name, *[f"d{i}" for i in range(1, len(shape))])
    time_axis = min(time_axis, len(shape) - 3)
    dates = ["1999-12-31T23:59:59"] * shape[time_axis] if read else None
    names = band_names(shape, dims, time_axis=time_axis, time_labels=dates)
    unread = band_names(shape, dims, time_axis=time_axis)
    assert names is not None and unread is not None
    assert len(names) == math.prod(shape[:-2])
    assert {len(n) for n in names} == {len(unread[0])}
    header = envi_header(np.dtype("u1"), shape, path="a", dimensions=dims, names=names)
    assert len(header) == len(
        envi_header(np.dtype("u1"), shape, path="a", dimensions=dims, names=unread)
    )
    text = header.decode("ascii")
    assert text.count("{") == text.count("}") == 2  # description and band names alone
    assert all(len(n) >= TIME_LABEL_WIDTH for n in names) or not read
