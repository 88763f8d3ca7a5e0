"""GeoTIFF and GDAL tags from an array's conventions (pure).

What GDAL 3.6 reads (gdalinfo shows it):

- where the array lies: ModelPixelScale + ModelTiepoint for a north-up grid (x
  increasing, y decreasing down the rows), ModelTransformation otherwise (south
  up, x decreasing, rotated); the tiepoint is the outer corner of the first pixel
  (GTRasterType PixelIsArea), GDAL's geotransform as it is;
- the CRS: an EPSG code as ProjectedCSType or GeographicType (which of the two:
  the WKT's first keyword where there is one, else EPSG's numbering, geographic
  2-D systems being codes 4000-4999); a CRS known only by its WKT (WKT 1 or 2) as
  PCSCitation "ESRI PE String = <WKT>" with a user-defined model type, which GDAL
  reads with its WKT parser (gt_wkt_srs.cpp, for WKT of at most MAX_WKT
  characters: longer ones are left out);
- GDAL_NODATA (tag 42113) and GDAL_METADATA (tag 42112: scale, offset, unit and
  description of each band, XML-escaped; "&" becomes "+", as GDAL 3.6 ends a
  value at an escaped "&").

Every size is fixed from metadata alone: a geotransform that comes from coordinate
values, read when the header is, has room reserved for the larger of its two
forms (layout.py pads the first IFD to it).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

import numpy as np

from zarrfs.formats.conventions import Conventions, Crs, GeoTransform
from zarrfs.formats.sidecars import regular_axis

# TIFF field types.
BYTE, ASCII, SHORT, LONG, DOUBLE, LONG8 = 1, 2, 3, 4, 12, 16
TYPE_SIZES = {BYTE: 1, ASCII: 1, SHORT: 2, LONG: 4, DOUBLE: 8, LONG8: 8}

MODEL_PIXEL_SCALE = 33550
MODEL_TIEPOINT = 33922
MODEL_TRANSFORMATION = 34264
GEO_KEY_DIRECTORY = 34735
GEO_ASCII_PARAMS = 34737
GDAL_METADATA = 42112
GDAL_NODATA = 42113

GT_MODEL_TYPE, GT_RASTER_TYPE = 1024, 1025
GEOGRAPHIC_TYPE, PROJECTED_CS_TYPE, PCS_CITATION = 2048, 3072, 3073
MODEL_PROJECTED, MODEL_GEOGRAPHIC = 1, 2
RASTER_PIXEL_IS_AREA = 1
USER_DEFINED = 32767
ESRI_PE = "ESRI PE String = "

# GDAL reads a PE string into a buffer of 2400 bytes: a longer WKT is left out.
MAX_WKT = 2400 - len(ESRI_PE) - 2

# GDAL_METADATA names each band's items: past this many bands it is left out (the
# first IFD, made again at each read of the file's start, stays small).
MAX_METADATA_BANDS = 256

# (tag, type, count, values): one IFD entry, values packed by the IFD writer.
Entry = tuple[int, int, int, Sequence[float] | bytes]

# Stand-ins of each form of a geotransform, for the sizes of the entries.
NORTH_UP: GeoTransform = (0.0, 1.0, 0.0, 0.0, 0.0, -1.0)
TURNED: GeoTransform = (0.0, 1.0, 0.0, 0.0, 0.0, 1.0)


@dataclass(frozen=True)
class GeoTags:
    """The geo tags of a TIFF, settled from metadata: the entries whose values are
    known, and whether a geotransform is to come from coordinates when read."""

    fixed: tuple[Entry, ...] = ()
    geotransform: GeoTransform | None = None  # known outright
    from_coordinates: bool = False  # else from the coordinates' values, when read

    def entries(self, geotransform: GeoTransform | None) -> list[Entry]:
        """Every geo entry, for the geotransform the coordinates gave (or None;
        ignored unless the tags wait for one)."""
        found = geotransform if self.from_coordinates else self.geotransform
        return [*self.fixed, *transform_entries(found)]

    def variants(self) -> list[list[Entry]]:
        """The entries in each form they may take, for the space to reserve."""
        if self.from_coordinates:
            return [self.entries(None), self.entries(NORTH_UP), self.entries(TURNED)]
        return [self.entries(None)]


def transform_entries(gt: GeoTransform | None) -> list[Entry]:
    if gt is None or not all(math.isfinite(v) for v in gt):
        return []
    x0, dx, rx, y0, ry, dy = gt
    if rx == 0 and ry == 0 and dx > 0 and dy < 0:
        return [
            (MODEL_PIXEL_SCALE, DOUBLE, 3, (dx, -dy, 0.0)),
            (MODEL_TIEPOINT, DOUBLE, 6, (0.0, 0.0, 0.0, x0, y0, 0.0)),
        ]
    matrix = (dx, rx, 0.0, x0, ry, dy, 0.0, y0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0)
    return [(MODEL_TRANSFORMATION, DOUBLE, 16, matrix)]


def geotransform_of(y: np.ndarray, x: np.ndarray) -> GeoTransform | None:
    """GDAL's geotransform of an array whose last two axes have the cell-centre
    coordinates ``y`` and ``x`` (the corner half a step before the first centre, as
    for ENVI's map info); None unless both are regular. Either may decrease."""
    ys, xs = regular_axis(y), regular_axis(x)
    if ys is None or xs is None:
        return None
    (y_first, dy), (x_first, dx) = ys, xs
    found = (x_first - dx / 2, dx, 0.0, y_first - dy / 2, 0.0, dy)
    return found if all(math.isfinite(v) for v in found) else None


def is_geographic(crs: Crs) -> bool:
    """Whether ``crs`` is a geographic (latitude/longitude) system."""
    if crs.wkt:
        head = crs.wkt.lstrip()[:16].upper()
        if head.startswith(("GEOGCS", "GEOGCRS", "GEOGRAPHICCRS")):
            return True
        if head.startswith(("PROJCS", "PROJCRS", "PROJECTEDCRS")):
            return False
    return crs.epsg is not None and 4000 <= crs.epsg < 5000


def _ascii(text: str) -> bytes:
    """``text`` as a TIFF ASCII value: 7-bit, NUL-terminated, no NUL inside."""
    return text.encode("ascii", "replace").replace(b"\0", b"?") + b"\0"


def crs_entries(crs: Crs | None) -> list[Entry]:
    """The GeoKeyDirectory (and GeoAsciiParams) of ``crs``; none without a CRS GDAL
    can read (a directory of the raster type alone reads as an engineering CRS)."""
    keys: list[tuple[int, int, int, int]] = [(GT_RASTER_TYPE, 0, 1, RASTER_PIXEL_IS_AREA)]
    ascii_params = ""
    if crs is None:
        return []
    if crs.epsg is not None and 0 < crs.epsg < USER_DEFINED:
        geographic = is_geographic(crs)
        model = MODEL_GEOGRAPHIC if geographic else MODEL_PROJECTED
        cs_key = GEOGRAPHIC_TYPE if geographic else PROJECTED_CS_TYPE
        keys += [(GT_MODEL_TYPE, 0, 1, model), (cs_key, 0, 1, crs.epsg)]
    elif crs.wkt and len(crs.wkt) <= MAX_WKT:
        ascii_params = (ESRI_PE + crs.wkt).replace("|", "?") + "|"
        keys.append((GT_MODEL_TYPE, 0, 1, USER_DEFINED))
        keys.append((PCS_CITATION, GEO_ASCII_PARAMS, len(ascii_params), 0))
    else:
        return []
    keys.sort()
    directory = [1, 1, 0, len(keys)] + [v for key in keys for v in key]
    entries: list[Entry] = [(GEO_KEY_DIRECTORY, SHORT, len(directory), directory)]
    if ascii_params:
        value = _ascii(ascii_params)
        entries.append((GEO_ASCII_PARAMS, ASCII, len(value), value))
    return entries


def _number(value: float | int) -> str:
    if isinstance(value, float):
        return repr(value)
    return str(int(value))


def metadata_xml(conventions: Conventions, bands: int) -> str | None:
    """GDAL_METADATA's XML: each band's scale, offset, unit and description; None
    where there is none, or more than MAX_METADATA_BANDS bands."""
    items = []
    if bands > MAX_METADATA_BANDS:
        return None
    for band in range(bands):
        for role, value in (
            ("scale", conventions.scale_factor),
            ("offset", conventions.add_offset),
        ):
            if value is not None and math.isfinite(value):
                name = "scale_factor" if role == "scale" else "add_offset"
                items.append((name, band, role, _number(float(value))))
        if conventions.units:
            items.append(("units", band, "unittype", conventions.units))
        if conventions.long_name and bands == 1:
            items.append(("DESCRIPTION", band, "description", conventions.long_name))
    if not items:
        return None
    # GDAL 3.6 ends a value at an escaped "&" (whichever escape): "+" stands for it.
    lines = [
        f'<Item name={quoteattr(name)} sample="{band}" role="{role}">'
        f"{escape(text.replace('&', '+'))}</Item>"
        for name, band, role, text in items
    ]
    return "<GDALMetadata>" + "".join(lines) + "</GDALMetadata>"


def geo_tags(conventions: Conventions, *, bands: int = 1, coordinates: bool = False) -> GeoTags:
    """The geo tags of an image of ``bands`` bands following ``conventions``;
    ``coordinates``: its geotransform is to come from the values of the coordinates
    ``conventions`` names (the view found them among the array's siblings)."""
    known = conventions.geotransform
    from_coordinates = coordinates and known is None
    fixed = crs_entries(conventions.crs)
    xml = metadata_xml(conventions, bands)
    if xml is not None:
        value = xml.encode("ascii", "xmlcharrefreplace") + b"\0"
        fixed.append((GDAL_METADATA, ASCII, len(value), value))
    nodata = conventions.nodata
    if nodata is not None and not isinstance(nodata, bool):
        value = _ascii(_number(nodata))
        fixed.append((GDAL_NODATA, ASCII, len(value), value))
    return GeoTags(tuple(fixed), known, from_coordinates)


def pack_values(type_: int, values: Sequence[float] | bytes, order: str) -> bytes:
    """An entry's values in the file's byte order (``<`` or ``>``)."""
    if isinstance(values, bytes):
        return values
    code = {BYTE: "B", SHORT: "H", LONG: "I", DOUBLE: "d", LONG8: "Q"}[type_]
    return struct.pack(f"{order}{len(values)}{code}", *values)
