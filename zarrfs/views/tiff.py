"""``array.tif``: an uncompressed TIFF whose strips are the bytes of ``array.raw``.

The header (formats/tiff) is made from the live shape, so its size follows a
resize; the data part is read through the array's state as ``array.raw`` is
(counted as bytes read, read ahead when streamed). Like the sidecar headers the
file is ``volatile``: handles use direct I/O and a resize invalidates its
attributes, so neither a size nor a page from before a write is served. It is
read-only.

Where the position comes from coordinate values (sibling 1-D arrays, found when
the directory is listed), they are read when IFD 0 is, through their own array
states and within MAP_INFO_SECONDS, as the ENVI header's map info is
(views/sidecars.py); the tags holding the position have a size fixed by metadata,
so ``stat`` reads no chunk. The dates of the bands of a CF time axis are read then
too, within the same time, from the time coordinate's own array state.

Every fact comes from the array's conventions (formats/conventions), settled when
the directory is listed: the CRS, nodata, scale and offset, units, the band axis
(a 3-D array whose axis 0 is a time, band or channel axis is one image of that
many bands, PlanarConfiguration 2; any other array is a stack of pages).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import trio

from zarrfs.core.arrays import ArrayState
from zarrfs.core.read.reading import Buffer
from zarrfs.core.write.writeback import WriteBack
from zarrfs.formats.conventions import Conventions, GeoTransform
from zarrfs.formats.conventions.cf import TIME_LABEL_WIDTH
from zarrfs.formats.sidecars import MAP_INFO_SECONDS
from zarrfs.formats.tiff import TiffLayout, geo_tags, header_bytes, tiff_layout, tiff_sample
from zarrfs.formats.tiff.geo import GeoTags, geotransform_of
from zarrfs.formats.tiff.layout import NO_GEO
from zarrfs.views.base import ArrayView
from zarrfs.views.sidecars import Coordinates, coordinate_values, find_time, read_dates

log = logging.getLogger(__name__)

TIFF_NAME = "array.tif"


@dataclass(frozen=True)
class ReadFacts:
    """What IFD 0's last read from the start found, for the shape it was read at:
    the geotransform of the coordinates, the dates of the bands."""

    shape: tuple[int, ...]
    geotransform: GeoTransform | None = None
    dates: list[str] | None = None


@functools.lru_cache(maxsize=256)
def _cached_layout(
    dtype: np.dtype, shape: tuple[int, ...], bands: bool, geo: GeoTags
) -> TiffLayout | str:
    return tiff_layout(dtype, shape, bands=bands, geo=geo)


def _layout_of(
    dtype: np.dtype, shape: tuple[int, ...], bands: bool, geo: GeoTags = NO_GEO
) -> TiffLayout | str:
    """``tiff_layout``, made once per dtype, shape and tags: every array of a group
    of like arrays is listed with the same size (a layout is immutable)."""
    try:
        return _cached_layout(dtype, shape, bands, geo)
    except TypeError:  # tags holding a list (a GeoKey directory): not hashable
        return tiff_layout(dtype, shape, bands=bands, geo=geo)


class TiffView(ArrayView):
    """``array.tif``: a header made per shape, then the array's bytes."""

    volatile = True  # direct I/O, attributes invalidated on a resize
    reads_counted = True

    def __init__(
        self,
        state: ArrayState,
        writeback: WriteBack | None,
        conventions: Conventions,
        coordinates: Coordinates | None,
        time: ArrayState | None = None,
    ) -> None:
        super().__init__(state, writeback)
        self.conventions = conventions
        self.coordinates = coordinates
        self.time = time  # the values of the time axis, the bands' dates
        self._layout: tuple[tuple[int, ...], TiffLayout | None] | None = None
        self._logged: str | None = None
        self._found: ReadFacts | None = None

    @property
    def bands(self) -> bool:
        return self.conventions.band_axis == 0 and len(self.state.meta.shape) == 3

    @property
    def dated(self) -> bool:
        """Whether the bands are the steps of a time axis whose dates are read."""
        time = self.conventions.time
        return self.bands and self.time is not None and time is not None and time.axis == 0

    def layout(self) -> TiffLayout | None:
        """The layout for the current shape; None where it has none (an axis of
        length 0, a header over the bound), the reason logged once."""
        meta = self.state.meta
        if self._layout is None or self._layout[0] != meta.shape:
            bands = self.bands
            geo = geo_tags(
                self.conventions,
                bands=meta.shape[0] if bands else 1,
                coordinates=self.coordinates is not None,
                description_width=TIME_LABEL_WIDTH if self.dated else 0,
            )
            found = _layout_of(meta.dtype, meta.shape, bands, geo)
            if isinstance(found, str):
                if found != self._logged:
                    log.info("%s of %s is empty: %s", TIFF_NAME, meta.display_name, found)
                    self._logged = found
                found = None
            self._layout = (meta.shape, found)
        return self._layout[1]

    @property
    def size(self) -> int:
        layout = self.layout()
        return 0 if layout is None else layout.file_size

    def _waits(self, layout: TiffLayout) -> bool:
        """Whether IFD 0 holds values read from other arrays."""
        return layout.geo.from_coordinates or layout.geo.described is not None

    async def _read_facts(self, layout: TiffLayout, offset: int) -> ReadFacts:
        """The coordinates' geotransform and the bands' dates, read again at a read
        from 0, within MAP_INFO_SECONDS."""
        shape = self.state.meta.shape
        known = self._found
        if known is not None and known.shape == shape and offset > 0:
            return known
        geotransform = dates = None
        with trio.move_on_after(MAP_INFO_SECONDS) as scope:
            if layout.geo.described is not None and self.time is not None:
                dates = await read_dates(self.time, self.conventions, shape, TIFF_NAME)
            if self.coordinates is not None and layout.geo.from_coordinates:
                y = await coordinate_values(self.coordinates.y, shape[-2], TIFF_NAME)
                x = await coordinate_values(self.coordinates.x, shape[-1], TIFF_NAME)
                if y is not None and x is not None:
                    geotransform = geotransform_of(y, x)
        if scope.cancelled_caught:
            log.warning(
                "%s of %s: no position or dates: its coordinates were not read within %g s",
                TIFF_NAME,
                self.state.meta.display_name,
                MAP_INFO_SECONDS,
            )
        self._found = ReadFacts(shape, geotransform, dates)
        return self._found

    async def read(self, offset: int, size: int) -> Buffer:
        layout = self.layout()
        if layout is None:
            return b""
        if offset < layout.ifd_offset(1) and self._waits(layout):
            found = await self._read_facts(layout, offset)
            layout = self.layout()  # the shape may have changed meanwhile
            if layout is None:
                return b""
        else:
            found = self._found or ReadFacts(())
        start = layout.data_offset
        end = min(offset + size, layout.file_size)
        if offset >= end:
            return b""
        head = header_bytes(layout, offset, end - offset, found.geotransform, found.dates)
        if end <= start:
            return head
        tail = await self.state.read(max(offset - start, 0), end - max(offset, start))
        if self.layout() is not layout:
            # Resized while the data was read: answer what this layout holds, no more.
            tail = tail[: max(0, layout.file_size - max(offset, start))]
        return head + tail if head else tail

    def prefetch(self, offset: int) -> None:
        layout = self.layout()
        if layout is not None:
            self.state.prefetch(max(offset - layout.data_offset, 0))


def tiff_view(
    state: ArrayState,
    writeback: WriteBack | None,
    conventions: Callable[[], Conventions],
    coordinates: Callable[[tuple[str, str] | None], Coordinates | None],
    sibling: Callable[[str], ArrayState | None] | None = None,
) -> TiffView | None:
    """``array.tif`` of the array, where TIFF can hold its dtype and it has 2
    dimensions or more; None elsewhere. ``conventions`` gives what its attributes
    say, ``coordinates`` the sibling arrays holding its y and x coordinates (named
    by the conventions, else by its dimension names), ``sibling`` the arrays
    beside it by name (for the dates of a time axis)."""
    meta = state.meta
    if tiff_sample(meta.dtype) is None or len(meta.shape) < 2:
        return None
    found = conventions()
    names = None
    if found.y_coordinate and found.x_coordinate:
        names = (found.y_coordinate, found.x_coordinate)
    time = find_time(found, sibling) if sibling is not None else None
    view = TiffView(state, writeback, found, coordinates(names), time)
    reason = tiff_reason(meta.dtype, meta.shape, view.bands)
    if reason is not None:
        log.info("%s: no %s: %s", meta.display_name, TIFF_NAME, reason)
        return None
    return view


def tiff_reason(dtype: np.dtype, shape: tuple[int, ...], bands: bool = False) -> str | None:
    """Why an array of ``dtype`` and ``shape`` has no ``array.tif``, if it has none
    (an axis of length 0 gives an empty file, not none: the array may grow)."""
    if tiff_sample(dtype) is None:
        return f"TIFF has no sample type for {dtype.str}"
    if len(shape) < 2:
        return "fewer than 2 dimensions"
    if 0 in shape:
        return None
    layout = _layout_of(dtype, shape, bands)
    return layout if isinstance(layout, str) else None
