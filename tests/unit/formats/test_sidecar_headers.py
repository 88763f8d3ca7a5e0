"""The sidecar headers' text (formats/sidecars.py): pure, no mount, no store."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrfs.formats.nrrd import nrrd_header
from zarrfs.formats.sidecars import (
    MAX_COORDINATE_CHUNKS,
    MAX_COORDINATE_DECODED,
    MAX_COORDINATE_ELEMENTS,
    MAX_NAME_TEXT,
    MapInfo,
    _clean,
    coordinate_cost,
    coordinate_units,
    envi_data_type,
    envi_dimensions,
    envi_header,
    map_info_line,
    map_info_of,
    map_info_width,
    nrrd_type,
    regular_axis,
)

# dtype → (ENVI data type, NRRD type); None where the format has no such type.
TYPES: list[tuple[str, int | None, str | None]] = [
    ("|u1", 1, "uint8"),
    ("|i1", None, "int8"),
    ("<i2", 2, "int16"),
    (">i2", 2, "int16"),
    ("<u2", 12, "uint16"),
    ("<i4", 3, "int32"),
    ("<u4", 13, "uint32"),
    ("<i8", 14, "int64"),
    (">u8", 15, "uint64"),
    ("<f4", 4, "float"),
    (">f8", 5, "double"),
    ("<c8", 6, None),
    (">c16", 9, None),
    ("<f2", None, None),
    ("|b1", None, None),
    ("|S5", None, None),
    ("<U3", None, None),
    ("|V8", None, None),
    ("<M8[s]", None, None),
    ("<m8[ms]", None, None),
    ("<f16", None, None),  # long double
]
STRUCTURED = np.dtype([("a", "<i4"), ("b", "<f4")])


def fields(header: bytes, separator: str) -> dict[str, str]:
    """``key <separator> value`` lines of a header, as a dict."""
    out = {}
    for line in header.decode("ascii").splitlines()[1:]:
        key, sep, value = line.partition(separator)
        if sep and not line.startswith(("#", ";")):
            out[key.strip()] = value.strip()
    return out


@pytest.mark.parametrize(("dtype", "envi", "nrrd"), TYPES)
def test_type_tables(dtype: str, envi: int | None, nrrd: str | None) -> None:
    assert envi_data_type(np.dtype(dtype)) == envi
    assert nrrd_type(np.dtype(dtype)) == nrrd


def test_structured_and_subarray_dtypes_have_no_header() -> None:
    for dtype in (STRUCTURED, np.dtype(("<i4", (2,)))):
        assert envi_data_type(dtype) is None and nrrd_type(dtype) is None
        with pytest.raises(ValueError):
            envi_header(dtype, (2,), path="a", dimensions=None)
        with pytest.raises(ValueError):
            nrrd_header(dtype, (2,), path="a", dimensions=None, data_file="array.raw")


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        ((), (1, 1, 1)),
        ((5,), (5, 1, 1)),
        ((3, 4), (4, 3, 1)),
        ((2, 3, 4), (4, 3, 2)),
        ((2, 3, 4, 5), (5, 4, 6)),
        ((0, 3), (3, 0, 1)),
    ],
)
def test_envi_dimensions(shape: tuple[int, ...], expected: tuple[int, int, int]) -> None:
    assert envi_dimensions(shape) == expected


def test_envi_header_text() -> None:
    header = envi_header(
        np.dtype(">f4"), (3, 20, 30), path="g/t", dimensions=("time", "lat", "lon")
    )
    assert header == (
        b"ENVI\n"
        b"description = {Zarr array /g/t; dimensions: time, lat, lon}\n"
        b"samples = 30\n"
        b"lines = 20\n"
        b"bands = 3\n"
        b"header offset = 0\n"
        b"file type = ENVI Standard\n"
        b"data type = 4\n"
        b"interleave = bsq\n"
        b"byte order = 1\n"
    )


def test_nrrd_header_text() -> None:
    header = nrrd_header(
        np.dtype("<i2"), (3, 20, 30), path="g/t", dimensions=("t", "y", "x"), data_file="array.raw"
    )
    assert header == (
        b"NRRD0004\n"
        b"# Complete NRRD file format specification at:\n"
        b"# http://teem.sourceforge.net/nrrd/format.html\n"
        b"content: Zarr array /g/t\n"
        b"type: int16\n"
        b"dimension: 3\n"
        b"sizes: 30 20 3\n"
        b'labels: "x" "y" "t"\n'
        b"endian: little\n"
        b"encoding: raw\n"
        b"data file: array.raw\n"
    )


@pytest.mark.parametrize("dtype", ["|u1", "|i1"])
def test_nrrd_one_byte_types_have_no_endian(dtype: str) -> None:
    header = nrrd_header(np.dtype(dtype), (4,), path="a", dimensions=None, data_file="array.raw")
    assert "endian" not in fields(header, ":")


@pytest.mark.parametrize(("dtype", "order"), [("<f8", "0"), (">f8", "1"), ("|u1", "0")])
def test_envi_byte_order_is_the_dtypes(dtype: str, order: str) -> None:
    header = envi_header(np.dtype(dtype), (4,), path="a", dimensions=None)
    assert fields(header, "=")["byte order"] == order


def test_a_zero_dimensional_array_is_one_element() -> None:
    envi = fields(envi_header(np.dtype("<f4"), (), path="a", dimensions=()), "=")
    assert (envi["samples"], envi["lines"], envi["bands"]) == ("1", "1", "1")
    nrrd = nrrd_header(np.dtype("<f4"), (), path="a", dimensions=(), data_file="array.raw")
    assert fields(nrrd, ":")["dimension"] == "1" and fields(nrrd, ":")["sizes"] == "1"


def test_names_cannot_break_the_header() -> None:
    """Braces end an ENVI value and a newline a field: names never bring them in."""
    path = "a}b\nc/d{e\u00e9" + "x" * 1000
    names = ("y}\n", 'x"q', None)
    envi = envi_header(np.dtype("<f4"), (2, 3, 4), path=path, dimensions=names)
    lines = envi.decode("ascii").splitlines()
    description = lines[1]
    assert description.count("{") == 1 and description.endswith("}")
    assert description.count("}") == 1
    assert len(description) < 2 * MAX_NAME_TEXT + 100
    nrrd = nrrd_header(np.dtype("<f4"), (2, 3, 4), path=path, dimensions=names, data_file="a")
    assert "labels" not in fields(nrrd, ":")  # quotes and missing names: no labels
    assert len(nrrd.decode("ascii").splitlines()) == 10


@pytest.mark.parametrize(
    ("y", "x", "expected"),
    [
        ("degrees_north", "degrees_east", "Degrees"),
        ("degree_N", "degrees", "Degrees"),
        ("m", "metre", "Meters"),
        ("km", "kilometers", "Km"),
        ("ft", "feet", "Feet"),
        ("m", "degrees_east", None),
        ("furlong", "furlong", None),
        (None, "m", None),
        (3, "m", None),
    ],
)
def test_coordinate_units(y: object, x: object, expected: str | None) -> None:
    assert coordinate_units(y, x) == expected


# -- regular coordinates and map info -------------------------------------------------------


def test_regular_axis() -> None:
    assert regular_axis(np.arange(-179.875, 180, 0.25)) == (-179.875, 0.25)
    assert regular_axis(np.arange(89.875, -90, -0.25)) == (89.875, -0.25)
    first, step = regular_axis(np.arange(10, dtype="<i2"))
    assert (first, step) == (0.0, 1.0)
    # float32 coordinates are regular within their own rounding
    found = regular_axis(np.linspace(100_000, 100_100, 1001, dtype="<f4"))
    assert found is not None and found[1] == pytest.approx(0.1)
    for values in (
        np.geomspace(1, 1000, 20),
        np.array([0.0, 1.0, 2.0, 4.0]),
        np.array([1.0]),
        np.array([2.0, 2.0, 2.0]),
        np.array([0.0, np.nan, 2.0]),
        np.array([0.0, np.inf]),
        np.array([True, False]),
        np.zeros((2, 2)),
    ):
        assert regular_axis(values) is None, values


def test_map_info_of_cell_centres() -> None:
    lat = np.arange(89.875, -90, -0.25)  # north up
    lon = np.arange(-179.875, 180, 0.25)
    assert map_info_of(lat, lon) == MapInfo(x0=-180.0, y0=90.0, dx=0.25, dy=-0.25)
    assert map_info_of(lat[::-1], lon) == MapInfo(x0=-180.0, y0=-90.0, dx=0.25, dy=0.25)
    assert map_info_of(lat, lon[::-1]) is None  # x decreasing: ENVI cannot say it
    assert map_info_of(lat, np.geomspace(1, 2, lon.size)) is None


def test_map_info_lines() -> None:
    north = map_info_line(MapInfo(-180.0, 90.0, 0.25, -0.25), "Degrees")
    assert north.rstrip() == (
        "map info = {Arbitrary, 1, 1, -180.0, 90.0, 0.25, 0.25, 0, North, units=Degrees}"
    )
    south = map_info_line(MapInfo(-180.0, -90.0, 0.25, 0.25), None)
    assert south.rstrip() == (
        "map info = {Arbitrary, 1, 1, -180.0, -90.0, 0.25, 0.25, 0, North, rotation=180}"
    )
    none = map_info_line(None, "Degrees")
    assert none.startswith(";") and "=" not in none
    assert len(north) == len(none) == map_info_width("Degrees")
    assert len(south) == map_info_width(None)


def test_coordinate_cost() -> None:
    """What reading a coordinate for a header may cost, judged from its layout alone."""
    assert coordinate_cost((1 << 20,), (1 << 10,), 8, None) is None  # 1024 chunks, 8 MiB
    assert coordinate_cost((MAX_COORDINATE_ELEMENTS + 1,), (1 << 20,), 1, None) == (
        f"{MAX_COORDINATE_ELEMENTS + 1} elements, more than {MAX_COORDINATE_ELEMENTS}"
    )
    # a million one-element chunks: a fetch, a decode and a cache entry each
    assert coordinate_cost((1 << 20,), (1,), 8, None) == (
        f"{1 << 20} chunks, more than {MAX_COORDINATE_CHUNKS}"
    )
    assert coordinate_cost((MAX_COORDINATE_CHUNKS + 1,), (1,), 8, None) is not None
    assert coordinate_cost((MAX_COORDINATE_CHUNKS,), (1,), 8, None) is None
    # ten values in one chunk of 2**27 float64: a gigabyte decoded
    assert "decode to" in (coordinate_cost((10,), (1 << 27,), 8, None) or "")
    assert coordinate_cost((10,), (MAX_COORDINATE_DECODED // 8,), 8, None) is None
    # sharded: the inner chunks count, and so do whole shards (read whole when nested)
    assert coordinate_cost((4096,), (4,), 8, (4096,)) is None
    assert coordinate_cost((4096,), (2,), 8, (4096,)) is not None  # 2048 inner chunks
    assert "decode to" in (coordinate_cost((10,), (10,), 8, (1 << 27,)) or "")


finite = st.floats(allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(x0=finite, y0=finite, dx=finite.filter(lambda v: v > 0), dy=finite.filter(bool))
def test_map_info_line_has_one_width_whatever_the_numbers(
    x0: float, y0: float, dx: float, dy: float
) -> None:
    """The header's size follows from metadata alone: every value fits the reserve."""
    for units in (None, "Degrees", "Meters"):
        line = map_info_line(MapInfo(x0, y0, dx, dy), units)
        assert len(line) == map_info_width(units) == len(map_info_line(None, units))
        assert line.rstrip().startswith("map info = {Arbitrary, 1, 1, ")


shapes = st.lists(st.integers(0, 10_000), min_size=0, max_size=6).map(tuple)
dtypes = st.sampled_from([d for d, _, _ in TYPES]).map(np.dtype)


@settings(max_examples=300, deadline=None)
@given(shape=shapes, dtype=dtypes)
def test_headers_describe_exactly_the_bytes_of_array_raw(
    shape: tuple[int, ...], dtype: np.dtype
) -> None:
    """ENVI: samples * lines * bands * itemsize is array.raw's size; NRRD: sizes are
    the C-order shape reversed (fastest axis first)."""
    if envi_data_type(dtype) is not None:
        envi = fields(envi_header(dtype, shape, path="a", dimensions=None), "=")
        count = int(envi["samples"]) * int(envi["lines"]) * int(envi["bands"])
        assert count * dtype.itemsize == math.prod(shape) * dtype.itemsize
        assert int(envi["samples"]) == (shape[-1] if shape else 1)
        assert envi["data type"] == str(envi_data_type(dtype))
    if nrrd_type(dtype) is not None:
        nrrd = fields(
            nrrd_header(dtype, shape, path="a", dimensions=None, data_file="array.raw"), ":"
        )
        sizes = [int(s) for s in nrrd["sizes"].split()]
        assert sizes == (list(reversed(shape)) or [1])
        assert int(nrrd["dimension"]) == len(sizes)
        assert nrrd["type"] == nrrd_type(dtype)


@settings(max_examples=300)
@given(st.text(max_size=300))
def test_names_in_headers_are_printable_ascii_without_quoting(text: str) -> None:
    # Each character that is no printable ASCII, or is one of ENVI's and NRRD's
    # quoting characters, becomes "?"; a long name is cut and says so.
    expected = "".join(
        c if 0x20 <= ord(c) < 0x7F and c not in '{}"\\' else "?" for c in text[:MAX_NAME_TEXT]
    )
    if len(text) > MAX_NAME_TEXT:
        expected += "..."
    assert _clean(text) == expected
