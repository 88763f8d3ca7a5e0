"""formats/netcdf: a group's arrays as a netCDF classic file, read back by netCDF-C
(netCDF4-python, from memory) and scipy's reader (CDF-2), against the arrays."""

from __future__ import annotations

import base64
import contextlib
import io
import math
import struct
import tempfile
from collections.abc import Iterator
from typing import Any

import netCDF4
import numpy as np
import pytest
import scipy.io
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zarrfs.formats.codecs.pipeline import CodecPipeline
from zarrfs.formats.model import ArrayMeta
from zarrfs.formats.netcdf import GroupFile, Member, carried_attributes, encoding, group_file
from zarrfs.formats.netcdf.encoding import MAX_NAME_BYTES, attribute, valid_name


def meta(
    data: np.ndarray,
    dims: tuple[str | None, ...] | None = None,
    attrs: dict[str, Any] | None = None,
    *,
    zarr_format: int = 2,
    fill: bytes | None = None,
    shape: tuple[int, ...] | None = None,
) -> ArrayMeta:
    shape = data.shape if shape is None else shape
    return ArrayMeta(
        path="a",
        zarr_format=zarr_format,
        shape=shape,
        chunks=tuple(max(n, 1) for n in shape),
        dtype=data.dtype,
        order="C",
        fill_value=fill,
        codecs=CodecPipeline(None, []),
        chunk_keys=lambda index: [],
        documents=(),
        attrs=attrs or {},
        dimension_names=dims,
    )


def members(arrays: dict[str, tuple[np.ndarray, ArrayMeta]]) -> list[Member]:
    return [Member(name, m, carried_attributes(m)) for name, (_, m) in arrays.items()]


def assemble(made: GroupFile, data: dict[str, np.ndarray]) -> bytes:
    """The file's bytes as the view serves them: header, big-endian data, zeros."""
    out = bytearray(made.header)
    for placed in made.variables:
        assert len(out) <= placed.begin and placed.begin % 4 == 0
        out += bytes(placed.begin - len(out))
        values = data[placed.member]
        out += values.astype(values.dtype.newbyteorder(">")).tobytes()
    assert len(out) <= made.size
    return bytes(out + bytes(made.size - len(out)))


@contextlib.contextmanager
def netcdf4(data: bytes) -> Iterator[netCDF4.Dataset]:
    """netCDF-C's reading of ``data`` (from a file: its in-memory reader refuses
    files of less than about a hundred bytes, which ncdump reads)."""
    with tempfile.NamedTemporaryFile(suffix=".nc") as f:
        f.write(data)
        f.flush()
        with netCDF4.Dataset(f.name) as ds:
            yield ds


DTYPES = {  # dtype → (netCDF-C's type name, CDF version)
    "|i1": ("int8", 2),
    "|u1": ("int8", 2),  # NC_BYTE with _Unsigned
    "<i2": ("int16", 2),
    ">i2": ("int16", 2),
    "<i4": ("int32", 2),
    ">i4": ("int32", 2),
    "<f4": ("float32", 2),
    ">f4": ("float32", 2),
    "<f8": ("float64", 2),
    ">f8": ("float64", 2),
    "<u2": ("uint16", 5),
    ">u4": ("uint32", 5),
    "<i8": ("int64", 5),
    "<u8": ("uint64", 5),
}


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_each_type_reads_back(dtype: str) -> None:
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        rng = np.random.default_rng(0)
        values = rng.integers(
            info.min, info.max, size=(5, 7), dtype=dt.newbyteorder("="), endpoint=True
        )
        values[0, :2] = info.min, info.max
    else:
        values = np.linspace(-1e3, 1e3, 35).reshape(5, 7)
    array = values.astype(dt)
    arrays = {"v": (array, meta(array, ("y", "x")))}
    made = group_file(members(arrays), {"title": "t"})
    nc_type, version = DTYPES[dtype]
    assert made.version == version
    data = assemble(made, {"v": array})
    assert data[:4] == b"CDF" + bytes([version])
    with netcdf4(data) as ds:
        variable = ds["v"]
        assert variable.dimensions == ("y", "x")
        assert variable.datatype == np.dtype(nc_type)
        assert np.array_equal(variable[:], array)  # _Unsigned honoured for u1
        assert ds.getncattr("title") == "t"
    if version == 2:
        with scipy.io.netcdf_file(io.BytesIO(data), mmap=False) as sc:
            raw = sc.variables["v"].data
            assert np.array_equal(raw.view(array.dtype.newbyteorder(">")), array)


def test_large_variables_begin_on_a_mebibyte(monkeypatch: pytest.MonkeyPatch) -> None:
    """A variable of ALIGNED_FROM bytes or more begins on a multiple of DATA_ALIGN,
    after a gap of zeros that netCDF-C and scipy step over; smaller ones follow
    the one before them."""
    monkeypatch.setattr(encoding, "ALIGNED_FROM", 400)
    small = np.arange(5, dtype="<i2")
    large = np.linspace(0, 1, 120, dtype="<f4").reshape(10, 12)
    after = np.arange(3, dtype="<i4")
    arrays = {
        "small": (small, meta(small, ("n",))),
        "large": (large, meta(large, ("y", "x"))),
        "after": (after, meta(after, ("m",))),
    }
    made = group_file(members(arrays), {})
    begins = {placed.member: placed.begin for placed in made.variables}
    assert begins["small"] < encoding.DATA_ALIGN
    assert begins["large"] == encoding.DATA_ALIGN
    assert begins["after"] == encoding.DATA_ALIGN + large.nbytes
    data = assemble(made, {"small": small, "large": large, "after": after})
    with netcdf4(data) as ds:
        for name, values in (("small", small), ("large", large), ("after", after)):
            assert np.array_equal(ds[name][:], values), name
    with scipy.io.netcdf_file(io.BytesIO(data), mmap=False) as sc:
        assert np.array_equal(sc.variables["large"].data, large)


@pytest.mark.parametrize(
    "dtype, reason",
    [
        ("|b1", "no netCDF classic type"),
        ("<f2", "no netCDF classic type"),
        ("<c8", "no netCDF classic type"),
        ("<M8[s]", "no netCDF classic type"),
        ("|S4", "no netCDF classic type"),
        ([("a", "<i4"), ("b", "<f4")], "structured"),
    ],
)
def test_types_without_netcdf_type_are_left_out(dtype: Any, reason: str) -> None:
    odd = np.zeros(3, dtype=dtype)
    good = np.arange(3, dtype="<i4")
    arrays = {"odd": (odd, meta(odd)), "good": (good, meta(good))}
    made = group_file(members(arrays), {})
    assert [p.member for p in made.variables] == ["good"]
    assert made.left_out[0][0] == "odd" and reason in made.left_out[0][1]
    with netcdf4(assemble(made, {"good": good})) as ds:
        assert list(ds.variables) == ["good"]


def test_dimensions_coordinates_and_conflicts() -> None:
    x = np.arange(4, dtype="<f8")
    a = np.ones((3, 4), dtype="<f4")
    b = np.ones((3, 5), dtype="<f4")  # names "x" with another length
    anon = np.ones((2, 2), dtype="<i2")
    arrays = {
        "a": (a, meta(a, ("y", "x"))),
        "b": (b, meta(b, ("y", "x"))),
        "anon": (anon, meta(anon)),
        "x": (x, meta(x, ("x",))),
        "zero": (np.ones(0, "<f4"), meta(np.ones(0, "<f4"), ("t",))),
        "scalar": (np.array(7, "<i4"), meta(np.array(7, "<i4"), ())),
    }
    made = group_file(members(arrays), {})
    assert ("zero", "an axis of length 0 (netCDF's unlimited one)") in made.left_out
    data = {name: values for name, (values, _) in arrays.items()}
    with netcdf4(assemble(made, data)) as ds:
        assert ds["x"].dimensions == ("x",)  # the coordinate keeps its dimension
        assert ds["a"].dimensions == ("y", "x")
        assert ds["b"].dimensions == ("y", "x_5")
        assert ds["anon"].dimensions == ("dim_anon_0", "dim_anon_1")
        assert len(ds.dimensions["x"]) == 4 and len(ds.dimensions["x_5"]) == 5
        assert ds["scalar"].shape == () and ds["scalar"][...] == 7
        for name in ("x", "a", "b", "anon"):
            assert np.array_equal(ds[name][:], data[name])


def test_fill_values_in_the_variables_type() -> None:
    v2 = np.arange(6, dtype="<i2")
    v3 = np.arange(6, dtype="<f4")
    u1 = np.arange(6, dtype="u1")
    nan = struct.pack("<d", math.nan)
    arrays = {
        # v2: the array's fill value, as xarray reads it
        "v2": (v2, meta(v2, fill=np.array([-9], "<i2").tobytes())),
        # v3: the attribute alone, floats as xarray writes them (base64 of a double)
        "v3": (v3, meta(v3, attrs={"_FillValue": base64.b64encode(nan).decode()}, zarr_format=3)),
        "v3_no_attr": (v3, meta(v3, zarr_format=3, fill=np.array([0], "<f4").tobytes())),
        "u1": (u1, meta(u1, fill=bytes([255]))),
        "bad": (v2, meta(v2, attrs={"_FillValue": 1e9})),  # out of int16's range: left out
    }
    made = group_file(members(arrays), {})
    data = {name: values for name, (values, _) in arrays.items()}
    with netcdf4(assemble(made, data)) as ds:
        assert ds["v2"].getncattr("_FillValue") == -9
        assert ds["v2"].getncattr("_FillValue").dtype == np.int16
        assert np.isnan(ds["v3"].getncattr("_FillValue"))
        assert ds["v3"].getncattr("_FillValue").dtype == np.float32
        assert "_FillValue" not in ds["v3_no_attr"].ncattrs()
        assert "_FillValue" not in ds["bad"].ncattrs()
        ds.set_auto_mask(False)
        assert np.array_equal(ds["u1"][:], u1)
        assert ds["u1"].getncattr("_FillValue") == -1  # 255 as NC_BYTE


@pytest.mark.parametrize(
    "value, expected",
    [
        ("text", "text"),
        ("ünï", "ünï"),
        (3, 3),
        (2**40, float(2**40)),
        (1.5, 1.5),
        ([1, 2, 3], [1, 2, 3]),
        ([1, 2.5], [1.0, 2.5]),
        (True, 1),
        (None, None),
        ({"a": 1}, None),
        (["a", "b"], None),
        ([], None),
        (10**400, None),
        ("x" * (1 << 17), None),
    ],
)
def test_attributes(value: Any, expected: Any) -> None:
    one = np.zeros(2, "<f4")
    arrays = {"v": (one, meta(one, attrs={"att": value, "_ARRAY_DIMENSIONS": ["n"]}))}
    made = group_file(members(arrays), {"att": value})
    with netcdf4(assemble(made, {"v": one})) as ds:
        for holder in (ds, ds["v"]):
            if expected is None:
                assert "att" not in holder.ncattrs()
            else:
                assert np.array_equal(holder.getncattr("att"), expected)
        assert "_ARRAY_DIMENSIONS" not in ds["v"].ncattrs()


@pytest.mark.parametrize(
    "name, expected",
    [
        ("plain", "plain"),
        ("with space", "with space"),
        ("trailing ", "trailing"),
        (".hidden", "_hidden"),
        ("-dash", "_dash"),
        ("tab\tin", "tab_in"),
        ("1st", "1st"),
        ("é", "é"),
        ("e\u0301", "é"),  # NFC
        ("", None),
        ("   ", None),
        ("x" * (MAX_NAME_BYTES + 1), None),
        ("\ud800", "_"),
    ],
)
def test_names(name: str, expected: str | None) -> None:
    assert valid_name(name) == expected


@given(st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=300))
def test_plain_names_take_the_short_way_to_the_same_name(name: str) -> None:
    assert valid_name(name) == encoding.made_valid(name)


def test_names_that_become_one_keep_the_first() -> None:
    a = np.zeros(2, "<f4")
    arrays = {"a\tb": (a, meta(a)), "a\nb": (a, meta(a))}
    made = group_file(members(arrays), {})
    assert [p.member for p in made.variables] == ["a\tb"]
    assert made.left_out == (("a\nb", "no netCDF name of its own"),)
    with netcdf4(assemble(made, {"a\tb": a})) as ds:
        assert list(ds.variables) == ["a_b"]


def test_a_variable_of_4_gib_needs_cdf5() -> None:
    small = np.zeros(1, "<f4")
    huge = meta(small, ("n",), shape=(1 << 30,))  # 4 GiB of float32: never allocated
    made = group_file([Member("huge", huge, {})], {})
    assert made.version == 5
    assert made.size == encoding.DATA_ALIGN + (4 << 30)  # a large variable: aligned


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)
DTYPE_NAMES = st.sampled_from([*DTYPES, "|b1", "<c8", "<f2"])


@st.composite
def groups(draw: st.DrawFn) -> tuple[dict[str, tuple[np.ndarray, ArrayMeta]], dict[str, Any]]:
    arrays = {}
    for name in draw(st.lists(st.text(max_size=12), max_size=5, unique=True)):
        dtype = np.dtype(draw(DTYPE_NAMES))
        shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
        dims = draw(
            st.none() | st.tuples(*[st.none() | st.sampled_from(["x", "y", ""])] * len(shape))
        )
        attrs = draw(st.dictionaries(st.text(max_size=8), JSON, max_size=4))
        fill = draw(st.none() | st.binary(min_size=dtype.itemsize, max_size=dtype.itemsize))
        values = np.frombuffer(
            draw(
                st.binary(
                    min_size=math.prod(shape) * dtype.itemsize,
                    max_size=math.prod(shape) * dtype.itemsize,
                )
            ),
            dtype=dtype,
        ).reshape(shape)
        arrays[name] = (
            values,
            meta(values, dims, attrs, fill=fill, zarr_format=draw(st.sampled_from([2, 3]))),
        )
    return arrays, draw(st.dictionaries(st.text(max_size=8), JSON, max_size=4))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(groups())
def test_any_group_makes_a_file_netcdf_reads(group: Any) -> None:
    arrays, group_attrs = group
    made = group_file(members(arrays), group_attrs)
    data = {name: values for name, (values, _) in arrays.items()}
    placed = {p.member for p in made.variables}
    assert placed | {name for name, _ in made.left_out} == set(arrays)
    with netcdf4(assemble(made, data)) as ds:
        ds.set_auto_maskandscale(False)
        assert len(ds.variables) == len(placed)
        for variable in ds.variables.values():
            member = next(p.member for p in made.variables if valid_name(p.member) == variable.name)
            expected = data[member]
            got = np.asarray(variable[...])
            assert got.shape == expected.shape
            bits = f"=u{expected.dtype.itemsize}"
            assert np.array_equal(native(got).view(bits), native(expected).view(bits))


def native(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values.astype(values.dtype.newbyteorder("=")))


def test_attribute_never_raises_on_odd_values() -> None:
    for value in (math.nan, math.inf, -0.0, [math.nan], [True, 2], "\udcff", 2**63, [2**70]):
        attribute("a", value)
