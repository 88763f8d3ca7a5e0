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
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

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
from zarrfs.stores.base import Store
from zarrfs.views.base import View
from zarrfs.views.xattrs import MAX_JSON_TEXT, fill_text, json_text

INFO_NAME = "info"


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


def _convention_rows(meta: ArrayMeta, found: Conventions | None) -> list[tuple[str, str]]:
    if found is None or found.axes is None:
        return []
    rows = [("Axes (OME)", axes_text(found.axes))]
    volumes = nrrd.volumes_text(found.axes, meta.shape)
    return rows if volumes is None else [*rows, ("NRRD volumes", volumes)]


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
        *_convention_rows(meta, conventions),
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
        conventions: Conventions | None = None,
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

    def _render(self, meta: ArrayMeta, documents: int, dirty: int) -> bytes:
        """Worker thread: list the array's keys and summarise them."""
        prefix = meta.path
        keys = ((f"{prefix}/{k}" if prefix else k, n) for k, n in self._store.scan(prefix))
        stored = summarise(meta, keys, documents)
        return info_text(meta, stored, dirty, self._conventions).encode()

    async def read(self, offset: int, size: int) -> Buffer:
        if offset == 0 or not self._text:
            documents = sum(len(d) for d in self._documents.values())
            dirty = len(self._array.dirty) if self._array is not None else 0
            self._text = await trio.to_thread.run_sync(self._render, self.meta, documents, dirty)
        return self._text[offset : offset + size]
