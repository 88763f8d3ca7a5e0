"""CF, xarray, GDAL and zarr-conventions attributes read into Conventions
(formats/conventions/cf.py): pure, from metadata alone; hostile attributes never
raise and never give unbounded or unprintable text."""

from __future__ import annotations

import ast
import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.info import meta_of
from tests.support.stores import v2_zarray
from zarrfs.formats.conventions import Conventions, Crs, Surroundings, TimeAxis, cf, conventions_of
from zarrfs.formats.conventions.cf import (
    MAX_ATTRIBUTES,
    MAX_BANDS,
    MAX_NAME,
    MAX_TEXT,
    MAX_WKT,
    TIME_LABEL_WIDTH,
    known_wkt,
    read_cf,
    time_labels,
    wkt1_of,
    wkt_epsg,
)
from zarrfs.formats.model import ArrayMeta

WKT2_4326 = (
    'GEOGCRS["WGS 84",ENSEMBLE["World Geodetic System 1984 ensemble",'
    'ELLIPSOID["WGS 84",6378137,298.257223563,LENGTHUNIT["metre",1]]],'
    'CS[ellipsoidal,2],ANGLEUNIT["degree",0.0174532925199433],ID["EPSG",4326]]'
)
WKT1_3035 = (
    'PROJCS["ETRS89-extended / LAEA Europe",GEOGCS["ETRS89",'
    'AUTHORITY["EPSG","4258"]],PROJECTION["Lambert_Azimuthal_Equal_Area"],'
    'UNIT["metre",1,AUTHORITY["EPSG","9001"]],AUTHORITY["EPSG","3035"]]'
)
DIMS = ["time", "lat", "lon"]


def array(
    attrs: dict[str, Any], shape: tuple[int, ...] = (3, 4, 5), dtype: str = "<i2"
) -> ArrayMeta:
    return meta_of("g/a", v2_zarray(list(shape), list(shape) or [], dtype), attrs)


def coordinate(name: str, length: int, /, **attrs: Any) -> ArrayMeta:
    return meta_of(f"g/{name}", v2_zarray([length], [length], "<f8"), attrs)


def crs_variable(**attrs: Any) -> ArrayMeta:
    return meta_of("g/crs", v2_zarray([], [], "<i8"), attrs)


def around(
    siblings: dict[str, ArrayMeta] | None = None, group: dict[str, Any] | None = None
) -> Surroundings:
    return Surroundings("a", (siblings or {}).get, group or {})


GRID = {"lat": coordinate("lat", 4), "lon": coordinate("lon", 5)}
TIME = coordinate("time", 3, units="days since 2000-01-01", calendar="noleap")


# (id, array attrs, siblings, group attrs, the fields expected)
CASES: list[tuple[str, dict, dict, dict, dict]] = [
    ("nothing", {}, {}, {}, {"crs": None, "found": (), "band_axis": None}),
    (
        "xarray-spatial-ref",
        {"grid_mapping": "spatial_ref", "_ARRAY_DIMENSIONS": DIMS},
        {"spatial_ref": crs_variable(crs_wkt=WKT2_4326, spatial_ref="ignored: crs_wkt first")},
        {},
        {"crs": Crs(WKT2_4326, 4326), "found": ("CF",)},
    ),
    (
        "cf-crs-epsg-code",
        {"grid_mapping": "crs: lat lon"},
        {"crs": crs_variable(epsg_code="EPSG:32633")},
        {"Conventions": "CF-1.8"},
        {"crs": Crs(known_wkt(32633), 32633), "found": ("CF-1.8",)},
    ),
    (
        "own-wkt1",
        {"spatial_ref": WKT1_3035},
        {},
        {},
        {"crs": Crs(WKT1_3035, 3035)},
    ),
    (
        "gdal-geotransform",
        {"grid_mapping": "spatial_ref", "_ARRAY_DIMENSIONS": DIMS},
        {**GRID, "spatial_ref": crs_variable(GeoTransform="10 2 0 50 0 -2")},
        {},
        {
            "geotransform": (10.0, 2.0, 0.0, 50.0, 0.0, -2.0),
            "x_coordinate": None,  # the transform is given: no coordinate is read
            "found": ("CF", "GeoTransform"),
        },
    ),
    (
        "proj-and-spatial-on-the-group",
        {},
        {},
        {"proj:code": "EPSG:4326", "spatial:transform": [0.5, 0, -180, 0, -0.5, 90]},
        {
            "crs": Crs(known_wkt(4326), 4326),
            "geotransform": (-180.0, 0.5, 0.0, 90.0, 0.0, -0.5),
            "found": ("proj:", "spatial:"),
        },
    ),
    ("proj-epsg", {"proj:epsg": 3857}, {}, {}, {"crs": Crs(known_wkt(3857), 3857)}),
    (
        "proj-wkt2-and-projjson",
        {"proj:wkt2": WKT2_4326},
        {},
        {},
        {"crs": Crs(WKT2_4326, 4326)},
    ),
    (
        "projjson-id",
        {"proj:projjson": {"id": {"authority": "EPSG", "code": 32701}}},
        {},
        {},
        {"crs": Crs(known_wkt(32701), 32701)},
    ),
    (
        "coordinates",
        {"_ARRAY_DIMENSIONS": DIMS},
        GRID,
        {},
        {"x_coordinate": "lon", "y_coordinate": "lat", "time": None, "band_axis": 0},
    ),
    (
        "packed-cf",
        {"_FillValue": -32768, "scale_factor": 0.01, "add_offset": 273.15, "units": "K"},
        {},
        {},
        {"nodata": -32768, "scale_factor": 0.01, "add_offset": 273.15, "units": "K"},
    ),
    ("missing-value-list", {"missing_value": [-1, -2]}, {}, {}, {"nodata": -1}),
    ("fill-out-of-range", {"_FillValue": 40000}, {}, {}, {"nodata": None}),
    ("fill-bool", {"_FillValue": True}, {}, {}, {"nodata": None}),
    ("scale-text", {"scale_factor": "0.01", "add_offset": None}, {}, {}, {"scale_factor": None}),
    (
        "names",
        {"long_name": "2 m temperature", "standard_name": "air_temperature"},
        {},
        {},
        {"long_name": "2 m temperature"},
    ),
    (
        "standard-name",
        {"standard_name": "air_temperature"},
        {},
        {},
        {"long_name": "air_temperature"},
    ),
    (
        "time-axis",
        {"_ARRAY_DIMENSIONS": DIMS},
        {**GRID, "time": TIME},
        {},
        {"time": TimeAxis(0, "time", "days since 2000-01-01", "noleap"), "band_axis": 0},
    ),
    (
        "time-of-other-length",
        {"_ARRAY_DIMENSIONS": DIMS},
        {"time": coordinate("time", 7, units="days since 2000-01-01")},
        {},
        {"time": None, "band_axis": 0},  # named time still gives the bands
    ),
    (
        "band-axis-named",
        {"_ARRAY_DIMENSIONS": ["wavelength", "y", "x"]},
        {},
        {},
        {"band_axis": 0, "time": None},
    ),
    ("2d-has-no-band-axis", {"_ARRAY_DIMENSIONS": ["time", "x"]}, {}, {}, {"band_axis": None}),
    (
        "wrong-types-ignored",
        {"grid_mapping": 7, "crs_wkt": ["x"], "proj:code": 4.5, "units": 3, "_FillValue": {}},
        {},
        {"spatial:transform": [1, 2, 3]},
        {"crs": None, "geotransform": None, "units": None, "nodata": None},
    ),
]


@pytest.mark.parametrize(
    "attrs,siblings,group,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_read_cf(attrs: dict, siblings: dict, group: dict, expected: dict) -> None:
    shape = (3, 4, 5) if len(attrs.get("_ARRAY_DIMENSIONS", DIMS)) == 3 else (3, 4)
    found = read_cf(array(attrs, shape), around(siblings, group))
    for name, value in expected.items():
        assert getattr(found, name) == value, name


def test_conventions_of_merges_cf() -> None:
    attrs = {"units": "K"}
    assert conventions_of(array(attrs), around()).units == "K"


def test_nodata_in_the_stored_type() -> None:
    assert math.isnan(read_cf(array({"_FillValue": "NaN"}, dtype="<f4"), around()).nodata)
    assert read_cf(array({"_FillValue": 1e39}, dtype="<f4"), around()).nodata is None
    assert read_cf(array({"_FillValue": "-Infinity"}, dtype="<f8"), around()).nodata == -math.inf
    assert read_cf(array({"_FillValue": 5.0}, dtype="<u1"), around()).nodata == 5
    assert read_cf(array({"_FillValue": -1}, dtype="<u1"), around()).nodata is None


def test_wkt_epsg_reads_the_outermost_node_only() -> None:
    assert wkt_epsg(WKT2_4326) == 4326
    assert wkt_epsg(WKT1_3035) == 3035
    inner = 'GEOGCS["x",UNIT["degree",0.017,AUTHORITY["EPSG","9122"]]]'
    assert wkt_epsg(inner) is None


def test_wkt1_for_headers() -> None:
    assert wkt1_of(Crs(WKT1_3035, 3035)) == WKT1_3035
    assert wkt1_of(Crs(WKT2_4326, 4326)) == known_wkt(4326)
    assert wkt1_of(Crs(WKT2_4326, None)) is None
    assert wkt1_of(Crs(None, 2154)) is None  # no WKT1 known for it
    assert known_wkt(32661) is None and known_wkt(32760) is not None


def test_attributes_kept_for_netcdf() -> None:
    attrs = {
        "units": "K",
        "valid_range": [0, 100],
        "flag_meanings": ["a", "b"],
        "history": "made\nthen changed",
        "nested": {"a": 1},
        "mixed": [1, "a"],
        "bell": "\x07",
        "_ARRAY_DIMENSIONS": DIMS,
        "long": "x" * (MAX_TEXT + 1),
    }
    kept = read_cf(array(attrs), around()).attributes
    assert kept == {
        "units": "K",
        "valid_range": [0, 100],
        "flag_meanings": ["a", "b"],
        "history": "made\nthen changed",
    }
    many = read_cf(array({f"a{i}": i for i in range(1000)}), around()).attributes
    assert len(many) == MAX_ATTRIBUTES


# -- time labels ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "units,calendar,values,expected",
    [
        ("days since 2000-01-01", "standard", [0, 31, 60.5], ["2000-01-01T00:00:00",
            "2000-02-01T00:00:00", "2000-03-01T12:00:00"]),
        ("days since 2000-01-01", "noleap", [59, 365], ["2000-03-01T00:00:00",
            "2001-01-01T00:00:00"]),
        ("days since 2000-01-01", "360_day", [30, 359], ["2000-02-01T00:00:00",
            "2000-12-30T00:00:00"]),
        ("hours since 1970-01-01 00:00:00", "gregorian", [1], ["1970-01-01T01:00:00"]),
        ("seconds since 2020-02-29", "proleptic_gregorian", [math.nan, 1],
            ["NaT".ljust(TIME_LABEL_WIDTH), "2020-02-29T00:00:01"]),
        ("fortnights since the flood", "standard", [1], None),
        ("days since 2000-01-01", "martian", [1], None),
        ("years since 9999-01-01", "365_day", [0, 5], None),  # wider than 4 digits
    ],
)  # fmt: skip
def test_time_labels(units: str, calendar: str, values: list, expected: list | None) -> None:
    time = TimeAxis(0, "time", units, calendar)
    assert time_labels(np.array(values), time) == expected


def test_time_labels_are_bounded() -> None:
    time = TimeAxis(0, "time", "days since 2000-01-01")
    assert time_labels(np.arange(MAX_BANDS + 1), time) is None
    labels = time_labels(np.arange(MAX_BANDS), time)
    assert labels is not None and {len(t) for t in labels} == {TIME_LABEL_WIDTH}


# -- hostile attributes -----------------------------------------------------------------

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(1 << 70), max_value=1 << 70)
    | st.floats()
    | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
KEYS = st.sampled_from(
    [
        "grid_mapping", "crs_wkt", "spatial_ref", "epsg_code", "GeoTransform", "proj:code",
        "proj:epsg", "proj:wkt2", "proj:projjson", "spatial:transform", "_FillValue",
        "missing_value", "scale_factor", "add_offset", "units", "long_name", "calendar",
        "standard_name", "Conventions", "_ARRAY_DIMENSIONS",
    ]
) | st.text(max_size=10)  # fmt: skip
ATTRS = st.dictionaries(KEYS, JSON | st.text(alphabet='{}[]\n\x00,"EPSG:4326 ', max_size=80))
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _checked_text(value: object, limit: int) -> None:
    if value is not None:
        assert isinstance(value, str) and len(value) <= limit and not _CONTROL.search(value)


@settings(max_examples=300, deadline=None)
@given(attrs=ATTRS, sibling=ATTRS, group=ATTRS, dims=st.lists(KEYS, min_size=3, max_size=3))
def test_hostile_attributes_never_raise_and_stay_bounded(
    attrs: dict, sibling: dict, group: dict, dims: list[str]
) -> None:
    attrs = {**attrs, "_ARRAY_DIMENSIONS": dims}
    siblings = {name: coordinate(name, 3, **sibling) for name in ("time", *dims)}
    siblings["crs"] = crs_variable(**sibling)
    found = read_cf(array(attrs), around(siblings, group))
    assert isinstance(found, Conventions)
    if found.crs is not None:
        _checked_text(found.crs.wkt, MAX_WKT)
    for text in (found.units, found.long_name, found.x_coordinate, found.y_coordinate):
        _checked_text(text, MAX_NAME)
    for word in found.found:
        _checked_text(word, MAX_NAME)
    if found.time is not None:
        _checked_text(found.time.units, MAX_NAME)
        _checked_text(found.time.calendar, MAX_NAME)
        time_labels(np.arange(3.0), found.time)  # never raises
    assert len(found.attributes) <= MAX_ATTRIBUTES
    if found.geotransform is not None:
        assert all(math.isfinite(v) for v in found.geotransform)


def _names_cf_reads() -> list[str]:
    """Every string literal of cf.py that could be an attribute's name: the names
    its readers look up, found without trusting the module's own list of them."""
    tree = ast.parse(Path(cf.__file__).read_text())
    return sorted(
        {
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and re.fullmatch(r"[A-Za-z_][A-Za-z_:0-9]*", node.value)
        }
    )


READ_NAMES = _names_cf_reads()
ANY_ATTRS = st.dictionaries(
    st.sampled_from(READ_NAMES) | st.text(max_size=10),
    JSON | st.sampled_from([WKT2_4326, "EPSG:4326", "days since 2000-01-01", "m"]),
    max_size=6,
)


def test_the_names_cf_reads_include_those_of_its_cases() -> None:
    for name in ("grid_mapping", "proj:projjson", "spatial:transform", "_ARRAY_DIMENSIONS"):
        assert name in READ_NAMES


@settings(max_examples=400, deadline=None)
@given(attrs=ANY_ATTRS, group=ANY_ATTRS, dims=st.none() | st.lists(KEYS, min_size=3, max_size=3))
def test_an_array_found_plain_by_names_alone_has_the_facts_a_full_reading_finds(
    attrs: dict, group: dict, dims: list[str] | None
) -> None:
    meta = array(attrs)
    if dims is not None:
        meta = replace(meta, dimension_names=tuple(dims))
    siblings = {name: coordinate(name, n, units="days since 2000-01-01") for name, n in (
        ("time", 3), ("lat", 4), ("lon", 5), ("spatial_ref", 1))}  # fmt: skip
    where = around(siblings, group)
    if cf.plain(meta, where):
        assert cf._read_cf(meta, where) == read_cf(meta, where)
        assert read_cf(meta, where) == Conventions(attributes=read_cf(meta, where).attributes)


def test_an_array_with_one_convention_word_is_not_plain() -> None:
    assert cf.plain(array({"index": 1}), around())
    assert not cf.plain(array({"units": "m"}), around())
    assert not cf.plain(array({}), around(group={"proj:epsg": 4326}))
    assert not cf.plain(replace(array({}), dimension_names=("y", "x", "z")), around())
