"""netCDF classic files made from Zarr metadata (pure): ``encoding`` writes the
header of the format, ``group`` lays a group's arrays out as its variables."""

from zarrfs.formats.netcdf.group import (
    GroupFile,
    Member,
    Placed,
    carried_attributes,
    group_file,
    has_netcdf_type,
    netcdf_type,
)

__all__ = [
    "GroupFile",
    "Member",
    "Placed",
    "carried_attributes",
    "group_file",
    "has_netcdf_type",
    "netcdf_type",
]
