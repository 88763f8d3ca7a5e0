"""A Zarr group as one netCDF classic file: its child arrays as variables (pure).

Each direct child array of a numeric type is a variable of the same name, its
data in C order, big-endian; the group's attributes are the global attributes.

- Dimensions come from the arrays' dimension names (xarray's ``_ARRAY_DIMENSIONS``
  in v2, ``dimension_names`` in v3); an axis without one gets ``dim_<var>_<i>``.
  Where two arrays give one name different lengths, the first to claim it keeps
  it and the other's axis becomes ``<name>_<length>``; coordinate variables (a
  1-D array named as its dimension) claim first, so they keep their names.
- Types: i1 NC_BYTE, i2 NC_SHORT, i4 NC_INT, f4 NC_FLOAT, f8 NC_DOUBLE; u1 is
  NC_BYTE with ``_Unsigned = "true"`` (the convention netCDF-Java, netCDF4-python
  and xarray read) in a CDF-2 file, NC_UBYTE in a CDF-5 one; u2, u4, i8, u8 are
  CDF-5's types, and so is any variable of 4 GiB or more. Other types (bool,
  float16, complex, dates, text, structured) are left out, with the reason.
- ``_FillValue``, in the variable's type: the array's attribute where it has one
  (xarray writes it there for v3, floats as base64 of a little-endian double),
  else for Zarr v2 and older the array's fill value, as xarray reads them.
- Arrays with an axis of length 0 are left out: netCDF reads a dimension of
  length 0 as the unlimited one.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from zarrfs.formats.conventions import cf
from zarrfs.formats.model import ArrayMeta
from zarrfs.formats.netcdf import encoding
from zarrfs.formats.netcdf.encoding import (
    CDF5,
    NC_BYTE,
    NC_CHAR,
    NC_DOUBLE,
    NC_FLOAT,
    NC_INT,
    NC_INT64,
    NC_SHORT,
    NC_UBYTE,
    NC_UINT,
    NC_UINT64,
    NC_USHORT,
    Attribute,
    Dimension,
    Variable,
    valid_name,
)

# A group may list far more arrays than anyone reads as one file.
MAX_VARIABLES = 8192
# All attributes of one file together; past this, attributes are left out.
MAX_ATTRIBUTE_BYTES = 4 << 20
# Attributes that say what zarrfs says itself, or that belong to the Zarr store.
_OWN = frozenset({"_ARRAY_DIMENSIONS", "_FillValue", "_Unsigned", "_NCProperties"})

_TYPES = {
    "i1": NC_BYTE,
    "i2": NC_SHORT,
    "i4": NC_INT,
    "i8": NC_INT64,
    "u1": NC_UBYTE,
    "u2": NC_USHORT,
    "u4": NC_UINT,
    "u8": NC_UINT64,
    "f4": NC_FLOAT,
    "f8": NC_DOUBLE,
}


@dataclass(frozen=True)
class Member:
    """A child array of the group: its name there, its metadata, and the
    attributes its variable carries (``carried_attributes``)."""

    name: str
    meta: ArrayMeta
    attrs: Mapping[str, Any]


@dataclass(frozen=True)
class Placed:
    """Where a member's data lies in the file."""

    member: str  # its name in the group
    begin: int
    nbytes: int
    dtype: np.dtype  # the array's, as array.raw holds it

    @property
    def swapped(self) -> bool:
        """Whether its bytes are the other way round in the file (little-endian)."""
        return (
            self.dtype.itemsize > 1
            and self.dtype.byteorder not in (">", "|")
            and (self.dtype.byteorder != "=" or np.little_endian)
        )


@dataclass(frozen=True)
class GroupFile:
    header: bytes
    variables: tuple[Placed, ...]  # by begin
    size: int
    version: int
    left_out: tuple[tuple[str, str], ...]  # (array name, why)


def netcdf_type(meta: ArrayMeta) -> int | str:
    """The netCDF type of the array's elements, or why it has none."""
    dtype = meta.dtype
    if meta.unsupported is not None:
        return meta.unsupported
    if dtype.fields is not None or dtype.subdtype is not None:
        return "structured data types have no netCDF type"
    found = _TYPES.get(f"{dtype.kind}{dtype.itemsize}")
    if found is None:
        return f"data type {dtype.str} has no netCDF classic type"
    return found


def why_no_variable(meta: ArrayMeta) -> str | None:
    """Why the array can be no variable of its group's file whatever its siblings
    are (its type, an axis of length 0), or None."""
    found = netcdf_type(meta)
    if isinstance(found, str):
        return found
    if 0 in meta.shape:
        return "an axis of length 0 (netCDF's unlimited one)"
    return None


def has_netcdf_type(meta: ArrayMeta) -> bool:
    return isinstance(netcdf_type(meta), int)


def carried_attributes(meta: ArrayMeta) -> Mapping[str, Any]:
    """The attributes of the array its variable carries: those the conventions pass
    through (bounded, printable, JSON scalars and lists: formats/conventions/cf.py)."""
    return cf.carried_attributes(meta)


def _kept(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if k not in _OWN and not k.startswith("_nczarr")}


def _dimension(dims: dict[str, tuple[int, int]], name: str, length: int) -> int:
    """The index of dimension ``name`` of ``length`` in ``dims`` (name: index,
    length), made if new; renamed ``<name>_<length>`` (then numbered) where ``name``
    has another length."""
    for candidate in _renamed(name, length):
        valid = valid_name(candidate)
        if valid is None:
            continue
        found = dims.get(valid)
        if found is None:
            dims[valid] = (len(dims), length)
            return len(dims) - 1
        if found[1] == length:
            return found[0]
    fallback = f"dim_{len(dims)}"
    while fallback in dims:
        fallback += "_"
    dims[fallback] = (len(dims), length)
    return len(dims) - 1


def _renamed(name: str, length: int) -> Iterator[str]:
    yield name
    yield f"{name}_{length}"
    for n in range(2, 6):
        yield f"{name}_{length}_{n}"


def _decoded_fill(value: Any, dtype: np.dtype) -> Any:
    """xarray's ``_FillValue`` for a float array of Zarr v3: base64 of a
    little-endian double; JSON's own words for what is not finite."""
    if not isinstance(value, str) or dtype.kind != "f":
        return value
    words = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
    if value in words:
        return words[value]
    try:
        raw = base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        return None
    return struct.unpack("<d", raw)[0] if len(raw) == 8 else None


def _fill_attribute(meta: ArrayMeta, nc_type: int) -> Attribute | None:
    value: Any = None
    if "_FillValue" in meta.attrs:
        value = _decoded_fill(meta.attrs["_FillValue"], meta.dtype)
    elif meta.zarr_format < 3 and meta.fill_value is not None:
        value = np.frombuffer(meta.fill_value, dtype=meta.dtype, count=1)[0].item()
    if value is None:
        return None
    # An unsigned byte held as NC_BYTE: its value as the unsigned type, same bytes.
    value_type = NC_UBYTE if meta.dtype.kind == "u" and nc_type == NC_BYTE else nc_type
    made = encoding.typed_attribute("_FillValue", value_type, value)
    return None if made is None else replace(made, nc_type=nc_type)


@dataclass
class _Candidate:
    member: Member
    name: str
    nc_type: int
    dimensions: tuple[int, ...] = ()


def _candidates(members: Sequence[Member]) -> tuple[list[_Candidate], list[tuple[str, str]]]:
    chosen: list[_Candidate] = []
    left_out: list[tuple[str, str]] = []
    names: set[str] = set()
    for member in members:
        meta = member.meta
        found = netcdf_type(meta)
        name = valid_name(member.name)
        why = why_no_variable(meta)
        if why is not None or isinstance(found, str):
            left_out.append((member.name, why or str(found)))
        elif name is None or name in names:
            left_out.append((member.name, "no netCDF name of its own"))
        elif len(chosen) >= MAX_VARIABLES:
            left_out.append((member.name, f"more than {MAX_VARIABLES} variables"))
        else:
            names.add(name)
            chosen.append(_Candidate(member, name, found))
    return chosen, left_out


def _is_coordinate(candidate: _Candidate) -> bool:
    meta = candidate.member.meta
    return len(meta.shape) == 1 and meta.dimension_names == (candidate.member.name,)


def _name_dimensions(chosen: list[_Candidate]) -> list[Dimension]:
    dims: dict[str, tuple[int, int]] = {}
    for candidate in sorted(chosen, key=lambda c: not _is_coordinate(c)):
        meta = candidate.member.meta
        given = meta.dimension_names or (None,) * len(meta.shape)
        indexes = []
        for axis, (label, length) in enumerate(zip(given, meta.shape, strict=True)):
            name = valid_name(label) if label else None
            if name is None:
                name = valid_name(f"dim_{candidate.name}_{axis}") or f"dim_{len(dims)}"
            indexes.append(_dimension(dims, name, length))
        candidate.dimensions = tuple(indexes)
    return [Dimension(name, length) for name, (_, length) in dims.items()]


def _variable_attributes(
    candidate: _Candidate, nc_type: int, budget: list[int]
) -> tuple[Attribute, ...]:
    meta = candidate.member.meta
    own = []
    fill = _fill_attribute(meta, nc_type)
    if fill is not None:
        own.append(fill)
    if nc_type == NC_BYTE and meta.dtype.kind == "u":
        own.append(Attribute("_Unsigned", NC_CHAR, 4, b"true"))
    return (*own, *_within(encoding.attributes(_kept(candidate.member.attrs)), budget))


def _within(found: Sequence[Attribute], budget: list[int]) -> tuple[Attribute, ...]:
    """The attributes that fit in what is left of the file's attribute bytes."""
    kept = []
    for a in found:
        cost = len(a.name) + len(a.values) + 24
        if cost > budget[0]:
            continue
        budget[0] -= cost
        kept.append(a)
    return tuple(kept)


def group_file(members: Sequence[Member], group_attrs: Mapping[str, Any]) -> GroupFile:
    """The netCDF file of a group of ``members`` (in file order) with ``group_attrs``."""
    chosen, left_out = _candidates(members)
    dimensions = _name_dimensions(chosen)
    budget = [MAX_ATTRIBUTE_BYTES]
    natural = [Variable(c.name, c.dimensions, c.nc_type, (), c.member.meta.nbytes) for c in chosen]
    # An unsigned byte is NC_BYTE with _Unsigned, unless the file is CDF-5 anyway.
    signed = [replace(v, nc_type=NC_BYTE if v.nc_type == NC_UBYTE else v.nc_type) for v in natural]
    version = encoding.version_for(dimensions, signed)
    sized = natural if version == CDF5 else signed
    variables = [
        replace(v, attributes=_variable_attributes(c, v.nc_type, budget))
        for v, c in zip(sized, chosen, strict=True)
    ]
    global_attributes = _within(encoding.attributes(_kept(group_attrs)), budget)
    layout = encoding.layout(dimensions, variables, global_attributes)
    placed = tuple(
        Placed(c.member.name, begin, c.member.meta.nbytes, c.member.meta.dtype)
        for c, begin in zip(chosen, layout.begins, strict=True)
    )
    return GroupFile(layout.header, placed, layout.size, layout.version, tuple(left_out))
