"""Sidecar headers that let legacy tools open ``array.raw`` (pure: no I/O).

``array.hdr`` is an ENVI header (GDAL, QGIS, ENVI/IDL, ImageJ, spectral), and
``array.nhdr`` a detached NRRD header (ITK, SimpleITK, 3D Slicer, teem, pynrrd).
Both describe the bytes of ``array.raw`` as they are: C order, the dtype of the
array's raw view, its byte order. Each is made from the dtype, the shape, the
array's path and dimension names, and (ENVI) the first value and step of regularly
spaced coordinates, so the views can make them afresh for every shape.

The ENVI ``map info`` line depends on coordinate values, which ``stat`` must not
read: where coordinates are named, the line is reserved at a fixed width (every
number as wide as the widest float64 ``repr``), padded with spaces after its ``}``,
and replaced by a comment line of the same width when the values turn out not to
be regular. So the size of the header follows from metadata alone.

The meaning of the values (formats/conventions) goes into ENVI's own fields, as
GDAL's ENVI driver reads them: ``coordinate system string`` (a WKT1, as GDAL 3.6
reads no WKT2; it takes it only beside a ``map info`` line, which a geotransform
given by attributes makes without reading anything), ``data ignore value``, ``data
gain values`` and ``data offset values`` (one per band), and ``band names``. Band
names are as wide as the metadata allows for (a date, or the index label when the
dates cannot be read), so these too leave the size to metadata.
"""

from __future__ import annotations

import itertools
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from zarrfs.formats.conventions import GeoTransform
from zarrfs.formats.conventions.cf import MAX_BANDS, TIME_LABEL_WIDTH

# ENVI "data type" codes (ENVI's header format; GDAL's ENVI driver reads the same
# table; 14 and 15 are newer than Debian 12's GDAL 3.6).
_ENVI_TYPES = {
    "u1": 1,
    "i2": 2,
    "i4": 3,
    "f4": 4,
    "f8": 5,
    "c8": 6,
    "c16": 9,
    "u2": 12,
    "u4": 13,
    "i8": 14,
    "u8": 15,
}
# NRRD "type" names (the NRRD0004 format). NRRD has no complex, boolean or half type.
_NRRD_TYPES = {
    "i1": "int8",
    "u1": "uint8",
    "i2": "int16",
    "u2": "uint16",
    "i4": "int32",
    "u4": "uint32",
    "i8": "int64",
    "u8": "uint64",
    "f4": "float",
    "f8": "double",
}

# Coordinates longer than this are not read for a header (8 MiB of float64).
MAX_COORDINATE_ELEMENTS = 1 << 20
# Nor are coordinates stored in more chunks (inner chunks, where sharded) than this:
# a read of a header is a read of every one of them, and each costs a fetch, a
# decode and a cache entry (a million one-element chunks would take minutes and gigabytes).
MAX_COORDINATE_CHUNKS = 1024
# Nor those whose chunks (or, sharded, whole shards) decode to more bytes than this
# together: one chunk far larger than the axis (chunks of 2**27 elements for 10
# values) would be decoded whole.
MAX_COORDINATE_DECODED = 64 << 20
# How long the coordinates of one header may take to read (a slow store): the
# header is then served without map info.
MAP_INFO_SECONDS = 10.0
# A coordinate is regular when each value lies within this fraction of a step of the
# line through the first and the last (plus the rounding of its own dtype).
REGULAR_TOLERANCE = 1e-3
# Names and paths shown in a header are cut to this many characters.
MAX_NAME_TEXT = 256
# Band names longer than this together are left out of a header.
MAX_BAND_NAMES_TEXT = 1 << 20
# Dimension names in band names are cut to this many characters.
MAX_BAND_NAME_PART = 32
# The widest repr() of a float64.
_WIDEST_NUMBER = "-1.2345678901234567e-308"
_NO_MAP_INFO = (
    "; no map info: the coordinates are not regular, do not fit the shape, or could not be read"
)

# CF/xarray "units" attributes → the unit names ENVI's map info knows.
_UNITS = {
    "m": "Meters",
    "metre": "Meters",
    "meter": "Meters",
    "metres": "Meters",
    "meters": "Meters",
    "km": "Km",
    "kilometre": "Km",
    "kilometer": "Km",
    "kilometres": "Km",
    "kilometers": "Km",
    "ft": "Feet",
    "foot": "Feet",
    "feet": "Feet",
}


def _type_key(dtype: np.dtype) -> str | None:
    if dtype.fields is not None or dtype.subdtype is not None:
        return None
    if dtype.kind not in "iufc":
        return None  # bool, strings, bytes, datetimes, objects
    return f"{dtype.kind}{dtype.itemsize}"


def envi_data_type(dtype: np.dtype) -> int | None:
    """ENVI's code for ``dtype``; None where ENVI has none (int8, bool, float16, ...)."""
    key = _type_key(dtype)
    return None if key is None else _ENVI_TYPES.get(key)


def nrrd_type(dtype: np.dtype) -> str | None:
    """NRRD's type name for ``dtype``; None where NRRD has none (complex, bool, ...)."""
    key = _type_key(dtype)
    return None if key is None else _NRRD_TYPES.get(key)


def is_big_endian(dtype: np.dtype) -> bool:
    order = dtype.byteorder
    return order == ">" or (order == "=" and sys.byteorder == "big")


def envi_dimensions(shape: Sequence[int]) -> tuple[int, int, int]:
    """(samples, lines, bands): the last axis, the one before it, the rest as bands
    (band sequential is C order); a missing axis counts 1."""
    samples = shape[-1] if len(shape) >= 1 else 1
    lines = shape[-2] if len(shape) >= 2 else 1
    return samples, lines, math.prod(shape[:-2])


# What _clean replaces: anything but printable ASCII, and ENVI's and NRRD's quoting.
_UNSAFE = re.compile(r'[^\x20-\x7e]|[{}"\\]')
# What may not stand in an item of an ENVI list: that and its separator.
_UNSAFE_IN_LIST = re.compile(r'[^\x20-\x7e]|[{}"\\,]')
# What may not stand in a value in braces (a WKT: quotes and commas are its own).
_UNSAFE_IN_BRACES = re.compile(r"[^\x20-\x7e]|[{}]")


def _clean(text: str) -> str:
    """``text`` safe inside a one-line header value: no braces, quotes or control
    characters (ENVI values end at ``}``, NRRD fields at the line's end), ASCII only
    (NRRD is ASCII; ENVI readers assume it), cut short."""
    out = _UNSAFE.sub("?", text[:MAX_NAME_TEXT])
    return out if len(text) <= MAX_NAME_TEXT else out + "..."


def _dimension_text(dimensions: Sequence[str | None] | None) -> str:
    if not dimensions:
        return ""
    return "; dimensions: " + ", ".join(_clean(d) if d else "-" for d in dimensions)


def coordinate_cost(
    shape: Sequence[int], chunks: Sequence[int], itemsize: int, shards: Sequence[int] | None
) -> str | None:
    """Why the values of a 1-D coordinate of this layout are not read for a header
    (too many elements, chunks, or decoded bytes); None when they may be. ``chunks``
    are the inner chunks of a sharded coordinate, whose ``shards`` may be read whole."""
    length = math.prod(shape)
    if length > MAX_COORDINATE_ELEMENTS:
        return f"{length} elements, more than {MAX_COORDINATE_ELEMENTS}"
    n_chunks = math.prod(-(-n // max(c, 1)) for n, c in zip(shape, chunks))
    if n_chunks > MAX_COORDINATE_CHUNKS:
        return f"{n_chunks} chunks, more than {MAX_COORDINATE_CHUNKS}"
    decoded = n_chunks * math.prod(chunks) * itemsize
    if shards is not None:
        n_shards = math.prod(-(-n // max(c, 1)) for n, c in zip(shape, shards))
        decoded = max(decoded, n_shards * math.prod(shards) * itemsize)
    if decoded > MAX_COORDINATE_DECODED:
        return f"its chunks decode to {decoded} bytes, more than {MAX_COORDINATE_DECODED}"
    return None


def coordinate_units(y_units: object, x_units: object) -> str | None:
    """The ``units=`` of ENVI's map info for coordinates with these ``units``
    attributes; None unless both name the same known unit."""
    found = []
    for units in (y_units, x_units):
        if not isinstance(units, str):
            return None
        name = units.strip().lower()
        found.append("Degrees" if name.startswith("degree") else _UNITS.get(name))
    return found[0] if found[0] is not None and found[0] == found[1] else None


def regular_axis(values: np.ndarray) -> tuple[float, float] | None:
    """(first value, step) of evenly spaced coordinate ``values``; None when they are
    fewer than two, not finite, not all distinct in one direction, or not regular."""
    if values.ndim != 1 or len(values) < 2 or values.dtype.kind not in "iuf":
        return None
    exact = values.astype(np.float64)
    if not np.isfinite(exact).all():
        return None
    first, last = float(exact[0]), float(exact[-1])
    step = (last - first) / (len(exact) - 1)
    if step == 0 or not math.isfinite(step):
        return None
    line = first + step * np.arange(len(exact), dtype=np.float64)
    rounding = float(np.finfo(values.dtype).eps) if values.dtype.kind == "f" else 0.0
    tolerance = REGULAR_TOLERANCE * abs(step) + 4 * rounding * float(np.abs(exact).max())
    if float(np.abs(exact - line).max()) > tolerance:
        return None
    return first, step


@dataclass(frozen=True)
class MapInfo:
    """Where the array lies: the outer corner of its first element (row 0, column 0)
    and the signed steps of the x (last) and y (second-to-last) coordinates."""

    x0: float
    y0: float
    dx: float
    dy: float


def map_info_of(y: np.ndarray, x: np.ndarray) -> MapInfo | None:
    """The map info of an array whose last two axes have cell-centre coordinates
    ``y`` and ``x``: the corner is half a step before the first centre, as xarray,
    rioxarray and GDAL's netCDF driver take it. None unless both are regular and x
    increases (ENVI has no way to say that x decreases)."""
    ys, xs = regular_axis(y), regular_axis(x)
    if ys is None or xs is None or xs[1] <= 0:
        return None
    (y_first, dy), (x_first, dx) = ys, xs
    info = MapInfo(x0=x_first - dx / 2, y0=y_first - dy / 2, dx=dx, dy=dy)
    return info if math.isfinite(info.x0) and math.isfinite(info.y0) else None


def _map_info_text(numbers: Sequence[str], units: str | None, *, south_up: bool) -> str:
    # As GDAL's ENVI driver writes it: reference pixel (1, 1) is the outer corner of
    # the first pixel; the y size is positive where y decreases down the rows
    # (north up); y increasing (south up) is "rotation=180", which GDAL reads as
    # a positive y step (geotransform[5] > 0), not as a turned image.
    extra = f", units={units}" if units else ""
    if south_up:
        extra += ", rotation=180"
    return f"map info = {{Arbitrary, 1, 1, {', '.join(numbers)}, 0, North{extra}}}"


def map_info_width(units: str | None) -> int:
    """The width reserved for the map info line: the longest any coordinates give."""
    return len(_map_info_text([_WIDEST_NUMBER] * 4, units, south_up=True))


def map_info_line(info: MapInfo | None, units: str | None) -> str:
    """The map info line at its reserved width (spaces after the ``}``), or for
    ``None`` a comment line (no ``=``: readers skip it) of the same width."""
    width = map_info_width(units)
    if info is None:
        text = _NO_MAP_INFO
    else:
        numbers = [repr(float(v)) for v in (info.x0, info.y0, info.dx, abs(info.dy))]
        text = _map_info_text(numbers, units, south_up=info.dy > 0)
        if len(text) > width:  # cannot happen: no repr() of a float64 is wider
            text = _NO_MAP_INFO
    return text.ljust(width)


def geotransform_map_info(transform: GeoTransform | None) -> MapInfo | None:
    """The map info of a GDAL geotransform (its origin is the outer corner already);
    None for a rotated or sheared one, or one whose x decreases (ENVI has no way to
    say either), or one that is not finite."""
    if transform is None:
        return None
    x0, dx, rx, y0, ry, dy = transform
    if rx != 0 or ry != 0 or not dx > 0 or dy == 0:
        return None
    if not all(math.isfinite(v) for v in transform):
        return None
    return MapInfo(x0=x0, y0=y0, dx=dx, dy=dy)


def _band_part(dimensions: Sequence[str | None] | None, axis: int) -> str:
    name = dimensions[axis] if dimensions and axis < len(dimensions) else None
    return _UNSAFE_IN_LIST.sub("?", (name or f"dim{axis}")[:MAX_BAND_NAME_PART])


def band_names(
    shape: Sequence[int],
    dimensions: Sequence[str | None] | None,
    *,
    time_axis: int | None = None,
    time_labels: Sequence[str] | None = None,
) -> list[str] | None:
    """One name per band (the leading axes in C order), every one as wide whatever
    ``time_labels`` hold: each axis gives "name=index", the time axis its date
    instead where ``time_labels`` (one per index, TIME_LABEL_WIDTH wide) are given.
    None for fewer than 3 axes, more than MAX_BANDS bands or names too long."""
    leading = list(shape[:-2])
    if len(shape) < 3 or math.prod(leading) > MAX_BANDS or math.prod(leading) == 0:
        return None
    parts = []
    for axis, length in enumerate(leading):
        name = _band_part(dimensions, axis)
        labels = [f"{name}={i}" for i in range(length)]
        width = len(labels[-1])
        if axis == time_axis:
            width = max(width, TIME_LABEL_WIDTH)
            if time_labels is not None and len(time_labels) == length:
                labels = [_UNSAFE_IN_LIST.sub("?", t[:TIME_LABEL_WIDTH]) for t in time_labels]
        parts.append([label.ljust(width) for label in labels])
    width = sum(len(p[0]) + 1 for p in parts)
    if width * math.prod(leading) > MAX_BAND_NAMES_TEXT:
        return None
    return [" ".join(combo) for combo in itertools.product(*parts)]


def _envi_number(value: float | int) -> str:
    return str(value) if isinstance(value, int) else repr(float(value))


def _envi_text(text: str | None) -> str | None:
    """``text`` if it fits in braces on one line of an ENVI header, else None."""
    if text is None or _UNSAFE_IN_BRACES.search(text):
        return None
    return text


def _meaning_rows(
    bands: int,
    crs_wkt: str | None,
    nodata: float | int | None,
    scale: float | None,
    offset: float | None,
    names: Sequence[str] | None,
) -> list[str]:
    rows = []
    wkt = _envi_text(crs_wkt)
    if wkt is not None:
        rows.append(f"coordinate system string = {{{wkt}}}")
    if nodata is not None:
        rows.append(f"data ignore value = {_envi_number(nodata)}")
    if (scale is not None or offset is not None) and 0 < bands <= MAX_BANDS:
        gain = _envi_number(1.0 if scale is None else scale)
        shift = _envi_number(0.0 if offset is None else offset)
        rows.append(f"data gain values = {{{', '.join([gain] * bands)}}}")
        rows.append(f"data offset values = {{{', '.join([shift] * bands)}}}")
    if names is not None and len(names) == bands:
        rows.append(f"band names = {{{', '.join(names)}}}")
    return rows


def envi_header(
    dtype: np.dtype,
    shape: Sequence[int],
    *,
    path: str,
    dimensions: Sequence[str | None] | None,
    map_info: str | None = None,
    crs_wkt: str | None = None,
    nodata: float | int | None = None,
    scale: float | None = None,
    offset: float | None = None,
    names: Sequence[str] | None = None,
) -> bytes:
    """An ENVI header for ``array.raw``; ``map_info`` is a line of map_info_line(),
    ``names`` those of band_names(). A WKT ENVI cannot hold (braces, not ASCII) is
    left out.

    ValueError if ENVI has no type for ``dtype``.
    """
    code = envi_data_type(dtype)
    if code is None:
        raise ValueError(f"ENVI has no data type for {dtype.str}")
    samples, lines, bands = envi_dimensions(shape)
    rows = [
        "ENVI",
        f"description = {{Zarr array /{_clean(path)}{_dimension_text(dimensions)}}}",
        f"samples = {samples}",
        f"lines = {lines}",
        f"bands = {bands}",
        "header offset = 0",
        "file type = ENVI Standard",
        f"data type = {code}",
        "interleave = bsq",
        f"byte order = {int(is_big_endian(dtype))}",
    ]
    if map_info is not None:
        rows.append(map_info)
    rows += _meaning_rows(bands, crs_wkt, nodata, scale, offset, names)
    return ("\n".join(rows) + "\n").encode("ascii")
