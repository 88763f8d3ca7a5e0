"""An array's metadata as it is now, and the element arithmetic reads and writes share.

Copies between chunks and ``array.raw`` are bytewise, through a void dtype of the
element size, so NaN payloads and odd dtypes survive untouched; positions that hold
no stored element read as the fill value, one element's bytes repeated.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from zarrfs.formats.grid.layout import Index, contiguous_chunk_nbytes
from zarrfs.formats.model import ArrayMeta


def void_dtype(meta: ArrayMeta) -> np.dtype:
    """The dtype copies use: one opaque element of ``meta``'s size."""
    return _void(meta.itemsize)


def fill_element(meta: ArrayMeta) -> np.void:
    """One element of fill value, as ``void_dtype(meta)`` holds it."""
    element = meta.fill_bytes
    if len(element) > _KEPT_FILL_BYTES:  # (elements may be as large as a chunk)
        return np.frombuffer(element, dtype=void_dtype(meta))[0]
    return _fill(element)


# Listing an array makes its live metadata: the arrays of a hierarchy share a few
# element sizes and fill values, made once each (numpy's are immutable).
_KEPT_FILL_BYTES = 64


@functools.lru_cache(maxsize=256)
def _void(itemsize: int) -> np.dtype:
    return np.dtype((np.void, itemsize))


@functools.lru_cache(maxsize=256)
def _fill(element: bytes) -> np.void:
    return np.frombuffer(element, dtype=_void(len(element)))[0]


def fill_run(fill: bytes, start: int, stop: int) -> bytes:
    """Fill bytes for positions ``[start, stop)`` counted from an element boundary
    (``fill`` is one element's bytes)."""
    phase = start % len(fill)
    count = -(-(stop - start + phase) // len(fill))
    return (fill * count)[phase : phase + stop - start]


class LiveMeta:
    """The metadata of one array as it is now, shared by the parts of its state.

    A resize replaces ``meta`` (ArrayMeta is immutable: ``live.meta is meta`` after
    an await tells that no resize came meanwhile); what follows from it is worked
    out then, once per metadata.
    """

    __slots__ = ("fill", "meta", "run", "trailing", "void")

    def __init__(self, meta: ArrayMeta) -> None:
        self.replace(meta)

    def replace(self, meta: ArrayMeta) -> None:
        self.meta = meta
        self.void = void_dtype(meta)
        self.fill = fill_element(meta)
        # The bytes of array.raw each chunk is a run of (None: chunks are not runs).
        self.run = contiguous_chunk_nbytes(meta.shape, meta.chunks, meta.itemsize, meta.order)
        # Where chunks are runs, chunk ``n`` is ``(n, *trailing)``.
        self.trailing: Index = (0,) * (len(meta.shape) - 1)

    @property
    def row_nbytes(self) -> int | None:
        """Bytes per step along axis 0; ``None`` for 0-d arrays, which cannot resize."""
        meta = self.meta
        if not meta.shape:
            return None
        return math.prod(meta.shape[1:]) * meta.itemsize

    def in_bounds(self, index: Index) -> tuple[slice, ...]:
        """The part of chunk ``index`` inside the array (edge chunks overhang it)."""
        meta = self.meta
        return tuple(slice(0, min(c, s - i * c)) for i, c, s in zip(index, meta.chunks, meta.shape))

    def locate(self, element: int) -> tuple[Index, Index]:
        """(chunk index, position inside the chunk) of a C-order element number."""
        position = np.unravel_index(element, self.meta.shape)
        chunks = self.meta.chunks
        return (
            tuple(int(p) // c for p, c in zip(position, chunks)),
            tuple(int(p) % c for p, c in zip(position, chunks)),
        )
