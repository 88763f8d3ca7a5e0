"""The facts conventions give, and where an array sits (pure data)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from zarrfs.formats.model import ArrayMeta


@dataclass(frozen=True)
class Crs:
    """A coordinate reference system: its WKT (1 or 2), its EPSG code, or both."""

    wkt: str | None = None
    epsg: int | None = None


@dataclass(frozen=True)
class Axis:
    """One dimension of an image as OME-Zarr ``multiscales`` describe it, at this
    array's level: ``scale`` and ``translation`` are the level's, in ``unit``."""

    name: str
    type: str | None = None  # "space", "time", "channel", or a word of the writer's
    unit: str | None = None
    scale: float = 1.0
    translation: float = 0.0


@dataclass(frozen=True)
class TimeAxis:
    """A CF time coordinate of dimension ``axis``, held by the sibling array
    ``coordinate``; its values are decoded with ``cf.time_labels``."""

    axis: int
    coordinate: str
    units: str  # "days since 2000-01-01"
    calendar: str = "standard"


GeoTransform = tuple[float, float, float, float, float, float]


@dataclass(frozen=True)
class Conventions:
    """What an array's attributes say beyond its bytes; None where nothing does."""

    crs: Crs | None = None
    # GDAL's order (x0, dx, rx, y0, ry, dy), where the attributes give it outright
    # (GDAL's GeoTransform, spatial:transform); else the views derive it from the
    # values of ``x_coordinate``/``y_coordinate`` (sibling 1-D arrays) when read.
    geotransform: GeoTransform | None = None
    x_coordinate: str | None = None
    y_coordinate: str | None = None
    # In the stored (packed) type: _FillValue, else missing_value.
    nodata: float | int | None = None
    scale_factor: float | None = None
    add_offset: float | None = None
    units: str | None = None
    long_name: str | None = None
    # The leading dimension GIS readers should see as bands (a time, band or
    # channel axis of a 3-D array), None when there is none.
    band_axis: int | None = None
    time: TimeAxis | None = None
    # OME: one per dimension of the array, at its level.
    axes: tuple[Axis, ...] | None = None
    # The conventions found, for info: ("CF-1.8", "OME-Zarr 0.4", ...).
    found: tuple[str, ...] = ()
    # Attributes a netCDF variable carries as they are (bounded, JSON scalars and
    # lists of numbers or strings).
    attributes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Surroundings:
    """Where an array sits: conventions write facts beside it, not only in it."""

    name: str  # the array's name in its group
    sibling: Callable[[str], ArrayMeta | None]  # the array of that name beside it
    group_attrs: Mapping[str, Any]  # its group's attributes ({} at the root)
