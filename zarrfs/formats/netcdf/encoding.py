"""The netCDF classic format's header: types, names, attributes, and its bytes (pure).

The header follows the format's specification ("The NetCDF Classic Format
Specification", with CDF-5's 64-bit counts): ``magic numrecs dim_list gatt_list
var_list``, every number big-endian, every name and attribute value padded to 4
bytes with zeros. Only fixed-size variables (no record dimension): ``numrecs`` is
0 and no dimension has length 0, which the format reserves for the unlimited one.

CDF-2 (64-bit offsets) counts in 4 bytes and knows the types of netCDF-3; CDF-5
counts in 8 and adds the unsigned and 64-bit integer types. ``version_for`` picks
CDF-2 unless a variable needs CDF-5.
"""

from __future__ import annotations

import math
import re
import struct
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

NC_BYTE, NC_CHAR, NC_SHORT, NC_INT, NC_FLOAT, NC_DOUBLE = 1, 2, 3, 4, 5, 6
NC_UBYTE, NC_USHORT, NC_UINT, NC_INT64, NC_UINT64 = 7, 8, 9, 10, 11
NC_DIMENSION, NC_VARIABLE, NC_ATTRIBUTE = 10, 11, 12

CDF2, CDF5 = 2, 5
# Types CDF-2 has no word for.
CDF5_TYPES = frozenset({NC_UBYTE, NC_USHORT, NC_UINT, NC_INT64, NC_UINT64})
# The big-endian numpy type of each netCDF type's values.
NUMPY_TYPES = {
    NC_BYTE: ">i1",
    NC_SHORT: ">i2",
    NC_INT: ">i4",
    NC_FLOAT: ">f4",
    NC_DOUBLE: ">f8",
    NC_UBYTE: ">u1",
    NC_USHORT: ">u2",
    NC_UINT: ">u4",
    NC_INT64: ">i8",
    NC_UINT64: ">u8",
}
# A variable's data takes whole 4-byte words in the file.
ALIGN = 4
# A variable of at least ALIGNED_FROM bytes begins on a multiple of DATA_ALIGN in
# the file (the gap before it reads as zeros; netCDF readers take each variable's
# begin from the header): a reader's requests, aligned in the file, then fall on
# the variable's own boundaries, as they fall on array.raw's, and each is served
# from one chunk rather than copied together from two (at most 1/64 more bytes).
DATA_ALIGN = 1 << 20
ALIGNED_FROM = 64 << 20
# CDF-2 holds a variable's size in an unsigned 4-byte word and a dimension's length
# in a signed one: larger ones need CDF-5.
CDF2_MAX_VSIZE = (1 << 32) - 4
CDF2_MAX_DIMENSION = (1 << 31) - 1
# netCDF-C's NC_MAX_NAME: longer names are refused by its readers.
MAX_NAME_BYTES = 256
# Bounds on what attributes put in a header (each attribute, each list of them).
MAX_TEXT_BYTES = 64 << 10
MAX_VALUES = 8192
MAX_ATTRIBUTES = 512


@dataclass(frozen=True)
class Attribute:
    name: str
    nc_type: int
    count: int
    values: bytes  # big-endian, unpadded


@dataclass(frozen=True)
class Dimension:
    name: str
    length: int


@dataclass(frozen=True)
class Variable:
    name: str
    dimensions: tuple[int, ...]  # indexes into the file's dimensions
    nc_type: int
    attributes: tuple[Attribute, ...]
    nbytes: int  # its data, unpadded


def padded(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


# Printable ASCII without space or ``/``, led by a letter, a digit or ``_``.
_PLAIN = re.compile(rf"[A-Za-z0-9_][!-.0-~]{{0,{MAX_NAME_BYTES - 1}}}")


def valid_name(name: str) -> str | None:
    """``name`` as netCDF-C accepts names (NFC UTF-8; first character a letter, a
    digit, ``_`` or not ASCII; no ``/``, no control character, no trailing
    space; at most 256 bytes): other characters are replaced by ``_``. None
    when nothing of it is left, or it is too long."""
    if _PLAIN.fullmatch(name):  # most names: nothing to change
        return name
    return made_valid(name)


def made_valid(name: str) -> str | None:
    """``valid_name`` the long way, for any text."""
    try:
        name = unicodedata.normalize("NFC", name)
    except (TypeError, ValueError):
        return None
    chars = ["_" if c == "/" or ord(c) < 0x20 or ord(c) == 0x7F else c for c in name]
    # Surrogates cannot be UTF-8.
    chars = ["_" if 0xD800 <= ord(c) <= 0xDFFF else c for c in chars]
    chars = list("".join(chars).rstrip())
    if chars and chars[0].isascii() and not (chars[0].isalnum() or chars[0] == "_"):
        chars[0] = "_"
    text = "".join(chars)
    if not text or len(text.encode()) > MAX_NAME_BYTES:
        return None
    return text


def _numbers(values: Sequence[Any]) -> tuple[int, np.ndarray] | None:
    """A list of JSON numbers as one netCDF type: NC_INT where every value is an
    integer that fits, else NC_DOUBLE."""
    if not values or len(values) > MAX_VALUES:
        return None
    if not all(isinstance(v, (int, float)) for v in values):
        return None
    if all(isinstance(v, int) and -(1 << 31) <= v < (1 << 31) for v in values):
        return NC_INT, np.array(values, dtype=">i4")
    try:
        return NC_DOUBLE, np.array([float(v) for v in values], dtype=">f8")
    except OverflowError:  # an integer past a double's range
        return None


def attribute(name: str, value: Any) -> Attribute | None:
    """A JSON attribute as netCDF holds it: text as NC_CHAR (UTF-8), a number or a
    list of numbers typed (NC_INT, else NC_DOUBLE); None for anything else (objects,
    nulls, lists of text, empty lists) and for values past the bounds."""
    nc_name = valid_name(name) if isinstance(name, str) else None
    if nc_name is None:
        return None
    if isinstance(value, str):
        try:
            text = value.encode()
        except UnicodeEncodeError:
            return None
        if len(text) > MAX_TEXT_BYTES:
            return None
        return Attribute(nc_name, NC_CHAR, len(text), text)
    found = _numbers(value if isinstance(value, list) else [value])
    if found is None:
        return None
    nc_type, array = found
    return Attribute(nc_name, nc_type, len(array), array.tobytes())


def typed_attribute(name: str, nc_type: int, value: Any) -> Attribute | None:
    """One value in a variable's own type (``_FillValue``), None where it does not
    fit the type (not a number, not whole for an integer type, out of range)."""
    dtype = np.dtype(NUMPY_TYPES[nc_type])
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        return None
    if dtype.kind in "iu":
        if isinstance(value, (float, np.floating)) and not float(value).is_integer():
            return None
        try:
            whole = int(value)
        except (OverflowError, ValueError):
            return None
        info = np.iinfo(dtype)
        if not info.min <= whole <= info.max:
            return None
        return Attribute(name, nc_type, 1, np.array([whole], dtype=dtype).tobytes())
    try:
        number = float(value)
    except (OverflowError, ValueError):
        return None
    if dtype.itemsize == 4 and math.isfinite(number) and abs(number) > float(np.finfo("f4").max):
        return None
    return Attribute(name, nc_type, 1, np.array([number], dtype=dtype).tobytes())


def attributes(values: Mapping[str, Any]) -> tuple[Attribute, ...]:
    """The attributes netCDF can hold of ``values``, at most MAX_ATTRIBUTES, the first
    of two whose names become the same."""
    found: dict[str, Attribute] = {}
    for name, value in values.items():
        if len(found) >= MAX_ATTRIBUTES:
            break
        made = attribute(name, value)
        if made is not None and made.name not in found:
            found[made.name] = made
    return tuple(found.values())


def version_for(dimensions: Sequence[Dimension], variables: Sequence[Variable]) -> int:
    """CDF-2 unless a type, a variable's size or a dimension's length needs CDF-5."""
    if any(v.nc_type in CDF5_TYPES or padded(v.nbytes) > CDF2_MAX_VSIZE for v in variables):
        return CDF5
    if any(d.length > CDF2_MAX_DIMENSION for d in dimensions):
        return CDF5
    return CDF2


class _Writer:
    def __init__(self, version: int) -> None:
        self.parts: list[bytes] = []
        self.count = struct.Struct(">q" if version == CDF5 else ">i").pack

    def word(self, value: int) -> None:
        self.parts.append(struct.pack(">i", value))

    def name(self, text: str) -> None:
        data = text.encode()
        self.parts.append(self.count(len(data)))
        self.parts.append(data + bytes(padded(len(data)) - len(data)))

    def list_tag(self, tag: int, n: int) -> None:
        self.word(tag if n else 0)
        self.parts.append(self.count(n))

    def attributes(self, found: Sequence[Attribute]) -> None:
        self.list_tag(NC_ATTRIBUTE, len(found))
        for a in found:
            self.name(a.name)
            self.word(a.nc_type)
            self.parts.append(self.count(a.count))
            self.parts.append(a.values + bytes(padded(len(a.values)) - len(a.values)))


def header(
    dimensions: Sequence[Dimension],
    variables: Sequence[Variable],
    global_attributes: Sequence[Attribute],
    version: int,
) -> tuple[bytearray, list[int]]:
    """The header's bytes with every variable's data beginning at 0, and where in
    them each variable's begin is (8 bytes, big-endian): offsets have a fixed
    width, so the header's length does not depend on them."""
    out = _Writer(version)
    out.parts.append(b"CDF" + bytes([version]))
    out.parts.append(out.count(0))  # numrecs: no record variable
    out.list_tag(NC_DIMENSION, len(dimensions))
    for d in dimensions:
        out.name(d.name)
        out.parts.append(out.count(d.length))
    out.attributes(global_attributes)
    out.list_tag(NC_VARIABLE, len(variables))
    places = []
    for v in variables:
        out.name(v.name)
        out.parts.append(out.count(len(v.dimensions)))
        for index in v.dimensions:
            out.parts.append(out.count(index))
        out.attributes(v.attributes)
        out.word(v.nc_type)
        # CDF-2 reads a variable's size as an unsigned word (version_for keeps it in).
        vsize = struct.pack(">q" if version == CDF5 else ">I", padded(v.nbytes))
        out.parts.append(vsize)
        places.append(len(out.parts))
        out.parts.append(bytes(8))
    # Where each begin lies: the lengths of the parts before it.
    at, positions, previous = 0, [], 0
    for place in places:
        at += sum(map(len, out.parts[previous:place]))
        positions.append(at)
        previous = place
    return bytearray(b"".join(out.parts)), positions


@dataclass(frozen=True)
class Layout:
    """A whole file: its header, and where each variable's data begins."""

    header: bytes
    begins: tuple[int, ...]
    size: int
    version: int


def layout(
    dimensions: Sequence[Dimension],
    variables: Sequence[Variable],
    global_attributes: Sequence[Attribute],
    aligned_from: int | None = None,
) -> Layout:
    """The file of these variables, their data one after the other after the header,
    each padded to 4 bytes; those of ``aligned_from`` bytes or more begin on a
    multiple of DATA_ALIGN (default: ALIGNED_FROM)."""
    aligned_from = ALIGNED_FROM if aligned_from is None else aligned_from
    version = version_for(dimensions, variables)
    text, positions = header(dimensions, variables, global_attributes, version)
    text += bytes(padded(len(text)) - len(text))
    start = len(text)
    begins = []
    for v, position in zip(variables, positions, strict=True):
        if v.nbytes >= aligned_from:
            start = -(-start // DATA_ALIGN) * DATA_ALIGN
        begins.append(start)
        struct.pack_into(">q", text, position, start)
        start += padded(v.nbytes)
    return Layout(bytes(text), tuple(begins), start, version)
