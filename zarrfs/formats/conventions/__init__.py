"""The meaning an array's attributes carry, from the conventions it follows (pure).

Legacy formats have places for facts that Zarr keeps in attributes: a CRS, a
nodata value, a scale and offset, band names, pixel spacing and axis units. This
package is the one place that reads them, from metadata alone (the array's, its
siblings' and its group's attributes); every view (ENVI and NRRD headers, the
TIFF view, the netCDF view, ``info``) takes its facts from ``conventions_of``.

- ``cf``: CF and xarray (``grid_mapping`` and ``spatial_ref``, ``_FillValue`` and
  ``missing_value``, ``scale_factor``/``add_offset``, ``units``, time axes),
  GDAL's ``GeoTransform`` attribute and the zarr-conventions ``proj:``/``spatial:``
  attributes;
- ``ome``: OME-Zarr 0.4 (Zarr v2) and 0.5 (Zarr v3) ``multiscales``.

Attributes are hostile input: every text taken from them is bounded and checked
(no control characters, no braces or newlines a header could be split by), every
count bounded; what does not fit is left out, never an error.
"""

from __future__ import annotations

from dataclasses import replace

from zarrfs.formats.conventions import cf, ome
from zarrfs.formats.conventions.facts import (
    Axis,
    Conventions,
    Crs,
    GeoTransform,
    Surroundings,
    TimeAxis,
)
from zarrfs.formats.model import ArrayMeta

__all__ = [
    "Axis",
    "Conventions",
    "Crs",
    "GeoTransform",
    "Surroundings",
    "TimeAxis",
    "conventions_of",
]

NO_SURROUNDINGS = Surroundings("", lambda name: None, {})
NONE_FOUND = Conventions()


def conventions_of(meta: ArrayMeta, around: Surroundings = NO_SURROUNDINGS) -> Conventions:
    """Everything the conventions ``meta`` follows say of it."""
    found = cf.read_cf(meta, around)
    axes, version = ome.read_ome(meta, around)
    if axes is not None:
        found = replace(found, axes=axes, found=(*found.found, version))
    return found
