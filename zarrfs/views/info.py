"""``info``: a human-readable summary of one array, like zarr-python's ``Array.info``.

Its size must be known to ``stat`` and ``ls -l`` without touching the store, yet
"chunks initialized" and "bytes stored" need a listing. So every line has a width
fixed by the metadata alone (counts are padded to the width of their maximum, byte
counts to 20 digits), and the listing happens only when the file is read from
its start. Handles use direct I/O, so each ``cat`` sees a fresh summary.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import trio

from zarrfs.core.arrays import ArrayState
from zarrfs.core.reading import Buffer
from zarrfs.formats.layout import grid_shape
from zarrfs.formats.model import ArrayMeta
from zarrfs.stores.base import Store
from zarrfs.views.base import View
from zarrfs.views.xattrs import fill_text

INFO_NAME = "info"
_BYTES_WIDTH = 20  # 2**64 has 20 digits
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


@dataclass(frozen=True)
class Stored:
    """What the store holds of an array (from a listing)."""

    chunks: int  # distinct chunks inside the current grid
    nbytes: int  # their bytes plus the metadata documents'


def human(nbytes: int) -> str:
    """Always 10 characters: "   1.5 MiB"."""
    value = float(nbytes)
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            return f"{value:6.1f} {unit:<3}"
        value /= 1024
    raise AssertionError  # unreachable


def _dtype_text(dtype: np.dtype) -> str:
    if dtype.fields is not None:
        return json.dumps(dtype.descr)
    return f"{dtype.str} ({dtype.name})"


def summarise(meta: ArrayMeta, keys: Iterable[tuple[str, int]], documents: int) -> Stored:
    """Count the chunk keys among ``keys`` (store keys with sizes) that the grid holds."""
    grid = grid_shape(meta.shape, meta.chunks)
    found: set[tuple[int, ...]] = set()
    nbytes = documents
    for key, size in keys:
        index = meta.chunk_index(key)
        if index is None or index in found:
            continue
        if all(i < g for i, g in zip(index, grid)):
            found.add(index)
            nbytes += size
    return Stored(len(found), nbytes)


def info_text(meta: ArrayMeta, stored: Stored | None, dirty: int) -> str:
    """The summary; its length depends on ``meta`` only (``stored`` None: all zero)."""
    total = meta.n_chunks
    width = len(str(total))
    stored = stored or Stored(0, 0)
    ratio = meta.nbytes / stored.nbytes if stored.nbytes else math.inf
    dims = meta.dimension_names
    rows = [
        ("Name", f"/{meta.path}"),
        ("Zarr format", str(meta.zarr_format)),
        ("Shape", str(tuple(meta.shape))),
        ("Chunk shape", str(tuple(meta.chunks))),
        ("Data type", _dtype_text(meta.dtype)),
        ("Order", meta.order),
        ("Fill value", fill_text(meta)),
        ("Filters", json.dumps(meta.codecs.filter_configs or None)),
        ("Compressor", json.dumps(meta.codecs.compressor_config)),
        ("Dimension names", ", ".join(str(d) for d in dims) if dims else "-"),
        ("No. bytes", f"{meta.nbytes} ({human(meta.nbytes).strip()})"),
        ("No. bytes stored", f"{stored.nbytes:>{_BYTES_WIDTH}} ({human(stored.nbytes)})"),
        ("Storage ratio", f"{ratio:>10.3g}"),
        ("Chunks initialized", f"{stored.chunks:>{width}}/{total}"),
        ("Chunks not stored", f"{dirty:>{width}}"),
    ]
    return "".join(f"{name:<19}: {value}\n" for name, value in rows)


_SIZES: dict[tuple[Any, ...], int] = {}


def info_size(meta: ArrayMeta) -> int:
    """``len(info_text(meta, ...))`` in bytes, shared by arrays that differ only in
    name (a hierarchy of thousands of like arrays lists fast)."""
    name = len(f"/{meta.path}".encode())
    key = (
        meta.zarr_format,
        meta.shape,
        meta.chunks,
        meta.dtype,
        meta.order,
        meta.fill_value,
        meta.codecs,  # by identity (kept alive here): one per distinct .zarray text
        meta.dimension_names,
    )
    size = _SIZES.get(key)
    if size is None:
        if len(_SIZES) >= 1024:
            _SIZES.clear()
        size = _SIZES[key] = len(info_text(meta, None, 0).encode()) - name
    return size + name


class InfoView(View):
    """The ``info`` file of an array, summarised from a listing on each read from 0."""

    volatile = True

    def __init__(
        self, meta: ArrayMeta, documents: dict[str, bytes], state: ArrayState | None, store: Store
    ) -> None:
        self._meta = meta
        self._documents = documents  # the node's, kept current by the array state
        self._array = state
        self._store = store
        self._text = b""
        self._size_for: ArrayMeta | None = None
        self._size = 0

    @property
    def meta(self) -> ArrayMeta:
        return self._array.meta if self._array is not None else self._meta

    @property
    def size(self) -> int:
        meta = self.meta  # a resize makes a new ArrayMeta
        if self._size_for is not meta:
            self._size = info_size(meta)
            self._size_for = meta
        return self._size

    def _render(self, meta: ArrayMeta, documents: int, dirty: int) -> bytes:
        """Worker thread: list the array's keys and summarise them."""
        prefix = meta.path
        keys = ((f"{prefix}/{k}" if prefix else k, n) for k, n in self._store.scan(prefix))
        return info_text(meta, summarise(meta, keys, documents), dirty).encode()

    async def read(self, offset: int, size: int) -> Buffer:
        if offset == 0 or not self._text:
            documents = sum(len(d) for d in self._documents.values())
            dirty = len(self._array.dirty) if self._array is not None else 0
            self._text = await trio.to_thread.run_sync(self._render, self.meta, documents, dirty)
        return self._text[offset : offset + size]
