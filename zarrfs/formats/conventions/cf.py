"""CF and xarray conventions, GDAL's GeoTransform and the zarr-conventions
``proj:``/``spatial:`` attributes (pure).

Where each fact comes from, first found first:

- CRS: the variable ``grid_mapping`` names (xarray's ``spatial_ref``, CF's ``crs``)
  and its ``crs_wkt``/``spatial_ref`` (WKT) and ``epsg_code``; the array's own
  ``crs_wkt``/``spatial_ref``; ``proj:wkt2``, ``proj:code``, ``proj:epsg`` and a
  trivial ``proj:projjson`` on the array, then on its group. An EPSG code comes
  from ``epsg_code`` or from the ``AUTHORITY``/``ID`` that ends a WKT's outermost
  node; a code without a WKT gets one for the few CRSs known here (WGS 84 and its
  UTM zones).
- geotransform: GDAL's ``GeoTransform`` attribute on the grid mapping variable,
  else ``spatial:transform`` (rasterio's affine order a b c d e f) on the array or
  its group; else the 1-D sibling coordinates of the last two dimensions are named.
- ``_FillValue`` (else ``missing_value``; else, for a Zarr v2 array with
  ``_ARRAY_DIMENSIONS``, its non-null fill value, as xarray reads it) in the
  stored type, ``scale_factor``, ``add_offset``, ``units``, ``long_name`` (else
  ``standard_name``).
- time: a leading dimension whose sibling coordinate has ``units`` "<unit> since
  <date>"; its values are decoded by ``time_labels`` when a view reads them.

Attributes are hostile: every text is bounded and checked, every value of the wrong
type is ignored, and nothing here raises.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from zarrfs.formats.conventions.facts import (
    Conventions,
    Crs,
    GeoTransform,
    Surroundings,
    TimeAxis,
)
from zarrfs.formats.model import ArrayMeta

MAX_WKT = 64 << 10  # characters of a WKT
MAX_NAME = 256  # characters of a name, a unit, a calendar
MAX_TEXT = 4096  # characters of an attribute value kept for the netCDF view
MAX_ATTRIBUTES = 256  # attributes kept for the netCDF view
MAX_LIST = 256  # elements of a list attribute kept for the netCDF view
# Bands (the product of the leading dimensions) for which headers carry one value
# per band (names, gains, offsets) and time labels are decoded.
MAX_BANDS = 4096
# A decoded time: "YYYY-MM-DDThh:mm:ss", always this wide.
TIME_LABEL_WIDTH = 19

BAND_NAMES = frozenset({"band", "bands", "time", "channel", "channels", "wavelength"})

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_UNPRINTABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_SPACES = re.compile(r"[\t\r\n]+")
_SINCE = re.compile(r"^\s*([A-Za-z]+)\s+since\s+(\S.*?)\s*$")
_EPSG_CODE = re.compile(r"^\s*(?:EPSG|epsg):\s*(\d{1,9})\s*$")
# The AUTHORITY (WKT1) or ID (WKT2) that closes a WKT's outermost node: it is
# followed by that node's "]" alone (one of an inner node by two or more).
_WKT_EPSG = re.compile(
    r'(?:AUTHORITY|ID)\[\s*"EPSG"\s*,\s*"?(\d{1,9})"?\s*(?:,[^\[\]]*)?\]\s*\]\s*$'
)
_GRID_MAPPING_NAME = re.compile(r"^\s*([^\s:]+)")


# -- bounded, checked values ---------------------------------------------------------


def clean_text(value: object, limit: int = MAX_NAME) -> str | None:
    """``value`` if it is a string of at most ``limit`` characters with no control
    character; None otherwise."""
    if not isinstance(value, str) or len(value) > limit or _CONTROL.search(value):
        return None
    return value


def _wkt(value: object) -> str | None:
    """A WKT: tabs and line breaks (pretty-printed WKT2) become single spaces."""
    if not isinstance(value, str) or len(value) > MAX_WKT:
        return None
    text = _SPACES.sub(" ", value).strip()
    if not text or _CONTROL.search(text) or "[" not in text:
        return None
    return text


def _number(value: object) -> float | None:
    """A finite real number (not a bool); a list of one counts as its element."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _epsg(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        code = value
    elif isinstance(value, str) and len(value) <= 32:
        found = _EPSG_CODE.match(value) or re.match(r"^\s*(\d{1,9})\s*$", value)
        if found is None:
            return None
        code = int(found.group(1))
    else:
        return None
    return code if 0 < code < 1 << 31 else None


def wkt_epsg(wkt: str) -> int | None:
    """The EPSG code that names the CRS of ``wkt`` as a whole, if it ends with one."""
    found = _WKT_EPSG.search(wkt[-512:])
    return None if found is None else _epsg(found.group(1))


def _numbers(value: object, count: int) -> tuple[float, ...] | None:
    """``count`` finite numbers from a list, or from a string of them separated by
    spaces or commas (GDAL's GeoTransform attribute)."""
    if isinstance(value, str) and len(value) <= 1024:
        value = [v for v in re.split(r"[\s,]+", value.strip()) if v]
        try:
            value = [float(v) for v in value]
        except ValueError:
            return None
    if not isinstance(value, list) or len(value) != count:
        return None
    numbers = tuple(_number(v) for v in value)
    return None if any(n is None for n in numbers) else numbers  # type: ignore[return-value]


# -- known CRSs ----------------------------------------------------------------------

_WGS84 = (
    'GEOGCS["WGS 84",DATUM["WGS_1984",SPHEROID["WGS 84",6378137,298.257223563,'
    'AUTHORITY["EPSG","7030"]],AUTHORITY["EPSG","6326"]],'
    'PRIMEM["Greenwich",0,AUTHORITY["EPSG","8901"]],'
    'UNIT["degree",0.0174532925199433,AUTHORITY["EPSG","9122"]]'
)


_MERCATOR = (
    'PROJCS["WGS 84 / Pseudo-Mercator",' + _WGS84 + ',AUTHORITY["EPSG","4326"]],'
    'PROJECTION["Mercator_1SP"],PARAMETER["central_meridian",0],PARAMETER["scale_factor",1],'
    'PARAMETER["false_easting",0],PARAMETER["false_northing",0],'
    'UNIT["metre",1,AUTHORITY["EPSG","9001"]],AXIS["Easting",EAST],AXIS["Northing",NORTH],'
    'EXTENSION["PROJ4","+proj=merc +a=6378137 +b=6378137 +lat_ts=0 +lon_0=0 +x_0=0 +y_0=0 '
    '+k=1 +units=m +nadgrids=@null +wktext +no_defs"],AUTHORITY["EPSG","3857"]]'
)
# The outermost nodes of WKT1 (OGC 01-009), which readers of WKT1 alone accept.
_WKT1_NODES = ("PROJCS[", "GEOGCS[", "GEOCCS[", "COMPD_CS[", "VERT_CS[", "LOCAL_CS[")


def known_wkt(epsg: int) -> str | None:
    """A WKT1 for the EPSG codes known here: WGS 84 (4326), its UTM zones
    (32601-32660 north, 32701-32760 south) and Web Mercator (3857)."""
    if epsg == 4326:
        return _WGS84 + ',AUTHORITY["EPSG","4326"]]'
    if epsg == 3857:
        return _MERCATOR
    zone, south = epsg % 100, epsg // 100 == 327
    if epsg // 100 not in (326, 327) or not 1 <= zone <= 60:
        return None
    hemisphere = "S" if south else "N"
    return (
        f'PROJCS["WGS 84 / UTM zone {zone}{hemisphere}",{_WGS84},AUTHORITY["EPSG","4326"]],'
        'PROJECTION["Transverse_Mercator"],PARAMETER["latitude_of_origin",0],'
        f'PARAMETER["central_meridian",{6 * zone - 183}],PARAMETER["scale_factor",0.9996],'
        f'PARAMETER["false_easting",500000],PARAMETER["false_northing",{10000000 if south else 0}],'
        'UNIT["metre",1,AUTHORITY["EPSG","9001"]],AXIS["Easting",EAST],AXIS["Northing",NORTH],'
        f'AUTHORITY["EPSG","{epsg}"]]'
    )


def wkt1_of(crs: Crs | None) -> str | None:
    """The CRS as WKT1, for readers of WKT1 alone (GDAL 3.6's ENVI driver): its
    WKT if that is WKT1, else the known WKT1 of its EPSG code."""
    if crs is None:
        return None
    if crs.wkt is not None and crs.wkt.lstrip().upper().startswith(_WKT1_NODES):
        return crs.wkt
    return None if crs.epsg is None else known_wkt(crs.epsg)


def _crs(wkt: str | None, epsg: int | None) -> Crs | None:
    if wkt is not None and epsg is None:
        epsg = wkt_epsg(wkt)
    if wkt is None and epsg is not None:
        wkt = known_wkt(epsg)
    return None if wkt is None and epsg is None else Crs(wkt=wkt, epsg=epsg)


def _cf_crs(attrs: Mapping[str, Any]) -> Crs | None:
    """A CRS as CF (``crs_wkt``), GDAL and rioxarray (``spatial_ref``) write it."""
    wkt = _wkt(attrs.get("crs_wkt")) or _wkt(attrs.get("spatial_ref"))
    return _crs(wkt, _epsg(attrs.get("epsg_code")))


def _projjson_epsg(value: object) -> int | None:
    """The EPSG code of a PROJJSON whose ``id`` is one (nothing else is read)."""
    ident = value.get("id") if isinstance(value, dict) else None
    if isinstance(ident, dict) and ident.get("authority") == "EPSG":
        return _epsg(ident.get("code"))
    return None


def _proj_crs(attrs: Mapping[str, Any]) -> Crs | None:
    """A CRS as the zarr-conventions ``proj:`` attributes give it."""
    code = _epsg(attrs.get("proj:code"))
    for epsg in (_epsg(attrs.get("proj:epsg")), _projjson_epsg(attrs.get("proj:projjson"))):
        code = code if code is not None else epsg
    return _crs(_wkt(attrs.get("proj:wkt2")), code)


def _affine(value: object) -> GeoTransform | None:
    """rasterio's affine (a b c d e f: x = a col + b row + c) in GDAL's order."""
    numbers = _numbers(value, 6)
    if numbers is None:
        return None
    a, b, c, d, e, f = numbers
    return (c, a, b, f, d, e)


def _geotransform(value: object) -> GeoTransform | None:
    numbers = _numbers(value, 6)
    return None if numbers is None else numbers  # type: ignore[return-value]


# -- where the array sits ------------------------------------------------------------


def _dimensions(meta: ArrayMeta) -> tuple[str | None, ...] | None:
    names = meta.dimension_names
    if names is None or len(names) != len(meta.shape):
        return None
    return tuple(clean_text(n) if n else None for n in names)


def _coordinate(around: Surroundings, name: str | None, length: int) -> ArrayMeta | None:
    """The sibling 1-D array ``name`` of ``length`` real numbers, if there is one."""
    if not name or name == around.name:
        return None
    try:
        found = around.sibling(name)
    except Exception:  # a hostile name must not break the listing
        return None
    if (
        found is None
        or found.shape != (length,)
        or found.dtype.kind not in "iuf"
        or found.dtype.fields is not None
    ):
        return None
    return found


def _grid_mapping(meta: ArrayMeta, around: Surroundings) -> ArrayMeta | None:
    text = clean_text(meta.attrs.get("grid_mapping"))
    found = _GRID_MAPPING_NAME.match(text) if text else None
    if found is None or found.group(1) == around.name:
        return None
    try:
        return around.sibling(found.group(1))
    except Exception:  # a hostile name must not break the listing
        return None


def _time_axis(
    meta: ArrayMeta, around: Surroundings, dims: Sequence[str | None]
) -> TimeAxis | None:
    for axis in range(len(meta.shape) - 2):
        coordinate = _coordinate(around, dims[axis], meta.shape[axis])
        if coordinate is None:
            continue
        units = clean_text(coordinate.attrs.get("units"))
        if units is None or _SINCE.match(units) is None:
            continue
        calendar = clean_text(coordinate.attrs.get("calendar")) or "standard"
        return TimeAxis(axis, dims[axis] or "", units, calendar.strip().lower())
    return None


def _band_axis(dims: Sequence[str | None]) -> int | None:
    for axis, name in enumerate(dims[:-2]):
        if name and name.strip().lower() in BAND_NAMES:
            return axis
    return None


# -- nodata and attributes -----------------------------------------------------------


def _nodata(value: object, dtype: np.dtype) -> float | int | None:
    """``_FillValue``/``missing_value`` as a number of ``dtype`` (NaN kept)."""
    if isinstance(value, list):
        value = value[0] if value else None
    if isinstance(value, bool) or dtype.fields is not None:
        return None
    if dtype.kind == "f":
        if isinstance(value, str):
            words = {"nan": math.nan, "infinity": math.inf, "-infinity": -math.inf}
            value = words.get(value.strip().lower())
        if not isinstance(value, int | float):
            return None
        try:
            with np.errstate(over="ignore"):
                stored = float(np.asarray(value, dtype=dtype))
        except (OverflowError, ValueError):
            return None
        # a finite value the type cannot hold is no value of it
        return None if math.isinf(stored) and math.isfinite(value) else stored
    if dtype.kind in "iu":
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int):
            return None
        info = np.iinfo(dtype)
        return value if info.min <= value <= info.max else None
    return None


def _xarray_fill(meta: ArrayMeta, attrs: Mapping[str, Any]) -> float | int | None:
    """The Zarr fill value of an array xarray wrote to Zarr v2, as xarray reads it.

    xarray's v2 writer moves ``_FillValue`` into ``.zarray``'s ``fill_value`` and its
    reader takes a non-null ``fill_value`` back as ``_FillValue``; in v3 it keeps
    ``_FillValue`` an attribute and ignores ``fill_value``. So only a v2 array with
    ``_ARRAY_DIMENSIONS`` (written by xarray, or for it) gets its fill value as
    nodata: the default fill value 0 of any other array is no nodata."""
    if meta.zarr_format != 2 or meta.fill_value is None or meta.dtype.kind not in "iuf":
        return None
    if not isinstance(attrs.get("_ARRAY_DIMENSIONS"), list) or meta.dtype.fields is not None:
        return None
    if len(meta.fill_value) != meta.dtype.itemsize:
        return None
    value = np.frombuffer(meta.fill_value, dtype=meta.dtype)[0].item()
    return _nodata(value, meta.dtype)


def _attribute(value: object) -> object | None:
    """``value`` if it is a JSON scalar or a short list of numbers or of strings."""
    if isinstance(value, str):
        # netCDF attributes keep their tabs and line breaks (a `history`); nothing else
        # unprintable
        return value if len(value) <= MAX_TEXT and not _UNPRINTABLE.search(value) else None
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if -(1 << 63) <= value < 1 << 64 else None
    if isinstance(value, float):
        return value
    if isinstance(value, list) and 0 < len(value) <= MAX_LIST:
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
            return value if all(_attribute(v) is not None for v in value) else None
        if all(isinstance(v, str) for v in value):
            return value if all(_attribute(v) is not None for v in value) else None
    return None


def _attributes(attrs: Mapping[str, Any]) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for name, value in attrs.items():
        if len(kept) >= MAX_ATTRIBUTES:
            break
        if clean_text(name) is None or not name or name == "_ARRAY_DIMENSIONS":
            continue
        checked = _attribute(value)
        if checked is not None:
            kept[name] = checked
    return kept


def carried_attributes(meta: ArrayMeta) -> dict[str, Any]:
    """The attributes of ``meta`` that files for other tools pass through (bounded,
    printable, JSON scalars and lists): ``Conventions.attributes``, without working
    out the rest of the facts."""
    try:
        return _attributes(meta.attrs if isinstance(meta.attrs, Mapping) else {})
    except Exception:  # hostile attributes of a shape not foreseen: none
        return {}


# -- the facts -----------------------------------------------------------------------

_CF_WORDS = ("grid_mapping", "_FillValue", "missing_value", "scale_factor", "add_offset")
_CF_WORDS += ("units", "long_name", "standard_name", "_ARRAY_DIMENSIONS")


# Every attribute ``_read_cf`` reads, of the array and of its group. An array that
# names no dimensions, and where neither holds any of them, follows no convention
# read here (most arrays of a large listing): its facts are its attributes alone.
_ARRAY_WORDS = frozenset(
    {"grid_mapping", "crs_wkt", "spatial_ref", "epsg_code", "Conventions", *_CF_WORDS}
    | {"proj:code", "proj:epsg", "proj:projjson", "proj:wkt2", "spatial:transform"}
)
_GROUP_WORDS = frozenset(
    {"Conventions", "proj:code", "proj:epsg", "proj:projjson", "proj:wkt2", "spatial:transform"}
)


def read_cf(meta: ArrayMeta, around: Surroundings) -> Conventions:
    """The CF/geo facts of ``meta``."""
    try:
        if plain(meta, around):
            return Conventions(attributes=_attributes(meta.attrs))
        return _read_cf(meta, around)
    except Exception:  # hostile attributes of a shape not foreseen: no facts, no error
        return Conventions()


def plain(meta: ArrayMeta, around: Surroundings) -> bool:
    """Whether ``meta`` follows none of the conventions read here, seen from the
    names of its attributes and its group's alone (``_read_cf`` would find nothing
    but the attributes)."""
    attrs, group = meta.attrs, around.group_attrs
    return (
        type(attrs) is dict
        and type(group) is dict
        and meta.dimension_names is None
        and attrs.keys().isdisjoint(_ARRAY_WORDS)
        and group.keys().isdisjoint(_GROUP_WORDS)
    )


def _read_cf(meta: ArrayMeta, around: Surroundings) -> Conventions:
    attrs = meta.attrs if isinstance(meta.attrs, Mapping) else {}
    group = around.group_attrs if isinstance(around.group_attrs, Mapping) else {}
    found: list[str] = []
    mapping = _grid_mapping(meta, around)
    mapping_attrs = mapping.attrs if mapping is not None else {}

    crs = _cf_crs(mapping_attrs) or _cf_crs(attrs)
    if crs is None:
        crs = _proj_crs(attrs) or _proj_crs(group)
        if crs is not None:
            found.append("proj:")
    geotransform = _geotransform(mapping_attrs.get("GeoTransform"))
    if geotransform is not None:
        found.append("GeoTransform")
    else:
        geotransform = _affine(attrs.get("spatial:transform")) or _affine(
            group.get("spatial:transform")
        )
        if geotransform is not None:
            found.append("spatial:")

    dims = _dimensions(meta)
    x_name = y_name = None
    time = band_axis = None
    if dims is not None and len(dims) >= 2:
        if geotransform is None:
            y = _coordinate(around, dims[-2], meta.shape[-2])
            x = _coordinate(around, dims[-1], meta.shape[-1])
            if x is not None and y is not None and dims[-1] != dims[-2]:
                x_name, y_name = dims[-1], dims[-2]
        time = _time_axis(meta, around, dims)
        band_axis = time.axis if time is not None else _band_axis(dims)

    nodata = _nodata(attrs.get("_FillValue"), meta.dtype)
    if nodata is None:
        nodata = _nodata(attrs.get("missing_value"), meta.dtype)
    if nodata is None and "_FillValue" not in attrs and "missing_value" not in attrs:
        nodata = _xarray_fill(meta, attrs)
    long_name = clean_text(attrs.get("long_name")) or clean_text(attrs.get("standard_name"))

    conventions = clean_text(group.get("Conventions")) or clean_text(attrs.get("Conventions"))
    if conventions is not None:
        found.insert(0, conventions.strip())
    elif mapping is not None or time is not None or any(w in attrs for w in _CF_WORDS):
        found.insert(0, "CF")
    return Conventions(
        crs=crs,
        geotransform=geotransform,
        x_coordinate=x_name,
        y_coordinate=y_name,
        nodata=nodata,
        scale_factor=_number(attrs.get("scale_factor")),
        add_offset=_number(attrs.get("add_offset")),
        units=clean_text(attrs.get("units")),
        long_name=long_name,
        band_axis=band_axis,
        time=time,
        found=tuple(found),
        attributes=_attributes(attrs),
    )


# -- time labels ---------------------------------------------------------------------


def time_labels(values: np.ndarray, time: TimeAxis) -> list[str] | None:
    """The dates of time coordinate ``values`` as "YYYY-MM-DDThh:mm:ss" (each
    TIME_LABEL_WIDTH wide; "NaT" padded for a value that is not finite); None when
    there are more than MAX_BANDS, or the units, calendar or a date cannot be decoded
    or written at that width."""
    import cftime  # the view reads a time axis only when a header asks for it

    if values.ndim != 1 or len(values) > MAX_BANDS or values.dtype.kind not in "iuf":
        return None
    numbers = values.astype(np.float64)
    finite = np.isfinite(numbers)
    try:
        dates = cftime.num2date(
            numbers[finite], time.units, calendar=time.calendar, only_use_cftime_datetimes=True
        )
    except Exception:  # cftime's errors for units, calendars and values vary by version
        return None
    labels = []
    decoded = iter(np.atleast_1d(dates))
    for ok in finite:
        if not ok:
            labels.append("NaT".ljust(TIME_LABEL_WIDTH))
            continue
        date = next(decoded)
        if not 0 <= date.year <= 9999:
            return None
        labels.append(
            f"{date.year:04d}-{date.month:02d}-{date.day:02d}"
            f"T{date.hour:02d}:{date.minute:02d}:{date.second:02d}"
        )
    return labels
