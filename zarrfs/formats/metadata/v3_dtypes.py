"""Zarr v3 data types and fill values as numpy dtypes and element bytes (pure, no I/O).

A v3 ``data_type`` carries no byte order: the ``bytes`` codec's ``endian`` only
says how chunks are stored. Every dtype here is therefore the natural
little-endian numpy form (``int32`` -> ``<i4``), and every decoded fill value is
the little-endian bytes of one element, ready to be repeated into a chunk.

Covered: the core types (bool, ints, floats, complex, ``r<N>``), the extension
types zarr-python 3 writes (``numpy.datetime64``/``numpy.timedelta64``,
``fixed_length_utf32``, ``null_terminated_bytes``, ``raw_bytes``, ``struct`` and
its legacy alias ``structured``) and the variable-length types (``string``,
``variable_length_bytes``, ...), which parse but have no dtype: shown as
metadata only.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from zarrfs.errors import MetadataError
from zarrfs.formats.limits import MAX_ITEMSIZE

_CORE: dict[str, str] = {
    "bool": "|b1",
    "int8": "|i1",
    "int16": "<i2",
    "int32": "<i4",
    "int64": "<i8",
    "uint8": "|u1",
    "uint16": "<u2",
    "uint32": "<u4",
    "uint64": "<u8",
    "float16": "<f2",
    "float32": "<f4",
    "float64": "<f8",
    "complex64": "<c8",
    "complex128": "<c16",
}

# Variable-length types, by every name a writer used, mapped to their scalar family.
# "variable_length_utf8" is zarr-python's class name for numpy's StringDType and
# "bytes" the zarr-extensions name of what zarr-python writes as variable_length_bytes.
_VLEN: dict[str, str] = {
    "string": "string",
    "variable_length_utf8": "string",
    "variable_length_bytes": "bytes",
    "bytes": "bytes",
}

_TIME_UNITS = frozenset(
    ["Y", "M", "W", "D", "h", "m", "s", "ms", "us", "ns", "ps", "fs", "as", "generic"]
)
_MAX_SCALE_FACTOR = 2**31 - 1
# Nested structs recurse once per level; a field list is walked whole. Neither is
# bounded by MAX_ITEMSIZE alone (zero nesting cost is not zero bytes), so cap both.
_MAX_STRUCT_DEPTH = 32
_MAX_STRUCT_FIELDS = 4096
# Enough digits for any r<N> up to MAX_ITEMSIZE bytes; longer names are refused
# before int() so an absurd name costs nothing.
_RAW_BITS = re.compile(r"r([1-9][0-9]{0,11})")
_HEX = re.compile(r"0x([0-9a-fA-F]+)")

# The spec's "NaN": sign 0, mantissa MSB 1, other mantissa bits 0 (numpy's own NaN
# has the same bits today, but spelling them out keeps the result bit-exact).
_CANONICAL_NAN = {2: 0x7E00, 4: 0x7FC00000, 8: 0x7FF8000000000000}
_NAT = -(2**63)


@dataclass(frozen=True)
class V3Type:
    """One parsed v3 ``data_type``.

    ``dtype`` is the little-endian numpy dtype of ``array.raw``, or None when the
    type has no fixed-size numpy form (variable-length, or an element larger than
    MAX_ITEMSIZE); ``unsupported`` then says why, for metadata-only display.
    """

    name: str
    dtype: np.dtype | None
    unsupported: str | None = None
    configuration: Mapping[str, Any] = field(default_factory=dict)
    # Struct types only: (field name, field type) in declaration order.
    fields: tuple[tuple[str, V3Type], ...] = ()

    @property
    def variable_length(self) -> bool:
        return self.name in _VLEN


def parse_data_type(value: Any) -> V3Type:
    """The zarr.json ``data_type`` (a name or ``{"name", "configuration"}``) as a V3Type.

    MetadataError for unknown names and invalid configurations.
    """
    return _parse(value, depth=0)


def _parse(value: Any, depth: int) -> V3Type:
    if isinstance(value, str):
        name, config = value, {}
    elif isinstance(value, dict):
        name = value.get("name")
        config = value.get("configuration", {})
        if not isinstance(name, str):
            raise MetadataError(f"data type without a name: {_short(value)}")
        if not isinstance(config, dict):
            raise MetadataError(f"data type {name!r} has a non-object configuration")
    else:
        raise MetadataError(f"invalid data type {_short(value)}")

    # The struct spec allows {"name": "float64"}; a real configuration on a
    # core type would mean something this reader does not know.
    if config and (name in _CORE or name in _VLEN or _RAW_BITS.fullmatch(name)):
        raise MetadataError(f"data type {name!r} takes no configuration")
    if name in _CORE:
        return V3Type(name, np.dtype(_CORE[name]))
    if name in _VLEN:
        return V3Type(
            name,
            None,
            unsupported=f"variable-length data type {name!r} has no fixed element size",
        )
    if match := _RAW_BITS.fullmatch(name):
        bits = int(match.group(1))
        if bits % 8:
            raise MetadataError(f"raw data type {name!r}: bit count must be a multiple of 8")
        return _sized(name, bits // 8, "|V{}", config)
    if name in ("numpy.datetime64", "numpy.timedelta64"):
        return _parse_time(name, config)
    if name == "fixed_length_utf32":
        n = _length_bytes(name, config, multiple=4)
        return _sized(name, n, "<U{}", config, per_char=4)
    if name == "null_terminated_bytes":
        return _sized(name, _length_bytes(name, config), "|S{}", config)
    if name == "raw_bytes":
        return _sized(name, _length_bytes(name, config), "|V{}", config)
    if name in ("struct", "structured"):
        return _parse_struct(name, config, depth)
    raise MetadataError(f"unknown data type {name!r}")


def _sized(name: str, nbytes: int, form: str, config: dict[str, Any], per_char: int = 1) -> V3Type:
    if nbytes > MAX_ITEMSIZE:
        # Valid, just too large to hold one element of: metadata only, like v2.
        return V3Type(
            name,
            None,
            unsupported=f"elements of {nbytes} bytes are larger than the "
            f"{MAX_ITEMSIZE} zarrfs shows",
            configuration=config,
        )
    return V3Type(name, np.dtype(form.format(nbytes // per_char)), configuration=config)


def _length_bytes(name: str, config: dict[str, Any], multiple: int = 1) -> int:
    if set(config) != {"length_bytes"}:
        raise MetadataError(f"data type {name!r} needs exactly 'length_bytes', got {config!r}")
    n = config["length_bytes"]
    if isinstance(n, bool) or not isinstance(n, int) or n < 1 or n % multiple:
        raise MetadataError(
            f"data type {name!r}: length_bytes must be a positive multiple of {multiple}, "
            f"got {_short(n)}"
        )
    return n


def _parse_time(name: str, config: dict[str, Any]) -> V3Type:
    if set(config) != {"unit", "scale_factor"}:
        raise MetadataError(f"data type {name!r} needs 'unit' and 'scale_factor', got {config!r}")
    unit, scale = config["unit"], config["scale_factor"]
    if unit == "μs":
        unit = "us"
    if not isinstance(unit, str) or unit not in _TIME_UNITS:
        raise MetadataError(f"data type {name!r}: unknown unit {_short(unit)}")
    if isinstance(scale, bool) or not isinstance(scale, int) or not 1 <= scale <= _MAX_SCALE_FACTOR:
        raise MetadataError(f"data type {name!r}: invalid scale_factor {_short(scale)}")
    code = "<M8" if name == "numpy.datetime64" else "<m8"
    if unit == "generic":
        if scale != 1:
            raise MetadataError(f"data type {name!r}: a generic unit takes no scale factor")
        spec = code
    else:
        spec = f"{code}[{scale if scale != 1 else ''}{unit}]"
    return V3Type(name, np.dtype(spec), configuration=config)


def _parse_struct(name: str, config: dict[str, Any], depth: int) -> V3Type:
    if depth >= _MAX_STRUCT_DEPTH:
        raise MetadataError(f"struct data type nests deeper than {_MAX_STRUCT_DEPTH} levels")
    raw_fields = config.get("fields")
    if set(config) != {"fields"} or not isinstance(raw_fields, list) or not raw_fields:
        raise MetadataError(f"data type {name!r} needs a non-empty 'fields' list")
    if len(raw_fields) > _MAX_STRUCT_FIELDS:
        raise MetadataError(f"struct data type has more than {_MAX_STRUCT_FIELDS} fields")
    fields: list[tuple[str, V3Type]] = []
    for entry in raw_fields:
        # "struct" spells a field {"name", "data_type"}; legacy "structured" [name, type].
        if isinstance(entry, dict) and set(entry) == {"name", "data_type"}:
            field_name, field_type = entry["name"], entry["data_type"]
        elif isinstance(entry, list) and len(entry) == 2:
            field_name, field_type = entry
        else:
            raise MetadataError(f"invalid struct field {_short(entry)}")
        if not isinstance(field_name, str) or not field_name:
            raise MetadataError(f"struct field names must be non-empty strings: {_short(entry)}")
        if any(field_name == seen for seen, _ in fields):
            raise MetadataError(f"struct field name {field_name!r} appears twice")
        sub = _parse(field_type, depth + 1)
        if sub.variable_length:
            raise MetadataError(f"struct field {field_name!r} has a variable-length type")
        fields.append((field_name, sub))

    unsupported = next((f.unsupported for _, f in fields if f.dtype is None), None)
    itemsize = sum(f.dtype.itemsize for _, f in fields if f.dtype is not None)
    if unsupported is None and itemsize > MAX_ITEMSIZE:
        unsupported = (
            f"elements of {itemsize} bytes are larger than the {MAX_ITEMSIZE} zarrfs shows"
        )
    if unsupported is not None:
        return V3Type(name, None, unsupported, config, tuple(fields))
    try:
        # A list of (name, dtype) is numpy's packed layout: no padding, as the spec says.
        dtype = np.dtype([(n, f.dtype) for n, f in fields])
    except (TypeError, ValueError) as e:
        raise MetadataError(f"invalid struct data type: {e}") from e
    return V3Type(name, dtype, configuration=config, fields=tuple(fields))


def decode_fill_value(value: Any, v3type: V3Type, *, endian: str = "little") -> bytes:
    """The zarr.json ``fill_value`` as the little-endian bytes of one element.

    ``endian`` is the ``bytes`` codec's: only a legacy base64 struct fill is
    stored in it. For types without a dtype the result is the scalar's own bytes
    (UTF-8 text for strings, the bytes for variable-length bytes) for display, or
    ``b""`` for an element too large to show. MetadataError when invalid.
    """
    dtype = v3type.dtype
    try:
        if dtype is None:
            return _vlen_fill(value, v3type)
        return _fill(value, v3type, dtype, endian)
    except MetadataError:
        raise
    except (TypeError, ValueError, OverflowError, binascii.Error, UnicodeError) as e:
        raise MetadataError(
            f"invalid fill value {_short(value)} for data type {v3type.name!r}: {e}"
        ) from e


def _fill(value: Any, v3type: V3Type, dtype: np.dtype, endian: str) -> bytes:
    kind, size = dtype.kind, dtype.itemsize
    if kind == "b":
        if not isinstance(value, bool):
            raise MetadataError(f"bool fill value must be true or false, got {_short(value)}")
        return b"\x01" if value else b"\x00"
    if kind in "iu":
        return _int_bytes(_integer(value), size, signed=kind == "i")
    if kind == "f":
        return _float_bytes(value, size)
    if kind == "c":
        if not isinstance(value, list) or len(value) != 2:
            raise MetadataError(f"complex fill value must be [re, im], got {_short(value)}")
        return _float_bytes(value[0], size // 2) + _float_bytes(value[1], size // 2)
    if kind in "Mm":
        if value == "NaT":
            return _int_bytes(_NAT, 8, signed=True)
        return _int_bytes(_integer(value), 8, signed=True)
    if kind == "U":
        if not isinstance(value, str):
            raise MetadataError(f"fill value must be a string, got {_short(value)}")
        if len(value) > size // 4:
            raise MetadataError(f"fill value has more than {size // 4} code points")
        # surrogatepass: numpy's <U holds lone surrogates, JSON can spell them.
        return value.encode("utf-32-le", "surrogatepass").ljust(size, b"\x00")
    if kind == "S":
        raw = _byte_string(value, size)
        return raw.ljust(size, b"\x00")
    if kind == "V" and dtype.fields is None:
        raw = _byte_string(value, size)
        if len(raw) != size:
            raise MetadataError(f"fill value has {len(raw)} bytes, the type needs {size}")
        return raw
    if kind == "V":
        return _struct_fill(value, v3type, dtype, endian)
    raise MetadataError(f"no fill value decoding for {dtype}")


def _struct_fill(value: Any, v3type: V3Type, dtype: np.dtype, endian: str) -> bytes:
    if isinstance(value, dict):
        names = [n for n, _ in v3type.fields]
        if sorted(value) != sorted(names):
            raise MetadataError(f"struct fill value needs exactly the fields {names}")
        # Each field's bytes are already little-endian; fields pack without padding.
        return b"".join(
            _fill(value[n], f, f.dtype, endian) for n, f in v3type.fields if f.dtype is not None
        )
    if isinstance(value, str):
        raw = _base64(value, dtype.itemsize)
        if len(raw) != dtype.itemsize:
            raise MetadataError(
                f"fill value has {len(raw)} bytes, the struct needs {dtype.itemsize}"
            )
        if endian == "big":
            # Legacy base64 fills are packed in the bytes codec's byte order.
            return np.frombuffer(raw, dtype=dtype.newbyteorder(">")).astype(dtype).tobytes()
        return raw
    raise MetadataError(f"struct fill value must be an object or base64, got {_short(value)}")


def _vlen_fill(value: Any, v3type: V3Type) -> bytes:
    family = _VLEN.get(v3type.name)
    if family == "string":
        if not isinstance(value, str):
            raise MetadataError(f"string fill value must be a string, got {_short(value)}")
        if len(value) > MAX_ITEMSIZE // 4:
            raise MetadataError("string fill value is too long")
        return value.encode("utf-8", "surrogatepass")
    if family == "bytes":
        return _byte_string(value, MAX_ITEMSIZE)
    # Too large to show: nothing will ever be filled with it.
    return b""


def _byte_string(value: Any, limit: int) -> bytes:
    """Base64 text or a list of byte values, at most ``limit`` bytes."""
    if isinstance(value, str):
        raw = _base64(value, limit)
    elif isinstance(value, list):
        if len(value) > limit:
            raise MetadataError(f"fill value has more than {limit} bytes")
        if not all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= 255 for b in value):
            raise MetadataError("fill value bytes must be integers in [0, 255]")
        raw = bytes(value)
    else:
        raise MetadataError(
            f"fill value must be base64 text or a list of bytes, got {_short(value)}"
        )
    if len(raw) > limit:
        raise MetadataError(f"fill value has {len(raw)} bytes, the type holds {limit}")
    return raw


def _base64(text: str, limit: int) -> bytes:
    # Refuse before decoding: base64 spends 4 characters per 3 bytes.
    if len(text) > (limit + 2) // 3 * 4:
        raise MetadataError(f"base64 fill value is longer than {limit} bytes")
    return base64.b64decode(text.encode("ascii"), validate=True)


def _integer(value: Any) -> int:
    if isinstance(value, bool):
        raise MetadataError(f"fill value {value!r} is not an integer")
    if isinstance(value, int):
        return value
    # zarr-python accepts integral JSON floats (1.0); so do we, nothing else.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise MetadataError(f"fill value {_short(value)} is not an integer")


def _int_bytes(value: int, size: int, *, signed: bool) -> bytes:
    try:
        return value.to_bytes(size, "little", signed=signed)
    except OverflowError:
        raise MetadataError(f"fill value {_short(value)} is out of range") from None


def _float_bytes(value: Any, size: int) -> bytes:
    """One IEEE float of ``size`` bytes from any v3 float encoding, bit-exact."""
    if isinstance(value, str):
        if value == "NaN":
            return _CANONICAL_NAN[size].to_bytes(size, "little")
        if value in ("Infinity", "-Infinity"):
            number = math.inf if value == "Infinity" else -math.inf
        elif match := _HEX.fullmatch(value):
            digits = match.group(1)
            if len(digits) != 2 * size:
                raise MetadataError(
                    f"hex fill value {_short(value)} needs {2 * size} digits for a "
                    f"{8 * size}-bit float"
                )
            # The spec's hex form is the bit pattern: NaN payloads are kept as written.
            return int(digits, 16).to_bytes(size, "little")
        else:
            raise MetadataError(f"invalid float fill value {_short(value)}")
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise MetadataError(f"invalid float fill value {_short(value)}")
    else:
        number = float(value)
        if math.isnan(number):
            # A bare NaN token (accepted by Python's json) means the canonical NaN.
            return _CANONICAL_NAN[size].to_bytes(size, "little")
    # numpy rounds half to even, overflowing to infinity as the spec's rounding does.
    with np.errstate(over="ignore"):
        return np.array(number, dtype=np.float64).astype(f"<f{size}").tobytes()


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:80]}... ({len(text)} characters)"
