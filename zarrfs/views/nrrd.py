"""``array.nhdr`` and ``volumes/*.nhdr``: detached NRRD headers over ``array.raw``.

Like ``array.hdr`` (views/sidecars.py), each is made from the array state's
current metadata on every ``stat`` and read from its start, so a resize through
the mount changes text and size together, and ``stat`` reads no chunk. The OME
axes that place the samples (formats/conventions/ome.py) are settled when the
array is listed, from metadata alone, as is which volumes ``volumes/`` lists; a
volume that a shrink through the mount has left beyond the array's end reads as
an empty file until the array is listed again (after a change in the store).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from zarrfs.core.arrays import ArrayState
from zarrfs.core.write.writeback import WriteBack
from zarrfs.formats import nrrd
from zarrfs.formats.conventions import Axis
from zarrfs.formats.model import ArrayMeta
from zarrfs.formats.sidecars import MapInfo
from zarrfs.views.base import View
from zarrfs.views.sidecars import DATA_FILE, _HeaderView

log = logging.getLogger(__name__)

NHDR_NAME = "array.nhdr"
VOLUMES_DIR = nrrd.VOLUMES_DIR
VOLUME_DATA_FILE = f"../{DATA_FILE}"  # NRRD resolves it from the header's directory


class NrrdHeaderView(_HeaderView):
    """``array.nhdr``: a detached NRRD header whose data file is ``array.raw``."""

    def __init__(
        self, state: ArrayState, writeback: WriteBack | None, axes: Sequence[Axis] | None
    ) -> None:
        super().__init__(state, writeback)
        self.axes = axes

    def _header(self, meta: ArrayMeta, map_info: MapInfo | None) -> bytes:
        return nrrd.nrrd_header(
            meta.dtype,
            meta.shape,
            path=meta.path,
            dimensions=meta.dimension_names,
            data_file=DATA_FILE,
            axes=self.axes,
        )


class VolumeHeaderView(_HeaderView):
    """``volumes/<name>.nhdr``: the space axes of ``array.raw`` at one index of the
    leading (time, channel) axes."""

    def __init__(
        self,
        state: ArrayState,
        writeback: WriteBack | None,
        axes: Sequence[Axis],
        index: tuple[int, ...],
    ) -> None:
        super().__init__(state, writeback)
        self.axes = axes
        self.index = index

    def _header(self, meta: ArrayMeta, map_info: MapInfo | None) -> bytes:
        shape = meta.shape
        outer = len(self.index)
        if len(shape) != len(self.axes) or any(i >= n for i, n in zip(self.index, shape[:outer])):
            return b""  # beyond the array's end since a resize
        return nrrd.volume_header(
            meta.dtype, shape, self.axes, self.index, path=meta.path, data_file=VOLUME_DATA_FILE
        )


def nrrd_views(
    state: ArrayState, writeback: WriteBack | None, axes: Sequence[Axis] | None
) -> dict[str, View]:
    """``array.nhdr`` where NRRD has the array's dtype."""
    if nrrd.nrrd_type(state.meta.dtype) is None:
        return {}
    return {NHDR_NAME: NrrdHeaderView(state, writeback, axes)}


def volume_views(
    state: ArrayState, writeback: WriteBack | None, axes: Sequence[Axis] | None
) -> dict[str, View] | None:
    """The files of ``volumes/`` by name; None where the array has no such directory
    (no dtype of NRRD's, no leading non-space axes, or too many volumes)."""
    meta = state.meta
    if axes is None or nrrd.nrrd_type(meta.dtype) is None:
        return None
    reason = nrrd.why_no_volumes(axes, meta.shape)
    if reason is not None:
        log.info("%s: no %s/: %s", meta.display_name, VOLUMES_DIR, reason)
        return None
    volumes = nrrd.volumes_of(axes, meta.shape)
    if volumes is None:
        return None
    return {v.name: VolumeHeaderView(state, writeback, axes, v.index) for v in volumes}
