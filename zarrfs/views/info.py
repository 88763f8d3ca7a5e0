"""``info``: a human-readable summary of one array, like zarr-python's ``Array.info``.

"Chunks initialized" and "bytes stored" need a listing of the store, which ``stat``,
``ls -l`` and directory listings must not pay for. So, like the files of /proc (and
lxcfs's), ``info`` has size 0 and its handles use direct I/O: a read from its start
lists the array's keys and makes a fresh summary, and readers read to the end of
file as they do for any file (``cat``, ``less``, ``read()`` until b""). Its lines
read naturally, with no padding.

Format-agnostic: the codecs are the document's own fields (v2: "Filters" and
"Compressor"; v3: "Codecs"), a v3 data type is shown as written with its numpy
form, and a sharded array adds its shard shape ("Chunk shape" is then the inner
chunk shape) and how many shards are stored.

Then the array's attributes, one per line as JSON, and what the conventions they
follow say (formats/conventions): the CRS, the geotransform or the coordinates,
nodata, scale and offset, units, the time and band axes, the axes of an image.
Every name and value is shown as printable text, each cut short.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import trio

from zarrfs.core.arrays import ArrayState
from zarrfs.core.read.reading import Buffer
from zarrfs.core.sizes import format_size
from zarrfs.formats import nrrd
from zarrfs.formats.conventions import Conventions
from zarrfs.formats.conventions.ome import axes_text
from zarrfs.formats.grid.layout import grid_shape
from zarrfs.formats.metadata.describe import (
    codec_fields,
    dtype_json,
    numpy_dtype,
    type_text,
    written_type,
)
from zarrfs.formats.model import ArrayMeta
from zarrfs.formats.netcdf.group import why_no_variable
from zarrfs.formats.sidecars import envi_data_type
from zarrfs.stores.base import Store
from zarrfs.views.base import View
from zarrfs.views.netcdf import NC_NAME
from zarrfs.views.nrrd import NHDR_NAME
from zarrfs.views.sidecars import HDR_NAME
from zarrfs.views.tiff import TIFF_NAME, tiff_reason
from zarrfs.views.xattrs import MAX_JSON_TEXT, fill_text, json_text

INFO_NAME = "info"
# Attributes shown one per line; the rest are counted.
MAX_ATTRIBUTE_ROWS = 64
_PLAIN = re.compile(r"[\x20-\x7e]{1,4096}")


@dataclass(frozen=True)
class Stored:
    """What the store holds of an array (from a listing)."""

    chunks: int  # distinct chunks inside the current grid (sharded: in stored shards)
    nbytes: int  # their bytes (sharded: the shards') plus the metadata documents'
    shards: int = 0  # sharded arrays: distinct shards inside the shard grid


def data_type_text(meta: ArrayMeta) -> str:
    """The numpy dtype; for a v3 array its data type as written, then the numpy form."""
    written = type_text(written_type(meta), MAX_JSON_TEXT)
    if meta.data_type_json is None:  # v2-style: the numpy dtype is what is written
        return written if meta.dtype.fields is not None else f"{written} ({meta.dtype.name})"
    dtype = numpy_dtype(meta)
    if dtype is None:
        return f"{written} (no fixed-size numpy type)"
    return f"{written} (numpy {type_text(dtype_json(dtype), MAX_JSON_TEXT)})"


def _codec_rows(meta: ArrayMeta) -> tuple[tuple[str, str], ...]:
    return tuple(
        (name[:1].upper() + name[1:], json_text(value, ascii=True))
        for name, value in codec_fields(meta)
    )


def _shard_grid(meta: ArrayMeta) -> tuple[int, ...]:
    assert meta.shards is not None
    return grid_shape(meta.shape, meta.shards.shard_shape)


def summarise(meta: ArrayMeta, keys: Iterable[tuple[str, int]], documents: int) -> Stored:
    """Count the stored values among ``keys`` (store keys with sizes) that the grid
    holds: chunks, or the shards of a sharded array (and the chunks inside them)."""
    grid = grid_shape(meta.shape, meta.chunks) if meta.shards is None else _shard_grid(meta)
    found: set[tuple[int, ...]] = set()
    nbytes = documents
    for key, size in keys:
        index = meta.stored_unit(key)
        if index is None or index in found:
            continue
        if all(i < g for i, g in zip(index, grid)):
            found.add(index)
            nbytes += size
    if meta.shards is None:
        return Stored(len(found), nbytes)
    chunks = sum(meta.shards.geometry.inner_count(shard) for shard in found)
    return Stored(chunks, nbytes, shards=len(found))


def _shown(text: str) -> str:
    """``text`` as it is if it is short printable ASCII, else as JSON (escaped, cut)."""
    return text if _PLAIN.fullmatch(text) else json_text(text, ascii=True)


def _attribute_rows(attrs: Mapping[str, Any]) -> list[tuple[str, str]]:
    if not attrs:
        return []  # the rows of zarr-python's info, as they are
    rows = [("Attributes", str(len(attrs)))]
    for index, (name, value) in enumerate(attrs.items()):
        if index == MAX_ATTRIBUTE_ROWS:
            rows.append(("  ...", f"{len(attrs) - index} more"))
            break
        rows.append((f"  {_shown(str(name))}", json_text(value, ascii=True)))
    return rows


def _crs_text(conventions: Conventions) -> str | None:
    crs = conventions.crs
    if crs is None:
        return None
    parts = [] if crs.epsg is None else [f"EPSG:{crs.epsg}"]
    named = re.match(r'\s*\w+\[\s*"([^"]{0,80})"', crs.wkt or "")
    if named is not None:
        parts.append(named.group(1))
    if crs.wkt is not None:
        parts.append(f"WKT of {len(crs.wkt)} characters")
    return _shown(", ".join(parts))


def conventions_rows(conventions: Conventions) -> list[tuple[str, str]]:
    """What the conventions say, one row per fact found."""
    c = conventions
    rows: list[tuple[str, str | None]] = [
        ("Conventions", ", ".join(c.found) if c.found else None),
        ("CRS", _crs_text(c)),
        ("Geotransform", None if c.geotransform is None else " ".join(map(repr, c.geotransform))),
    ]
    if c.x_coordinate is not None and c.y_coordinate is not None:
        rows.append(("Coordinates", f"x {c.x_coordinate}, y {c.y_coordinate}"))
    rows += [
        ("Nodata", None if c.nodata is None else repr(c.nodata)),
        ("Scale factor", None if c.scale_factor is None else repr(c.scale_factor)),
        ("Add offset", None if c.add_offset is None else repr(c.add_offset)),
        ("Units", c.units),
        ("Long name", c.long_name),
    ]
    if c.time is not None:
        time = c.time
        text = f"dimension {time.axis} ({time.coordinate}): {time.units}, {time.calendar}"
        rows.append(("Time axis", text))
    if c.band_axis is not None:
        rows.append(("Band axis", f"dimension {c.band_axis}"))
    return [(name, _shown(value)) for name, value in rows if value is not None]


def _ome_rows(meta: ArrayMeta, found: Conventions | None) -> list[tuple[str, str]]:
    if found is None or found.axes is None:
        return []
    rows = [("Axes (OME)", axes_text(found.axes))]
    volumes = nrrd.volumes_text(found.axes, meta.shape)
    return rows if volumes is None else [*rows, ("NRRD volumes", volumes)]


def view_rows(meta: ArrayMeta, conventions: Conventions | None) -> list[tuple[str, str]]:
    """The array's files for legacy tools, and why each one missing is missing."""
    if meta.unsupported is not None:
        return [("Views", f"none: {meta.unsupported}")]
    dtype = meta.dtype
    found = conventions or Conventions()
    missing: dict[str, str | None] = {
        HDR_NAME: None if envi_data_type(dtype) else f"ENVI has no data type for {dtype.str}",
        NHDR_NAME: None if nrrd.nrrd_type(dtype) else f"NRRD has no type for {dtype.str}",
        TIFF_NAME: tiff_reason(dtype, meta.shape, found.band_axis == 0 and len(meta.shape) == 3),
    }
    names = ["array.raw", "array.npy", *(name for name, why in missing.items() if why is None)]
    axes = found.axes
    outer = nrrd.volume_axes(axes) if axes is not None and len(axes) == len(meta.shape) else None
    if outer and nrrd.nrrd_type(dtype) and nrrd.why_no_volumes(axes, meta.shape) is None:
        names.append(f"{nrrd.VOLUMES_DIR}/")
    rows = [("Views", ", ".join(names))]
    rows += [(f"No {name}", why) for name, why in missing.items() if why is not None]
    # A group's file is its group's: an array whose elements or shape it cannot hold
    # is left out of it, whatever the other arrays are.
    outside = why_no_variable(meta)
    return rows if outside is None else [*rows, (f"Not in {NC_NAME}", outside)]


def info_text(
    meta: ArrayMeta, stored: Stored | None, dirty: int, conventions: Conventions | None = None
) -> str:
    """The summary (``stored`` None: nothing stored)."""
    total = meta.n_chunks
    stored = stored or Stored(0, 0)
    ratio = meta.nbytes / stored.nbytes if stored.nbytes else math.inf
    dims = meta.dimension_names
    rows = [
        ("Name", f"/{meta.path}"),
        ("Zarr format", str(meta.zarr_format)),
        ("Shape", str(tuple(meta.shape))),
    ]
    if meta.shards is not None:
        rows.append(("Shard shape", str(tuple(meta.shards.shard_shape))))
    rows += [
        ("Chunk shape", str(tuple(meta.chunks))),
        ("Data type", data_type_text(meta)),
        ("Order", meta.order),
        ("Fill value", fill_text(meta)),
        *_codec_rows(meta),
        ("Dimension names", ", ".join(str(d) for d in dims) if dims else "-"),
        ("No. bytes", f"{meta.nbytes} ({format_size(meta.nbytes, short=True)})"),
        ("No. bytes stored", f"{stored.nbytes} ({format_size(stored.nbytes, short=True)})"),
        ("Storage ratio", f"{ratio:.3g}"),
    ]
    if meta.shards is not None:
        shards = math.prod(_shard_grid(meta))
        rows.append(("Shards initialized", f"{stored.shards}/{shards}"))
    rows += [
        ("Chunks initialized", f"{stored.chunks}/{total}"),
        ("Chunks not stored", str(dirty)),
        *view_rows(meta, conventions),
        *_attribute_rows(meta.attrs),
        *conventions_rows(conventions or Conventions()),
        *_ome_rows(meta, conventions),
    ]
    return "".join(f"{name:<19}: {value}\n" for name, value in rows)


class InfoView(View):
    """The ``info`` file of an array, summarised from a listing on each read from 0."""

    volatile = True

    def __init__(
        self,
        meta: ArrayMeta,
        documents: Mapping[str, bytes],
        state: ArrayState | None,
        store: Store,
        conventions: Callable[[], Conventions] | None = None,
    ) -> None:
        self._conventions = conventions  # settled when listed, as the headers' are
        self._meta = meta
        self._documents = documents  # the node's, kept current by a resize's flush
        self._array = state
        self._store = store
        self._text = b""

    @property
    def meta(self) -> ArrayMeta:
        return self._array.meta if self._array is not None else self._meta

    @property
    def size(self) -> int:
        return 0  # as /proc's files: readers read to end of file (direct I/O)

    def _render(
        self, meta: ArrayMeta, documents: int, dirty: int, conventions: Conventions | None
    ) -> bytes:
        """Worker thread: list the array's keys and summarise them."""
        prefix = meta.path
        keys = ((f"{prefix}/{k}" if prefix else k, n) for k, n in self._store.scan(prefix))
        return info_text(meta, summarise(meta, keys, documents), dirty, conventions).encode()

    async def read(self, offset: int, size: int) -> Buffer:
        if offset == 0 or not self._text:
            documents = sum(len(d) for d in self._documents.values())
            dirty = len(self._array.dirty) if self._array is not None else 0
            # On the trio thread: the conventions look at the tree (siblings, group).
            conventions = self._conventions() if self._conventions is not None else None
            self._text = await trio.to_thread.run_sync(
                self._render, self.meta, documents, dirty, conventions
            )
        return self._text[offset : offset + size]
