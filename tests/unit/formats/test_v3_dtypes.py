"""Zarr v3 data types and fill values (zarrfs.formats.metadata.v3_dtypes): pure, no mount."""

from __future__ import annotations

import base64
import json
import math
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.paths import CORPUS
from zarrfs.errors import MetadataError
from zarrfs.formats.limits import MAX_ITEMSIZE
from zarrfs.formats.metadata.dtypes import parse_dtype
from zarrfs.formats.metadata.v3_dtypes import V3Type, decode_fill_value, parse_data_type


def _cfg(name: str, **config: Any) -> dict[str, Any]:
    return {"name": name, "configuration": config}


def _time(name: str, unit: str, scale: int = 1) -> dict[str, Any]:
    return _cfg(name, unit=unit, scale_factor=scale)


NTB3 = _cfg("null_terminated_bytes", length_bytes=3)
LEGACY_STRUCT = _cfg("structured", fields=[["a", "int16"], ["b", "float64"], ["c", NTB3]])
NEW_STRUCT = _cfg(
    "struct",
    fields=[
        {"name": "id", "data_type": "int32"},
        {"name": "flags", "data_type": "uint8"},
        {"name": "value", "data_type": {"name": "float64"}},
    ],
)
NESTED_STRUCT = _cfg(
    "struct",
    fields=[
        {
            "name": "point",
            "data_type": _cfg(
                "struct",
                fields=[
                    {"name": "x", "data_type": "float32"},
                    {"name": "y", "data_type": "float32"},
                ],
            ),
        },
        {"name": "t", "data_type": _time("numpy.datetime64", "s")},
    ],
)

DATA_TYPES: list[tuple[Any, Any]] = [
    ("bool", "|b1"),
    ("int8", "|i1"),
    ("int16", "<i2"),
    ("int32", "<i4"),
    ("int64", "<i8"),
    ("uint8", "|u1"),
    ("uint16", "<u2"),
    ("uint32", "<u4"),
    ("uint64", "<u8"),
    ("float16", "<f2"),
    ("float32", "<f4"),
    ("float64", "<f8"),
    ("complex64", "<c8"),
    ("complex128", "<c16"),
    ("r8", "|V1"),
    ("r24", "|V3"),
    ("r128", "|V16"),
    ({"name": "float64"}, "<f8"),
    ({"name": "int8", "configuration": {}}, "|i1"),
    (_time("numpy.datetime64", "s"), "<M8[s]"),
    (_time("numpy.datetime64", "ms", 10), "<M8[10ms]"),
    (_time("numpy.datetime64", "μs"), "<M8[us]"),
    (_time("numpy.datetime64", "Y"), "<M8[Y]"),
    (_time("numpy.datetime64", "generic"), "<M8"),
    (_time("numpy.timedelta64", "ps"), "<m8[ps]"),
    (_time("numpy.timedelta64", "us", 10), "<m8[10us]"),
    (_cfg("fixed_length_utf32", length_bytes=4), "<U1"),
    (_cfg("fixed_length_utf32", length_bytes=48), "<U12"),
    (_cfg("null_terminated_bytes", length_bytes=6), "|S6"),
    (_cfg("raw_bytes", length_bytes=3), "|V3"),
    (LEGACY_STRUCT, [("a", "<i2"), ("b", "<f8"), ("c", "|S3")]),
    (NEW_STRUCT, [("id", "<i4"), ("flags", "|u1"), ("value", "<f8")]),
    (NESTED_STRUCT, [("point", [("x", "<f4"), ("y", "<f4")]), ("t", "<M8[s]")]),
]


@pytest.mark.parametrize(("data_type", "expected"), DATA_TYPES, ids=str)
def test_data_type_dtype(data_type: Any, expected: Any) -> None:
    t = parse_data_type(data_type)
    assert t.dtype == np.dtype(expected)
    assert t.unsupported is None
    # Every multi-byte member is little-endian: the bytes codec's endian is elsewhere.
    assert t.dtype is not None and t.dtype.isnative


def test_struct_is_packed_in_declaration_order() -> None:
    t = parse_data_type(NEW_STRUCT)
    assert t.dtype is not None and t.dtype.itemsize == 13
    assert [t.dtype.fields[n][1] for n in ("id", "flags", "value")] == [0, 4, 5]
    assert [name for name, _ in t.fields] == ["id", "flags", "value"]


@pytest.mark.parametrize(
    "data_type", ["string", "variable_length_utf8", "variable_length_bytes", "bytes"]
)
def test_variable_length_types_are_unsupported(data_type: str) -> None:
    t = parse_data_type(data_type)
    assert t.dtype is None and t.variable_length
    assert t.unsupported and "variable-length" in t.unsupported


@pytest.mark.parametrize(
    "data_type",
    [
        f"r{8 * (MAX_ITEMSIZE + 1)}",
        _cfg("raw_bytes", length_bytes=MAX_ITEMSIZE + 1),
        _cfg("null_terminated_bytes", length_bytes=2**62),
        _cfg("fixed_length_utf32", length_bytes=4 * (MAX_ITEMSIZE // 4 + 1)),
        _cfg("struct", fields=[["a", _cfg("raw_bytes", length_bytes=MAX_ITEMSIZE + 1)]]),
        _cfg(
            "struct",
            fields=[["a", _cfg("raw_bytes", length_bytes=MAX_ITEMSIZE)], ["b", "uint8"]],
        ),
    ],
    ids=["r_bits", "raw_bytes", "null_terminated_bytes", "utf32", "struct_field", "struct_sum"],
)
def test_oversize_types_are_metadata_only(data_type: Any) -> None:
    t = parse_data_type(data_type)
    assert t.dtype is None and not t.variable_length
    assert t.unsupported and "larger than" in t.unsupported
    assert decode_fill_value("AAAA", t) == b""


def _deep_struct(levels: int) -> dict[str, Any]:
    dt: Any = "uint8"
    for _ in range(levels):
        dt = _cfg("struct", fields=[["f", dt]])
    return dt


BAD_DATA_TYPES: list[Any] = [
    "float128",
    "Int32",
    "<i4",
    "",
    "r0",
    "r12",
    "r7",
    "r" + "9" * 5000,
    42,
    None,
    ["int32"],
    {"configuration": {}},
    {"name": 5},
    {"name": "int32", "configuration": {"endian": "big"}},
    {"name": "int32", "configuration": []},
    {"name": "string", "configuration": {"x": 1}},
    _time("numpy.datetime64", "fortnight"),
    _time("numpy.datetime64", "s", 0),
    _time("numpy.datetime64", "s", 2**31),
    _time("numpy.timedelta64", "s", True),
    _time("numpy.datetime64", "generic", 10),
    _cfg("numpy.datetime64", unit="s"),
    _cfg("numpy.datetime64", unit="s", scale_factor=1, endian="big"),
    _cfg("fixed_length_utf32", length_bytes=6),
    _cfg("fixed_length_utf32", length_bytes=0),
    _cfg("null_terminated_bytes"),
    _cfg("null_terminated_bytes", length_bytes=True),
    _cfg("raw_bytes", length_bytes=-3),
    _cfg("raw_bytes", length_bytes=3.0),
    _cfg("struct", fields=[]),
    _cfg("struct"),
    _cfg("struct", fields=[["a", "int8"], ["a", "int16"]]),
    _cfg("struct", fields=[["", "int8"]]),
    _cfg("struct", fields=[["s", "string"]]),
    _cfg("struct", fields=[["a", "int8", [2]]]),
    _cfg("struct", fields=[{"name": "a"}]),
    _cfg("struct", fields=[["a", "int65"]]),
    _cfg("struct", fields=[[f"f{i}", "uint8"] for i in range(5000)]),
    _deep_struct(40),
    "numpy.datetime64",
]


@pytest.mark.parametrize("data_type", BAD_DATA_TYPES, ids=lambda v: str(v)[:60])
def test_invalid_data_type_raises(data_type: Any) -> None:
    with pytest.raises(MetadataError):
        parse_data_type(data_type)


def test_nested_struct_within_depth_limit_parses() -> None:
    t = parse_data_type(_deep_struct(20))
    assert t.dtype is not None and t.dtype.itemsize == 1


def _le(fmt: str, *values: Any) -> bytes:
    return struct.pack("<" + fmt, *values)


NaT = -(2**63)

FILLS: list[tuple[Any, Any, bytes]] = [
    ("bool", True, b"\x01"),
    ("bool", False, b"\x00"),
    ("int8", -128, _le("b", -128)),
    ("int16", -7, _le("h", -7)),
    ("int32", 42, _le("i", 42)),
    ("int64", -(2**63), _le("q", -(2**63))),
    ("uint8", 255, b"\xff"),
    ("uint16", 9, _le("H", 9)),
    ("uint32", 2**32 - 1, _le("I", 2**32 - 1)),
    ("uint64", 2**64 - 1, _le("Q", 2**64 - 1)),
    ("int32", 3.0, _le("i", 3)),
    ("float16", 1.5, _le("e", 1.5)),
    ("float16", 65520.0, _le("H", 0x7C00)),  # rounds to +inf, as the spec's rounding does
    ("float16", "NaN", _le("H", 0x7E00)),
    ("float16", "-Infinity", _le("H", 0xFC00)),
    ("float16", "0x7e01", _le("H", 0x7E01)),
    ("float32", "NaN", _le("I", 0x7FC00000)),
    ("float32", "0x7fc00001", _le("I", 0x7FC00001)),
    ("float32", "0xFFC00000", _le("I", 0xFFC00000)),
    ("float32", "0x7f800001", _le("I", 0x7F800001)),  # signalling NaN stays signalling
    ("float32", "0x00000001", _le("I", 1)),
    ("float32", -0.0, _le("I", 0x80000000)),
    ("float32", 0.1, _le("f", 0.1)),
    ("float32", 3, _le("f", 3.0)),
    ("float32", "Infinity", _le("I", 0x7F800000)),
    ("float32", 1e300, _le("I", 0x7F800000)),
    ("float32", math.nan, _le("I", 0x7FC00000)),
    ("float64", "NaN", _le("Q", 0x7FF8000000000000)),
    ("float64", "0x7ff8000000000001", _le("Q", 0x7FF8000000000001)),
    ("float64", "0x8000000000000000", _le("d", -0.0)),
    ("float64", -0.0, _le("d", -0.0)),
    ("float64", 1.5, _le("d", 1.5)),
    ("float64", "-Infinity", _le("d", -math.inf)),
    ("complex64", [1.5, -2.0], _le("ff", 1.5, -2.0)),
    ("complex64", ["NaN", 1.5], _le("If", 0x7FC00000, 1.5)),
    ("complex64", ["0x7fc00001", "-Infinity"], _le("If", 0x7FC00001, -math.inf)),
    ("complex128", ["NaN", "Infinity"], _le("Qd", 0x7FF8000000000000, math.inf)),
    ("complex128", [0, "0x8000000000000000"], _le("dd", 0.0, -0.0)),
    ("r8", [7], b"\x07"),
    ("r24", [1, 2, 255], b"\x01\x02\xff"),
    ("r24", "AQID", b"\x01\x02\x03"),
    (_cfg("raw_bytes", length_bytes=3), "AQID", b"\x01\x02\x03"),
    (_cfg("raw_bytes", length_bytes=2), [0, 9], b"\x00\x09"),
    (_cfg("null_terminated_bytes", length_bytes=4), "YWI=", b"ab\x00\x00"),
    (_cfg("null_terminated_bytes", length_bytes=4), "", b"\x00" * 4),
    (_cfg("null_terminated_bytes", length_bytes=2), "YWI=", b"ab"),
    (_cfg("fixed_length_utf32", length_bytes=12), "xy", "xy\0".encode("utf-32-le")),
    (_cfg("fixed_length_utf32", length_bytes=8), "🎉", "🎉\0".encode("utf-32-le")),
    (_cfg("fixed_length_utf32", length_bytes=8), "", b"\x00" * 8),
    (_time("numpy.datetime64", "s"), "NaT", _le("q", NaT)),
    (_time("numpy.datetime64", "s"), NaT, _le("q", NaT)),
    (_time("numpy.timedelta64", "ms", 10), -5, _le("q", -5)),
    (_time("numpy.datetime64", "D"), 0, _le("q", 0)),
    (LEGACY_STRUCT, "AAAAAAAAAAAAADAAAA==", bytes(10) + b"0\x00\x00"),
    (LEGACY_STRUCT, {"a": 1, "b": "NaN", "c": "YQ=="}, _le("hQ", 1, 0x7FF8000000000000) + b"a\0\0"),
    (NEW_STRUCT, {"value": -0.0, "flags": 3, "id": -1}, _le("iBd", -1, 3, -0.0)),
    (
        NESTED_STRUCT,
        {"point": {"x": 1.0, "y": "0x7fc00001"}, "t": "NaT"},
        _le("fIq", 1.0, 0x7FC00001, NaT),
    ),
]


@pytest.mark.parametrize(("data_type", "fill", "expected"), FILLS, ids=lambda v: str(v)[:40])
def test_fill_value_bytes(data_type: Any, fill: Any, expected: bytes) -> None:
    t = parse_data_type(data_type)
    got = decode_fill_value(fill, t)
    assert got == expected
    assert t.dtype is not None and len(got) == t.dtype.itemsize


@pytest.mark.parametrize(
    ("data_type", "fill", "expected"),
    [
        ("string", "", b""),
        ("string", "héllo", "héllo".encode()),
        ("variable_length_bytes", "", b""),
        ("variable_length_bytes", "AQID", b"\x01\x02\x03"),
        ("bytes", [1, 2, 3], b"\x01\x02\x03"),
    ],
)
def test_variable_length_fill_is_the_scalar(data_type: str, fill: Any, expected: bytes) -> None:
    assert decode_fill_value(fill, parse_data_type(data_type)) == expected


def test_struct_base64_fill_follows_big_endian_bytes_codec() -> None:
    t = parse_data_type(_cfg("structured", fields=[["a", "int16"], ["b", "float32"]]))
    stored = struct.pack(">hf", -2, 1.5)
    text = base64.b64encode(stored).decode()
    assert decode_fill_value(text, t, endian="big") == _le("hf", -2, 1.5)
    assert decode_fill_value(text, t) == stored


BAD_FILLS: list[tuple[Any, Any]] = [
    ("bool", 1),
    ("bool", "true"),
    ("bool", None),
    ("int8", 128),
    ("int8", -129),
    ("uint8", -1),
    ("uint64", 2**64),
    ("int32", 1.5),
    ("int32", True),
    ("int32", "7"),
    ("int32", None),
    ("float32", "0x7fc0000"),  # 7 digits
    ("float32", "0x7ff8000000000000"),  # a float64 pattern
    ("float64", "0x7fc00001"),  # a float32 pattern
    ("float16", "0x7e0001"),
    ("float32", "0x"),
    ("float32", "0xzzzzzzzz"),
    ("float32", "0X7FC00000"),
    ("float32", "nan"),
    ("float32", "inf"),
    ("float32", "1.5"),
    ("float32", True),
    ("float32", None),
    ("float32", [1.0]),
    ("complex64", 1.0),
    ("complex64", [1.0]),
    ("complex64", [1.0, 2.0, 3.0]),
    ("complex64", ["0x7ff8000000000000", 0]),
    ("complex128", ["0x7fc00000", 0]),
    ("complex64", [1.0, "bad"]),
    ("complex64", {"re": 1, "im": 2}),
    ("r24", [1, 2]),
    ("r24", [1, 2, 3, 4]),
    ("r24", [1, 2, 256]),
    ("r24", [1, 2, True]),
    ("r24", "AQIDBA=="),
    ("r24", "not base64!"),
    ("r24", 0),
    (_cfg("raw_bytes", length_bytes=3), "AQ"),
    (_cfg("null_terminated_bytes", length_bytes=1), "YWI="),
    (_cfg("null_terminated_bytes", length_bytes=4), "abc"),
    (_cfg("fixed_length_utf32", length_bytes=8), "abc"),
    (_cfg("fixed_length_utf32", length_bytes=8), 0),
    (_time("numpy.datetime64", "s"), "2020-01-01"),
    (_time("numpy.datetime64", "s"), 2**63),
    (_time("numpy.datetime64", "s"), "nat"),
    (LEGACY_STRUCT, "AAAA"),
    (LEGACY_STRUCT, 0),
    (LEGACY_STRUCT, {"a": 1, "b": 2}),
    (LEGACY_STRUCT, {"a": 1, "b": 2, "c": "", "d": 4}),
    (NEW_STRUCT, {"id": 1, "flags": 256, "value": 0}),
    ("string", 5),
    ("variable_length_bytes", "%%%"),
]


@pytest.mark.parametrize(("data_type", "fill"), BAD_FILLS, ids=lambda v: str(v)[:40])
def test_invalid_fill_value_raises(data_type: Any, fill: Any) -> None:
    t = parse_data_type(data_type)
    with pytest.raises(MetadataError):
        decode_fill_value(fill, t)


def test_huge_base64_fill_is_refused_before_decoding() -> None:
    t = parse_data_type(_cfg("raw_bytes", length_bytes=3))
    with pytest.raises(MetadataError, match="longer than"):
        decode_fill_value("A" * 10_000_000, t)


@given(st.integers(0, 2**32 - 1))
def test_float32_hex_is_the_bit_pattern(bits: int) -> None:
    got = decode_fill_value(f"0x{bits:08x}", parse_data_type("float32"))
    assert got == _le("I", bits)


@given(st.integers(0, 2**16 - 1))
def test_float16_hex_is_the_bit_pattern(bits: int) -> None:
    assert decode_fill_value(f"0x{bits:04X}", parse_data_type("float16")) == _le("H", bits)


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
def test_complex128_hex_parts_are_bit_patterns(re_bits: int, im_bits: int) -> None:
    got = decode_fill_value(
        [f"0x{re_bits:016x}", f"0x{im_bits:016x}"], parse_data_type("complex128")
    )
    assert got == _le("QQ", re_bits, im_bits)


@given(st.floats(allow_nan=False, width=32))
def test_float32_numbers_round_trip(value: float) -> None:
    got = decode_fill_value(value, parse_data_type("float32"))
    assert got == np.float32(value).tobytes()


@given(
    st.sampled_from(["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]),
    st.data(),
)
def test_integers_in_range_match_numpy(name: str, data: st.DataObject) -> None:
    dtype = np.dtype(parse_data_type(name).dtype)
    info = np.iinfo(dtype)
    value = data.draw(st.integers(int(info.min), int(info.max)))
    assert decode_fill_value(value, parse_data_type(name)) == np.array(value, dtype).tobytes()


@given(st.text(max_size=5))
def test_utf32_fill_matches_numpy(text: str) -> None:
    t = parse_data_type(_cfg("fixed_length_utf32", length_bytes=20))
    assert t.dtype is not None
    assert decode_fill_value(text, t) == np.array(text, t.dtype).tobytes()


def _bytes_endian(codecs: list[dict[str, Any]]) -> str:
    for codec in codecs:
        if codec.get("name") == "bytes":
            return (codec.get("configuration") or {}).get("endian", "little")
        if codec.get("name") == "sharding_indexed":
            return _bytes_endian(codec["configuration"]["codecs"])
    return "little"


def test_corpus_v3_data_types_and_fills() -> None:
    expected = json.loads((CORPUS / "expected.json").read_text())
    entries = {k: v for k, v in expected.items() if v.get("format") == 3}
    assert len(entries) >= 200
    names: set[str] = set()
    for key, entry in entries.items():
        meta = json.loads((CORPUS / "data" / key / "zarr.json").read_text())
        t: V3Type = parse_data_type(meta["data_type"])
        names.add(t.name)
        fill = decode_fill_value(meta["fill_value"], t, endian=_bytes_endian(meta["codecs"]))
        if entry["sha256_c_order"] is None:
            assert t.dtype is None and t.unsupported, key
            continue
        assert t.dtype == parse_dtype(entry["dtype"]), key
        assert len(fill) == t.dtype.itemsize, key
    assert {"structured", "raw_bytes", "numpy.datetime64", "string"} <= names
