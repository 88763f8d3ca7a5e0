"""Pure layout math: a byte range of the C-order array → the chunk regions it covers.

No I/O happens here. A byte range ``[offset, offset + length)`` of ``array.raw`` is
first widened to whole elements, then cut into boxes (hyper-rectangles of the array
that are each contiguous in C order — at most ``2 * ndim - 1`` of them), and each
box is projected onto the chunk grid one dimension at a time, the way zarr-python's
indexing builds ``(dim_chunk_ix, dim_chunk_sel, dim_out_sel)`` triples. The pieces
are grouped by chunk so that a caller fetches every chunk it needs exactly once.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

Index = tuple[int, ...]
Selection = tuple[slice, ...]


@dataclass(frozen=True)
class Piece:
    """One chunk's contribution to one box.

    ``chunk_selection`` indexes the decoded chunk (shape = the metadata's chunk
    shape); ``box_selection`` indexes the box, whose elements are stored C-order
    contiguously at element offset ``box_start`` of the range's element buffer.
    """

    chunk_selection: Selection
    box_start: int
    box_shape: Index
    box_selection: Selection


@dataclass(frozen=True)
class RangePlan:
    """What reading or writing one byte range involves.

    The range covers elements ``[elem_start, elem_stop)``; the requested bytes sit
    at ``byte_offset`` inside the element buffer and are ``nbytes`` long (already
    clipped to the array's end). ``chunks`` maps each touched chunk index, in
    C order of the chunk grid, to its pieces.
    """

    elem_start: int
    elem_stop: int
    byte_offset: int
    nbytes: int
    chunks: dict[Index, list[Piece]] = field(default_factory=dict)

    @property
    def n_elements(self) -> int:
        return self.elem_stop - self.elem_start


def grid_shape(shape: Index, chunks: Index) -> Index:
    """Number of chunks along each dimension (edge chunks overhang the array)."""
    return tuple(math.ceil(s / c) for s, c in zip(shape, chunks))


def chunk_count(shape: Index, chunks: Index) -> int:
    return math.prod(grid_shape(shape, chunks))


def array_nbytes(shape: Index, itemsize: int) -> int:
    return math.prod(shape) * itemsize


def linear_boxes(shape: Index, start: int, stop: int) -> list[tuple[Index, Index]]:
    """Cut the C-order element range ``[start, stop)`` into boxes ``(lo, hi)``.

    Boxes come back in increasing C order and each one is contiguous in C order,
    so box ``k`` starts at the linear index of its ``lo`` corner.
    """
    if start >= stop:
        return []
    if not shape:
        return [((), ())]
    if len(shape) == 1:
        return [((start,), (stop,))]
    inner = math.prod(shape[1:])
    rest = shape[1:]
    first, first_rem = divmod(start, inner)
    last, last_rem = divmod(stop, inner)
    boxes: list[tuple[Index, Index]] = []

    def prefixed(row: int, sub: list[tuple[Index, Index]]) -> None:
        boxes.extend(((row, *lo), (row + 1, *hi)) for lo, hi in sub)

    if first == last:
        prefixed(first, linear_boxes(rest, first_rem, last_rem))
        return boxes
    if first_rem:
        prefixed(first, linear_boxes(rest, first_rem, inner))
        first += 1
    if last > first:
        boxes.append(((first, *(0 for _ in rest)), (last, *rest)))
    if last_rem:
        prefixed(last, linear_boxes(rest, 0, last_rem))
    return boxes


def _dim_projections(lo: int, hi: int, chunk: int) -> list[tuple[int, slice, slice]]:
    """Per-dimension ``(chunk index, slice in chunk, slice in box)`` for ``[lo, hi)``."""
    out = []
    for c in range(lo // chunk, (hi - 1) // chunk + 1):
        c_lo = max(lo, c * chunk)
        c_hi = min(hi, (c + 1) * chunk)
        out.append((c, slice(c_lo - c * chunk, c_hi - c * chunk), slice(c_lo - lo, c_hi - lo)))
    return out


def plan_range(shape: Index, chunks: Index, itemsize: int, offset: int, length: int) -> RangePlan:
    """Map bytes ``[offset, offset + length)`` of the C-order array onto chunks."""
    if len(shape) != len(chunks):
        raise ValueError(f"shape {shape} and chunks {chunks} differ in rank")
    if offset < 0 or length < 0:
        raise ValueError("offset and length must be non-negative")
    total = array_nbytes(shape, itemsize)
    end = min(offset + length, total)
    if offset >= end:
        return RangePlan(0, 0, 0, 0)
    elem_start = offset // itemsize
    elem_stop = -(-end // itemsize)
    by_chunk: dict[Index, list[Piece]] = {}
    for lo, hi in linear_boxes(shape, elem_start, elem_stop):
        box_start = _ravel(lo, shape) - elem_start
        box_shape = tuple(h - lo_ for lo_, h in zip(lo, hi))
        per_dim = [_dim_projections(a, b, c) for a, b, c in zip(lo, hi, chunks)]
        for combo in itertools.product(*per_dim):
            index = tuple(p[0] for p in combo)
            piece = Piece(
                chunk_selection=tuple(p[1] for p in combo),
                box_start=box_start,
                box_shape=box_shape,
                box_selection=tuple(p[2] for p in combo),
            )
            by_chunk.setdefault(index, []).append(piece)
    ordered = {index: by_chunk[index] for index in sorted(by_chunk)}
    return RangePlan(elem_start, elem_stop, offset - elem_start * itemsize, end - offset, ordered)


def _ravel(index: Index, shape: Index) -> int:
    linear = 0
    for i, s in zip(index, shape):
        linear = linear * s + i
    return linear


def contiguous_chunk_nbytes(shape: Index, chunks: Index, itemsize: int, order: str) -> int | None:
    """Bytes of one chunk when chunks are runs of the C-order byte stream, else ``None``.

    That is the case when a chunk spans every trailing axis (``chunks[1:] ==
    shape[1:]``) and its elements are in C order (or it has one axis): chunk ``i``
    is then bytes ``[i * n, (i + 1) * n)`` of ``array.raw``, and a read needs no
    reshuffling at all.
    """
    if not shape or tuple(chunks[1:]) != tuple(shape[1:]):
        return None
    if order != "C" and len(shape) > 1:
        return None
    return math.prod(chunks) * itemsize


def contiguous_runs(chunk_nbytes: int, offset: int, length: int) -> list[tuple[int, int, int]]:
    """``[offset, offset + length)`` as (chunk number, start, stop) byte runs in chunks."""
    runs = []
    end = offset + length
    while offset < end:
        number, start = divmod(offset, chunk_nbytes)
        stop = min(chunk_nbytes, start + end - offset)
        runs.append((number, start, stop))
        offset += stop - start
    return runs
