"""Zarr v2 metadata parsing (zarrfs.formats.metadata.v2 / dtypes) and the codec pipeline.

Oracles: the v2 spec (explicit expected bytes), numpy, and zarr-python 3 reading the
same ``.zarray`` (missing chunks read as the fill value) or writing the chunks.
"""

from __future__ import annotations

import base64
import json
import math
import warnings
import zlib
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr

from zarrfs.errors import MetadataError
from zarrfs.formats.codecs.pipeline import CodecPipeline, CodecResolutionError
from zarrfs.formats.metadata.dtypes import MAX_NBYTES, decode_fill_value, parse_dtype
from zarrfs.formats.metadata.v2 import parse_array, parse_group

NESTED = [["a", "<i4"], ["b", [["c", ">f8"], ["d", "<u2", [2]]]]]
NESTED_NP = np.dtype([("a", "<i4"), ("b", [("c", ">f8"), ("d", "<u2", (2,))])])
XYZ = [["x", "<f4"], ["y", "<f4"], ["z", "<f4", [2, 2]]]
XYZ_NP = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4", (2, 2))])
RGB = [["r", "|u1"], ["g", "|u1"], ["b", "|u1"]]
RGB_NP = np.dtype([("r", "u1"), ("g", "u1"), ("b", "u1")])
FOOBAR = [["foo", "<f4"], ["bar", [["baz", "<f4"], ["qux", "<i4"]]]]
FOOBAR_NP = np.dtype([("foo", "<f4"), ("bar", [("baz", "<f4"), ("qux", "<i4")])])


def zarray(**overrides) -> dict:
    doc = {
        "zarr_format": 2,
        "shape": [3],
        "chunks": [2],
        "dtype": "<i4",
        "fill_value": 0,
        "order": "C",
        "compressor": None,
        "filters": None,
    }
    doc.update(overrides)
    return doc


def encode(doc: dict) -> bytes:
    return json.dumps(doc).encode()


def parse(path: str = "", zattrs: bytes | None = None, **overrides):
    return parse_array(path, encode(zarray(**overrides)), zattrs)


# ---------------------------------------------------------------- dtypes

DTYPES = [
    ("|b1", np.dtype(bool)),
    ("|i1", np.dtype("i1")),
    ("<i2", np.dtype("<i2")),
    (">i2", np.dtype(">i2")),
    ("<i4", np.dtype("<i4")),
    (">i4", np.dtype(">i4")),
    ("<i8", np.dtype("<i8")),
    (">i8", np.dtype(">i8")),
    ("|u1", np.dtype("u1")),
    ("<u2", np.dtype("<u2")),
    (">u2", np.dtype(">u2")),
    ("<u4", np.dtype("<u4")),
    (">u4", np.dtype(">u4")),
    ("<u8", np.dtype("<u8")),
    (">u8", np.dtype(">u8")),
    ("<f2", np.dtype("<f2")),
    (">f2", np.dtype(">f2")),
    ("<f4", np.dtype("<f4")),
    (">f4", np.dtype(">f4")),
    ("<f8", np.dtype("<f8")),
    (">f8", np.dtype(">f8")),
    ("<c8", np.dtype("<c8")),
    (">c8", np.dtype(">c8")),
    ("<c16", np.dtype("<c16")),
    (">c16", np.dtype(">c16")),
    ("<M8[ns]", np.dtype("<M8[ns]")),
    (">M8[ns]", np.dtype(">M8[ns]")),
    ("<M8[D]", np.dtype("<M8[D]")),
    ("<m8[s]", np.dtype("<m8[s]")),
    (">m8[s]", np.dtype(">m8[s]")),
    ("|S5", np.dtype("S5")),
    ("<U3", np.dtype("<U3")),
    (">U3", np.dtype(">U3")),
    ("|V7", np.dtype("V7")),
    (RGB, RGB_NP),
    (XYZ, XYZ_NP),
    (FOOBAR, FOOBAR_NP),
    (NESTED, NESTED_NP),
]


@pytest.mark.parametrize(("spec", "expected"), DTYPES, ids=lambda v: str(v))
def test_parse_array_dtypes(spec, expected):
    meta = parse(dtype=spec, fill_value=None)
    assert meta.dtype == expected
    assert meta.dtype.str == expected.str  # byte order kept as declared
    assert meta.dtype.descr == expected.descr
    assert meta.itemsize == expected.itemsize
    assert meta.nbytes == 3 * expected.itemsize
    assert meta.chunk_nbytes == 2 * expected.itemsize
    assert meta.unsupported is None
    assert meta.fill_value is None
    assert meta.fill_bytes == bytes(expected.itemsize)
    assert parse_dtype(spec) == expected


def test_structured_dtype_field_layout():
    dt = parse(dtype=NESTED, fill_value=None).dtype
    assert dt.itemsize == 16
    assert dt.fields["a"][1] == 0
    assert dt.fields["b"][1] == 4
    assert dt["b"].fields["d"][0] == np.dtype(("<u2", (2,)))
    assert dt["b"]["c"] == np.dtype(">f8")
    assert parse(dtype=XYZ, fill_value=None).dtype["z"].shape == (2, 2)


@pytest.mark.parametrize(
    "spec", ["|O", [["a", "<i4"], ["b", "|O"]], "|S0"], ids=["object", "struct-object", "S0"]
)
def test_dtypes_without_fixed_size_are_unsupported_not_errors(spec):
    meta = parse(dtype=spec, fill_value=0)
    assert meta.unsupported
    assert meta.fill_value is None


@pytest.mark.parametrize("spec", ["<x4", "float128x", 7, [["a"]], [["a", "<i4", 3, 4]], {}])
def test_invalid_dtype_is_metadata_error(spec):
    with pytest.raises(MetadataError):
        parse(dtype=spec)


# ---------------------------------------------------------------- fill values


def le(value, dtype) -> bytes:
    return np.array(value, dtype=dtype).tobytes()


def b64(raw: bytes) -> str:
    return base64.standard_b64encode(raw).decode()


# (dtype, JSON fill value, expected element bytes, zarr-python 3 can read it)
FILLS = [
    ("<f8", "NaN", b"\x00\x00\x00\x00\x00\x00\xf8\x7f", True),
    (">f4", "NaN", b"\x7f\xc0\x00\x00", True),
    ("<f2", "Infinity", b"\x00\x7c", True),
    (">f8", "-Infinity", b"\xff\xf0\x00\x00\x00\x00\x00\x00", True),
    ("<f4", "-Infinity", b"\x00\x00\x80\xff", True),
    ("<f8", -0.0, b"\x00\x00\x00\x00\x00\x00\x00\x80", True),
    ("<f4", 1, b"\x00\x00\x80\x3f", True),
    ("<f8", 1e300, le(1e300, "<f8"), True),
    ("<i8", 1.0, b"\x01" + bytes(7), True),
    (">i4", -2, b"\xff\xff\xff\xfe", True),
    ("|i1", -128, b"\x80", True),
    (">u2", 65535, b"\xff\xff", True),
    (">u8", 2**64 - 1, b"\xff" * 8, True),
    ("<u4", 7.0, b"\x07\x00\x00\x00", True),
    ("|b1", True, b"\x01", True),
    ("|b1", False, b"\x00", True),
    ("<c8", [1.0, 2.0], b"\x00\x00\x80\x3f\x00\x00\x00\x40", True),
    ("<c16", ["NaN", "Infinity"], le(complex(math.nan, math.inf), "<c16"), True),
    (">c16", [1.5, -2], le(1.5 - 2j, ">c16"), True),
    ("<M8[ns]", "NaT", b"\x00" * 7 + b"\x80", True),
    ("<M8[ns]", 5, b"\x05" + bytes(7), True),
    ("<M8[D]", -1, b"\xff" * 8, True),
    (">M8[ns]", 1, bytes(7) + b"\x01", True),
    ("<m8[s]", 3, b"\x03" + bytes(7), True),
    (">m8[s]", 3, bytes(7) + b"\x03", True),
    ("|S5", b64(b"ab"), b"ab\x00\x00\x00", True),
    ("|S5", "", bytes(5), True),
    ("|S3", b64(b"xyz"), b"xyz", True),
    ("|S1", 0, b"\x00", False),  # old zarr-python wrote 0 for bytes dtypes
    ("<U4", 0, bytes(16), False),
    ("<U3", "xy", b"x\x00\x00\x00y\x00\x00\x00\x00\x00\x00\x00", True),
    (">U3", "xy", b"\x00\x00\x00x\x00\x00\x00y\x00\x00\x00\x00", True),
    ("<U4", "", bytes(16), True),
    ("|V7", b64(bytes(range(7))), bytes(range(7)), True),
    (RGB, b64(b"\x01\x02\x03"), b"\x01\x02\x03", True),
    (RGB, 0, bytes(3), False),
    (NESTED, b64(bytes(range(16))), bytes(range(16)), False),
    (XYZ, b64(bytes(range(24))), bytes(range(24)), False),
    ("<f8", None, None, False),
    ("|S5", None, None, False),
    (NESTED, None, None, False),
]


@pytest.mark.parametrize(("spec", "fill", "expected", "zarr_reads"), FILLS, ids=str)
def test_fill_value_bytes(spec, fill, expected, zarr_reads):
    meta = parse(dtype=spec, fill_value=fill)
    assert meta.fill_value == expected
    assert decode_fill_value(fill, parse_dtype(spec)) == expected
    if expected is not None:
        assert len(expected) == meta.itemsize
        assert meta.fill_bytes == expected
    else:
        assert meta.fill_bytes == bytes(meta.itemsize)


@pytest.mark.parametrize(
    ("spec", "fill", "expected"), [(s, f, e) for s, f, e, z in FILLS if z], ids=str
)
def test_fill_value_matches_zarr_python_reading_missing_chunks(tmp_path, spec, fill, expected):
    (tmp_path / ".zarray").write_bytes(encode(zarray(dtype=spec, fill_value=fill)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        oracle = zarr.open_array(str(tmp_path), mode="r")[...]
    assert oracle.tobytes() == expected * 3
    meta = parse(dtype=spec, fill_value=fill)
    assert meta.fill_bytes * 3 == oracle.tobytes()


ZARR_WRITTEN = [
    ("<f8", np.nan),
    ("<f4", -np.inf),
    (">f8", np.inf),
    ("<f8", -0.0),
    (">i4", 7),
    ("<u8", 2**64 - 1),
    ("|b1", True),
    ("<c8", 1 + 2j),
    ("<M8[ns]", np.datetime64(5, "ns")),
    ("<M8[D]", np.datetime64("NaT")),
    ("<m8[s]", np.timedelta64(3, "s")),
    ("|S5", b"ab"),
    ("<U3", "xy"),
    (">U3", "xy"),
    ("|V7", b"abcdefg"),
    (RGB_NP, b"\x01\x02\x03"),
]


@pytest.mark.parametrize(("dtype", "fill"), ZARR_WRITTEN, ids=str)
def test_fill_value_written_by_zarr_python(dtype, fill):
    store: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        arr = zarr.create_array(
            store=store, shape=(3,), chunks=(2,), dtype=dtype, fill_value=fill, zarr_format=2
        )
        oracle = arr[...].tobytes()
    meta = parse_array("", store[".zarray"].to_bytes(), None)
    assert meta.dtype == arr.dtype
    assert meta.fill_bytes * 3 == oracle


@pytest.mark.parametrize(
    ("spec", "fill"),
    [
        ("<i4", 1.5),
        ("<i4", "NaN"),
        ("<f8", "nan"),
        ("<f8", "Inf"),
        ("|u1", 256),
        ("|i1", -129),
        ("|S5", "YWI"),  # bad base64 padding
        ("|V7", b64(b"abc")),  # wrong length
        (RGB, b64(b"\x01\x02")),  # wrong length
        ("<c8", ["NaN"]),
        ("<M8[ns]", "yesterday"),
    ],
    ids=str,
)
def test_invalid_fill_value_is_metadata_error(spec, fill):
    with pytest.raises(MetadataError):
        parse(dtype=spec, fill_value=fill)


# ---------------------------------------------------------------- order, keys, attributes


@pytest.mark.parametrize("order", ["C", "F"])
def test_order(order):
    assert parse(order=order).order == order


def test_order_defaults_to_c_when_absent():
    doc = zarray()
    del doc["order"]
    assert parse_array("", encode(doc), None).order == "C"


@pytest.mark.parametrize(
    ("path", "shape", "separator", "index", "expected"),
    [
        ("foo", [4, 4], ".", (1, 2), ["foo/1.2"]),
        ("foo", [4, 4], "/", (1, 2), ["foo/1/2"]),
        ("foo", [4, 4], None, (1, 2), ["foo/1.2", "foo/1/2"]),
        ("foo", [4, 4], "absent", (1, 2), ["foo/1.2", "foo/1/2"]),
        ("", [4, 4, 4], ".", (0, 3, 1), ["0.3.1"]),
        ("", [4, 4, 4], "/", (0, 3, 1), ["0/3/1"]),
        ("a/b/c", [4, 4, 4], "absent", (10, 0, 2), ["a/b/c/10.0.2", "a/b/c/10/0/2"]),
        ("", [40], ".", (12,), ["12"]),
        ("", [40], "/", (12,), ["12"]),
        # 1-D and 0-d arrays have a single possible key whatever the separator
        ("", [40], "absent", (12,), ["12"]),
        ("g", [40], None, (3,), ["g/3"]),
        ("", [], ".", (), ["0"]),
        ("", [], "/", (), ["0"]),
        ("", [], "absent", (), ["0"]),
        ("x", [], None, (), ["x/0"]),
    ],
    ids=str,
)
def test_chunk_keys(path, shape, separator, index, expected):
    overrides = {"shape": shape, "chunks": [1] * len(shape)}
    if separator != "absent":
        overrides["dimension_separator"] = separator
    keys = parse(path, **overrides).chunk_keys(index)
    assert keys == expected
    assert len(set(keys)) == len(keys), "a candidate key is probed twice"


def test_invalid_dimension_separator():
    with pytest.raises(MetadataError):
        parse(dimension_separator="-")


def test_zero_dimensional_array():
    meta = parse(shape=[], chunks=[], dtype="<f8", fill_value="NaN")
    assert meta.shape == () and meta.chunks == ()
    assert meta.nbytes == 8 and meta.n_chunks == 1
    assert meta.fill_value == b"\x00\x00\x00\x00\x00\x00\xf8\x7f"


def test_zero_length_axis():
    meta = parse(shape=[3, 0], chunks=[2, 2])
    assert meta.shape == (3, 0)
    assert meta.nbytes == 0
    assert meta.n_chunks == 0


def test_array_dimensions_give_dimension_names():
    attrs = json.dumps({"_ARRAY_DIMENSIONS": ["y", "x"], "units": "m"}).encode()
    meta = parse("v", zattrs=attrs, shape=[4, 5], chunks=[2, 2])
    assert meta.dimension_names == ("y", "x")
    assert meta.attrs == {"_ARRAY_DIMENSIONS": ["y", "x"], "units": "m"}
    assert meta.documents == (".zarray", ".zattrs")


@pytest.mark.parametrize("dims", [["y"], ["y", "x", "z"], ["y", 3], "yx", None])
def test_unusable_array_dimensions_are_ignored(dims):
    attrs = json.dumps({"_ARRAY_DIMENSIONS": dims}).encode()
    meta = parse(zattrs=attrs, shape=[4, 5], chunks=[2, 2])
    assert meta.dimension_names is None
    assert meta.attrs == {"_ARRAY_DIMENSIONS": dims}


@pytest.mark.parametrize(
    ("zarray_extra", "zattrs", "expected"),
    [
        # netCDF-C 4.8.x: _NCZARR_ARRAY with dimrefs in .zarray
        ({"_NCZARR_ARRAY": {"dimrefs": ["/time", "/grp/lat"]}}, None, ("time", "lat")),
        # netCDF-C 4.9: _nczarr_array with dimrefs and storage
        ({"_nczarr_array": {"dimrefs": ["/y", "/x"], "storage": "chunked"}}, None, ("y", "x")),
        # later: "dimensions", written as JSON text
        ({"_nczarr_array": '{"dimensions": ["/a/b", "/c"]}'}, None, ("b", "c")),
        # NCZarr 3 puts it into .zattrs
        ({}, {"_nczarr_array": {"dimensions": ["/r", "/s"]}}, ("r", "s")),
        # xarray's attribute wins over NCZarr's
        (
            {"_nczarr_array": {"dimrefs": ["/y", "/x"]}},
            {"_ARRAY_DIMENSIONS": ["p", "q"]},
            ("p", "q"),
        ),
        # unusable: wrong rank, not strings, not JSON
        ({"_nczarr_array": {"dimrefs": ["/y"]}}, None, None),
        ({"_nczarr_array": {"dimrefs": [1, 2]}}, None, None),
        ({"_nczarr_array": "{not json"}, None, None),
    ],
)
def test_nczarr_dimension_names(zarray_extra, zattrs, expected):
    doc = dict(zarray(shape=[4, 5], chunks=[2, 2]), **zarray_extra)
    meta = parse_array("v", encode(doc), None if zattrs is None else json.dumps(zattrs).encode())
    assert meta.dimension_names == expected


def test_no_zattrs():
    meta = parse()
    assert meta.attrs == {}
    assert meta.documents == (".zarray",)
    assert meta.dimension_names is None


@pytest.mark.parametrize("zattrs", [b"{not json", b"[1, 2]", b"\xff\xfe", b"", b"null"])
def test_broken_zattrs_reads_as_empty_attributes(zattrs):
    meta = parse("a", zattrs=zattrs, shape=[4, 5], chunks=[2, 2])
    assert meta.attrs == {}
    assert meta.dimension_names is None
    assert meta.shape == (4, 5)


# ---------------------------------------------------------------- metadata errors


def _without(key: str) -> bytes:
    doc = zarray()
    del doc[key]
    return encode(doc)


BAD_ZARRAY = [
    pytest.param(b"{", id="invalid-json"),
    pytest.param(b"", id="empty"),
    pytest.param(b"\xff\xfe{}", id="not-utf8"),
    pytest.param(b"[2]", id="not-an-object"),
    pytest.param(_without("zarr_format"), id="missing-zarr_format"),
    pytest.param(_without("shape"), id="missing-shape"),
    pytest.param(_without("chunks"), id="missing-chunks"),
    pytest.param(_without("dtype"), id="missing-dtype"),
    pytest.param(encode(zarray(zarr_format=3)), id="zarr_format-3"),
    pytest.param(encode(zarray(zarr_format=1)), id="zarr_format-1"),
    pytest.param(encode(zarray(shape=[-1])), id="negative-shape"),
    pytest.param(encode(zarray(shape=[3], chunks=[0])), id="zero-chunk-length"),
    pytest.param(encode(zarray(shape=[3], chunks=[-2])), id="negative-chunk-length"),
    pytest.param(encode(zarray(shape=[1.5])), id="float-shape"),
    pytest.param(encode(zarray(shape=[True])), id="bool-shape"),
    pytest.param(encode(zarray(shape=3)), id="shape-not-a-list"),
    pytest.param(encode(zarray(shape=[3, 3], chunks=[2])), id="rank-mismatch"),
    pytest.param(encode(zarray(shape=[], chunks=[1])), id="rank-mismatch-0d"),
    pytest.param(encode(zarray(shape=[2**60], chunks=[1], dtype="<f8")), id="bytes-2**63"),
    pytest.param(encode(zarray(shape=[2**62, 4], chunks=[1, 1])), id="bytes-2**66"),
    pytest.param(encode(zarray(shape=[2**63], chunks=[1], dtype="|u1")), id="elements-2**63"),
    pytest.param(encode(zarray(shape=[3], chunks=[2**61], dtype="<i4")), id="chunk-2**63"),
    pytest.param(encode(zarray(order="K")), id="order-K"),
    pytest.param(encode(zarray(order="c")), id="order-lowercase"),
    pytest.param(encode(zarray(order=None)), id="order-null"),
    pytest.param(encode(zarray(compressor="zlib")), id="compressor-string"),
    pytest.param(encode(zarray(compressor={"level": 1})), id="compressor-without-id"),
    pytest.param(encode(zarray(filters=[{"level": 1}])), id="filter-without-id"),
    pytest.param(encode(zarray(filters={"id": "delta"})), id="filters-not-a-list"),
]


@pytest.mark.parametrize("data", BAD_ZARRAY)
def test_bad_zarray_is_metadata_error(data):
    with pytest.raises(MetadataError) as info:
        parse_array("grp/arr", data, None)
    assert "grp/arr/.zarray" in str(info.value)


def test_largest_representable_array_is_accepted():
    # (2**60 - 1) * 8 = 2**63 - 8 bytes still fits a signed 64-bit st_size
    meta = parse(shape=[2**60 - 1], chunks=[2**20], dtype="<f8")
    assert meta.nbytes == 2**63 - 8 <= MAX_NBYTES


def test_unknown_codec_parses_and_fails_only_when_decoding():
    meta = parse(compressor={"id": "no-such-codec"})
    assert meta.codecs.bytes_bytes[0].config == {"id": "no-such-codec"}
    with pytest.raises(CodecResolutionError):
        meta.codecs.decode(b"\x00" * 8)


def test_parse_group():
    group = parse_group("g", b'{"zarr_format": 2}', b'{"title": "t"}')
    assert group.path == "g"
    assert group.attrs == {"title": "t"}
    assert group.documents == (".zgroup", ".zattrs")
    assert parse_group("", b'{"zarr_format": 2}', None).documents == (".zgroup",)
    assert parse_group("", b'{"zarr_format": 2}', b"{oops").attrs == {}
    for bad in (b'{"zarr_format": 3}', b"{}", b"[", b"[2]"):
        with pytest.raises(MetadataError):
            parse_group("g", bad, None)


# ---------------------------------------------------------------- codec pipeline

COMPRESSORS = [
    {"id": "zlib", "level": 1},
    {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0},
    {"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 2, "blocksize": 0},
    {"id": "gzip", "level": 1},
    {"id": "bz2", "level": 1},
    {"id": "lzma", "format": 1, "check": -1, "preset": None, "filters": None},
    {"id": "zstd", "level": 1},
    {"id": "lz4", "acceleration": 1},
    None,
]
DELTA_SHUFFLE = [{"id": "delta", "dtype": "<i4"}, {"id": "shuffle", "elementsize": 4}]


def _cid(cfg):
    return "none" if cfg is None else "-".join(str(v) for v in cfg.values() if v is not None)


def _chunk_data(dtype="<i4", shape=(4, 6)):
    return (np.arange(math.prod(shape)) * 7 - 11).reshape(shape).astype(dtype)


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("filters", [[], DELTA_SHUFFLE], ids=["plain", "delta+shuffle"])
@pytest.mark.parametrize("compressor", COMPRESSORS, ids=_cid)
def test_codec_round_trip(compressor, filters, order):
    data = _chunk_data()
    pipe = CodecPipeline(compressor, filters)
    encoded = pipe.encode(np.asarray(data, order=order))
    assert isinstance(encoded, bytes)
    decoded = pipe.decode(encoded, np.dtype("<i4"), (4, 6), order)
    assert decoded.dtype == np.dtype("<i4")
    assert decoded.shape == (4, 6)
    np.testing.assert_array_equal(decoded, data)
    if compressor is not None and not filters:
        # the stored stream holds the chunk in its declared memory order
        raw = numcodecs.get_codec(dict(compressor)).decode(encoded)
        assert bytes(raw) == data.tobytes(order=order)


@pytest.mark.parametrize("order", ["C", "F"])
def test_codec_round_trip_fixedscaleoffset(order):
    filters = [{"id": "fixedscaleoffset", "offset": 0, "scale": 10, "dtype": "<f8", "astype": "u1"}]
    data = _chunk_data("u1", (3, 5)).astype("<f8") / 10
    pipe = CodecPipeline({"id": "zlib", "level": 1}, filters)
    encoded = pipe.encode(np.asarray(data, order=order))
    assert len(zlib.decompress(encoded)) == data.size  # stored as one byte per element
    decoded = pipe.decode(encoded, np.dtype("<f8"), (3, 5), order)
    np.testing.assert_allclose(decoded, data, atol=1e-12)


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize(
    ("compressor", "filters", "dtype"),
    [
        *[(c, DELTA_SHUFFLE, "<i4") for c in COMPRESSORS],
        ({"id": "zlib", "level": 1}, [], ">f8"),
        (
            None,
            [{"id": "fixedscaleoffset", "offset": 0, "scale": 10, "dtype": "<f8", "astype": "u1"}],
            "<f8",
        ),
    ],
    ids=str,
)
def test_pipeline_decodes_chunks_written_by_zarr_python(
    tmp_path, compressor, filters, dtype, order
):
    data = _chunk_data(dtype, (5, 7))
    if dtype == "<f8":
        data = np.abs(data) % 25 / 10
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        arr = zarr.create_array(
            store=str(tmp_path),
            shape=(5, 7),
            chunks=(4, 6),
            dtype=dtype,
            zarr_format=2,
            order=order,
            compressors=numcodecs.get_codec(dict(compressor)) if compressor else None,
            filters=[numcodecs.get_codec(dict(f)) for f in filters] or None,
        )
        arr[...] = data
        oracle = arr[...]
    meta = parse_array("", (tmp_path / ".zarray").read_bytes(), None)
    assert meta.order == order
    for index, region in [((0, 0), np.s_[0:4, 0:6]), ((1, 1), np.s_[4:5, 6:7])]:
        stored = (tmp_path / ".".join(map(str, index))).read_bytes()
        chunk = meta.codecs.decode(stored)
        assert chunk.shape == (4, 6)
        part = chunk[: oracle[region].shape[0], : oracle[region].shape[1]]
        np.testing.assert_array_equal(part, oracle[region])


@pytest.mark.parametrize(
    "data", [_chunk_data(), np.zeros((64, 64), "<i4")], ids=["incompressible", "compressible"]
)
@pytest.mark.parametrize("compressor", [c for c in COMPRESSORS if c is not None], ids=_cid)
def test_corrupt_or_truncated_chunk_raises(compressor, data):
    pipe = CodecPipeline(compressor, [])
    encoded = pipe.encode(data)
    bad_inputs = {
        "truncated-by-half": encoded[: len(encoded) // 2],
        "truncated-by-one": encoded[:-1],
        "three-zero-bytes": b"\x00" * 3,
        "text": b"this is definitely not a compressed chunk, just text" * 3,
    }
    for what, bad in bad_inputs.items():
        try:
            decoded = pipe.decode(bad, data.dtype, data.shape, "C")
        except Exception:  # whatever the codec raises; the chunk cache makes it an EIO
            continue
        pytest.fail(
            f"{what} ({len(bad)} of {len(encoded)} bytes) decoded without error; "
            f"equal to the original: {np.array_equal(decoded, data)}"
        )


@pytest.mark.parametrize("compressor", COMPRESSORS, ids=_cid)
def test_wrong_decoded_size_raises_value_error(compressor):
    pipe = CodecPipeline(compressor, [])
    encoded = pipe.encode(_chunk_data())  # 4 x 6 x 4 = 96 bytes
    for shape in [(5, 6), (4, 5), (1,), ()]:
        with pytest.raises(ValueError):
            pipe.decode(encoded, np.dtype("<i4"), shape, "C")
    with pytest.raises(ValueError):
        pipe.decode(encoded, np.dtype("<i8"), (4, 6), "C")


def test_gzip_id_holding_zlib_stream_is_decoded():
    # z5 wrote zlib streams under the id "gzip"
    data = _chunk_data()
    pipe = CodecPipeline({"id": "gzip", "level": 1}, [])
    decoded = pipe.decode(zlib.compress(data.tobytes()), np.dtype("<i4"), (4, 6), "C")
    np.testing.assert_array_equal(decoded, data)
    with pytest.raises(zlib.error):
        pipe.decode(b"neither gzip nor zlib", np.dtype("<i4"), (4, 6), "C")


def test_pipeline_reads_fixture_written_by_hand(tmp_path: Path):
    # A .zarray exactly like the spec's example (delta f8 -> f4, blosc lz4 shuffle)
    doc = {
        "chunks": [4, 5],
        "compressor": {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1},
        "dtype": "<f8",
        "fill_value": "NaN",
        "filters": [{"id": "delta", "dtype": "<f8", "astype": "<f4"}],
        "order": "C",
        "shape": [10, 10],
        "zarr_format": 2,
    }
    meta = parse_array("", encode(doc), None)
    data = np.linspace(0, 1, 20).reshape(4, 5)
    stored = numcodecs.Blosc("lz4", 5, 1).encode(
        numcodecs.Delta(dtype="<f8", astype="<f4").encode(data)
    )
    decoded = meta.codecs.decode(stored)
    np.testing.assert_allclose(decoded, data, rtol=1e-6)
    assert meta.codecs.encode(data)  # and the pipeline encodes too
    np.testing.assert_allclose(meta.codecs.decode(meta.codecs.encode(data)), data, rtol=1e-6)
    assert np.isnan(np.frombuffer(meta.fill_value, "<f8")[0])
