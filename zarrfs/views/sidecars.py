"""``array.hdr`` (ENVI) and ``array.nhdr`` (detached NRRD): headers for legacy tools.

Both are made from the array state's current metadata on every ``stat`` and read,
so a resize through the mount changes their text and size together; ``stat`` reads
no chunk. Like ``info`` they are ``volatile``: handles use direct I/O, and a resize
invalidates their attributes (fuse/operations.py), so neither a size nor a page
from before a resize is served.

``map info`` needs the values of the coordinate arrays (xarray's: sibling 1-D
arrays named by the last two dimension names). Which arrays those are is settled
when the directory is listed, from metadata alone; their values are read on each
read of the header from its start, through their own array state, so writes
through the mount count. What that read may cost is bounded from metadata
(formats/sidecars.coordinate_cost: elements, chunks, decoded bytes) and in time
(MAP_INFO_SECONDS): coordinates over the bounds at listing give a header without a
map info line; over them at a read (grown since, or slow) the line reserved for map
info is the comment of the same width. The map info line has a fixed width
(formats/sidecars.py), so the size never waits for those values.

What the conventions say (formats/conventions, settled at listing like the
coordinates) adds the CRS, nodata, scale and offset and band names; a geotransform
given by attributes makes the map info without reading any coordinate. The dates of
a CF time axis are read like the coordinates, on each read from the start, within
the same time; band names have one width whether they could be read or not.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import trio

from zarrfs.core.arrays import ArrayState
from zarrfs.core.write.writeback import WriteBack
from zarrfs.errors import ZarrfsError
from zarrfs.formats import sidecars
from zarrfs.formats.conventions import Conventions
from zarrfs.formats.conventions.cf import MAX_BANDS, time_labels, wkt1_of
from zarrfs.formats.model import ArrayMeta
from zarrfs.formats.sidecars import MAP_INFO_SECONDS, MapInfo
from zarrfs.views.base import ArrayView, View

log = logging.getLogger(__name__)

HDR_NAME = "array.hdr"  # GDAL looks for array.raw.hdr, then array.hdr: never name both
DATA_FILE = "array.raw"


@dataclass(frozen=True)
class Coordinates:
    """The 1-D arrays holding the y (second-to-last) and x (last) coordinates."""

    y: ArrayState
    x: ArrayState
    units: str | None  # ENVI's name of their common unit


def _too_costly(meta: ArrayMeta) -> str | None:
    """Why reading the coordinate ``meta`` for a header would cost too much, if it would."""
    shards = None if meta.shards is None else meta.shards.shard_shape
    return sidecars.coordinate_cost(meta.shape, meta.chunks, meta.itemsize, shards)


def _coordinate_ok(meta: ArrayMeta, name: str, length: int) -> bool:
    if not (
        len(meta.shape) == 1
        and meta.shape[0] == length
        and length >= 2
        and meta.dtype.kind in "iuf"
        and meta.dtype.fields is None
        and meta.dimension_names in (None, (name,))
    ):
        return False
    cost = _too_costly(meta)
    if cost is not None:
        log.info("%s: no map info from %s: %s", HDR_NAME, meta.display_name, cost)
    return cost is None


def find_coordinates(
    meta: ArrayMeta,
    sibling: Callable[[str], ArrayState | None],
    names: tuple[str, str] | None = None,
) -> Coordinates | None:
    """The coordinates of ``meta``'s last two axes among its siblings (``sibling``
    finds one by name): arrays named as those axes (or ``names``: y, x), 1-D, as
    long as them, of real numbers."""
    if names is None:
        dimensions = meta.dimension_names
        if dimensions is None or len(dimensions) < 2 or len(meta.shape) != len(dimensions):
            return None
        names = (dimensions[-2] or "", dimensions[-1] or "")
    if len(meta.shape) < 2:
        return None
    y_name, x_name = names
    if not y_name or not x_name or y_name == x_name:
        return None
    y, x = sibling(y_name), sibling(x_name)
    if y is None or x is None:
        return None
    if not (
        _coordinate_ok(y.meta, y_name, meta.shape[-2])
        and _coordinate_ok(x.meta, x_name, meta.shape[-1])
    ):
        return None
    units = sidecars.coordinate_units(y.meta.attrs.get("units"), x.meta.attrs.get("units"))
    return Coordinates(y, x, units)


async def coordinate_values(
    state: ArrayState, length: int, file: str = HDR_NAME
) -> np.ndarray | None:
    """The coordinate's values, if it still has ``length`` of them (``file``: the
    header they are for, in the log)."""
    meta = state.meta
    if meta.shape != (length,) or _too_costly(meta) is not None:
        return None  # (grown since the listing)
    try:
        data = await state.read(0, meta.nbytes)
    except ZarrfsError as e:
        # The header is still served, without map info; a chunk failure is logged
        # once, as for any reader (a remembered one comes back marked as logged).
        level = logging.DEBUG if getattr(e, "logged", False) else logging.WARNING
        log.log(level, "%s: no map info from %s: %s", file, meta.display_name, e)
        return None
    if len(data) != meta.nbytes:
        return None
    return np.frombuffer(data, dtype=meta.dtype, count=length)


class _HeaderView(ArrayView):
    """A header made from the live shape: exact size, made again on each read from 0."""

    volatile = True  # direct I/O, attributes invalidated on a resize

    def __init__(self, state: ArrayState, writeback: WriteBack | None) -> None:
        super().__init__(state, writeback)
        self._text = b""
        self._sized: tuple[tuple[int, ...], int] | None = None  # (shape, size)

    @abstractmethod
    def _header(self, meta: ArrayMeta, map_info: MapInfo | None) -> bytes:
        """The header for ``meta``; its length does not depend on ``map_info``."""

    async def _map_info(self, meta: ArrayMeta) -> MapInfo | None:
        return None

    @property
    def size(self) -> int:
        # stat is frequent (ls -l, every lookup): made once per shape
        meta = self.state.meta
        if self._sized is None or self._sized[0] != meta.shape:
            self._sized = (meta.shape, len(self._header(meta, None)))
        return self._sized[1]

    async def read(self, offset: int, size: int) -> bytes:
        if offset == 0 or len(self._text) != self.size:
            map_info = await self._map_info(self.state.meta)
            # The shape may have changed meanwhile: the text follows the current one
            # (the map info line has the same width whatever it holds).
            self._text = self._header(self.state.meta, map_info)
        return self._text[offset : offset + size]


class EnviHeaderView(_HeaderView):
    """``array.hdr``: samples, lines and bands of ``array.raw``, band sequential."""

    def __init__(
        self,
        state: ArrayState,
        writeback: WriteBack | None,
        coordinates: Coordinates | None,
        conventions: Conventions | None = None,
        time: ArrayState | None = None,
    ) -> None:
        super().__init__(state, writeback)
        self.conventions = conventions or Conventions()
        # A geotransform the attributes give needs no coordinate read.
        self._given = sidecars.geotransform_map_info(self.conventions.geotransform)
        self.coordinates = None if self._given is not None else coordinates
        self.time = time  # the array of the time axis' values (formats/conventions/cf)
        self._dates: list[str] | None = None  # as the last read of the header found them

    def _header(self, meta: ArrayMeta, map_info: MapInfo | None) -> bytes:
        line = None
        if self._given is not None:
            line = sidecars.map_info_line(self._given, None)
        elif self.coordinates is not None:
            line = sidecars.map_info_line(map_info, self.coordinates.units)
        facts = self.conventions
        names = None
        if facts.band_axis is not None:
            names = sidecars.band_names(
                meta.shape,
                meta.dimension_names,
                time_axis=None if facts.time is None else facts.time.axis,
                time_labels=self._dates,
            )
        return sidecars.envi_header(
            meta.dtype,
            meta.shape,
            path=meta.path,
            dimensions=meta.dimension_names,
            map_info=line,
            crs_wkt=wkt1_of(facts.crs),
            nodata=facts.nodata,
            scale=facts.scale_factor,
            offset=facts.add_offset,
            names=names,
        )

    async def _map_info(self, meta: ArrayMeta) -> MapInfo | None:
        # The dates of the band names are read here too: the header is made next.
        self._dates = None
        y = x = None
        with trio.move_on_after(MAP_INFO_SECONDS) as scope:
            self._dates = await self._read_dates(meta)
            if self.coordinates is not None and len(meta.shape) >= 2:
                y = await coordinate_values(self.coordinates.y, meta.shape[-2])
                x = await coordinate_values(self.coordinates.x, meta.shape[-1])
        if scope.cancelled_caught:
            log.warning(
                "%s of %s: no map info or dates: its coordinates were not read within %g s",
                HDR_NAME,
                meta.display_name,
                MAP_INFO_SECONDS,
            )
        if y is None or x is None:
            return None
        return sidecars.map_info_of(y, x)

    async def _read_dates(self, meta: ArrayMeta) -> list[str] | None:
        time = self.conventions.time
        if self.time is None or time is None or time.axis >= len(meta.shape):
            return None
        values = await coordinate_values(self.time, meta.shape[time.axis])
        if values is None:
            return None
        # In a worker: 4096 dates take cftime about 12 ms, too long for the trio thread.
        return await trio.to_thread.run_sync(time_labels, values, time)


def find_time(
    conventions: Conventions, sibling: Callable[[str], ArrayState | None]
) -> ArrayState | None:
    """The array holding the values of the CF time axis, if reading them for band
    names costs little (at most MAX_BANDS values, bounded chunks)."""
    time = conventions.time
    found = sibling(time.coordinate) if time is not None else None
    if found is None or len(found.meta.shape) != 1 or found.meta.shape[0] > MAX_BANDS:
        return None
    cost = _too_costly(found.meta)
    if cost is not None:
        log.info("%s: no band dates from %s: %s", HDR_NAME, found.meta.display_name, cost)
        return None
    return found


def sidecar_views(
    state: ArrayState,
    coordinates: Callable[[], Coordinates | None],
    writeback: WriteBack | None,
    conventions: Callable[[], Conventions] | None = None,
    sibling: Callable[[str], ArrayState | None] | None = None,
) -> dict[str, View]:
    """The headers the array's dtype allows, by file name; ``coordinates`` gives
    those of its map info (``find_coordinates``), ``conventions`` what its
    attributes mean and ``sibling`` the arrays beside it by name (for the values of
    a time axis), asked only for an ENVI header."""
    views: dict[str, View] = {}
    dtype = state.meta.dtype
    if sidecars.envi_data_type(dtype) is not None:
        facts = conventions() if conventions is not None else Conventions()
        time = find_time(facts, sibling) if sibling is not None else None
        views[HDR_NAME] = EnviHeaderView(state, writeback, coordinates(), facts, time)
    return views
