"""Pure stripe math: array.raw cut into runs that each need one row of chunks.

A stripe is a run of the C-order byte stream that worker threads assemble from
decoded chunks, so that a read is a slice of it. Along the *depth* axis ``d`` a
stripe covers rows ``[r0, r1)`` that lie within one chunk along ``d``, at one
index of every axis before ``d``, and every element of the axes after it: its
bytes are contiguous, and the chunks it needs are exactly those whose indices
on the axes up to ``d`` are its ``prefix`` (any index on the axes after it).

The depth is the first axis along which one row (all the axes after it) fits
the size cap: for a 2-D array of tiles that is axis 0, and a stripe is a row of
tiles; a very wide array (one row over the cap) or a large 3-D one goes one axis
deeper. A chunk row larger than the cap is cut into stripes of ``rows`` rows,
which share that row's chunks. No I/O happens here.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from zarrfs.formats.grid.layout import Index, grid_shape


@dataclass(frozen=True)
class Stripe:
    """Bytes ``[start, stop)`` of array.raw; ``prefix``: the chunk indices, on the
    axes up to the depth, of every chunk it needs."""

    start: int
    stop: int
    prefix: Index

    @property
    def nbytes(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class StripeLayout:
    shape: Index
    chunks: Index
    itemsize: int
    depth: int
    rows: int  # rows along the depth axis per stripe, at most (a chunk's at most)

    @property
    def row_nbytes(self) -> int:
        """Bytes of one row along the depth axis (every element of the axes after)."""
        return math.prod(self.shape[self.depth + 1 :]) * self.itemsize

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize

    @property
    def max_stripe_nbytes(self) -> int:
        return self.rows * self.row_nbytes

    @property
    def chunk_row_nbytes(self) -> int:
        """Decoded bytes of the chunks one stripe needs (edge chunks counted whole)."""
        depth = self.depth
        grid = grid_shape(self.shape, self.chunks)
        return math.prod(self.chunks) * math.prod(grid[depth + 1 :]) * self.itemsize

    def stripe_at(self, offset: int) -> Stripe:
        """The stripe holding byte ``offset`` (``0 <= offset < nbytes``)."""
        if not 0 <= offset < self.nbytes:
            raise ValueError(f"offset {offset} outside the array's {self.nbytes} bytes")
        depth, shape, chunks = self.depth, self.shape, self.chunks
        element = offset // self.itemsize
        per_row = math.prod(shape[depth + 1 :])
        outer, _ = divmod(element, per_row)  # linear index over the axes up to depth
        index = []
        for size in reversed(shape[: depth + 1]):
            outer, i = divmod(outer, size)
            index.append(i)
        index.reverse()
        *before, row = index
        chunk = row // chunks[depth]
        base = chunk * chunks[depth]
        first = base + (row - base) // self.rows * self.rows
        last = min(first + self.rows, base + chunks[depth], shape[depth])
        head = 0
        for i, size in zip(before, shape[:depth]):
            head = head * size + i
        start = (head * shape[depth] + first) * per_row * self.itemsize
        stop = (head * shape[depth] + last) * per_row * self.itemsize
        prefix = (*(i // c for i, c in zip(before, chunks)), chunk)
        return Stripe(start, stop, prefix)

    def chunk_indices(self, stripe: Stripe) -> list[Index]:
        """Every chunk the stripe needs, in C order of the grid."""
        grid = grid_shape(self.shape, self.chunks)
        tails = itertools.product(*(range(n) for n in grid[self.depth + 1 :]))
        return [stripe.prefix + tail for tail in tails]

    def holds(self, stripe: Stripe, index: Index) -> bool:
        """Whether the stripe needs chunk ``index``."""
        return index[: self.depth + 1] == stripe.prefix


def stripe_layout(shape: Index, chunks: Index, itemsize: int, cap: int) -> StripeLayout | None:
    """Stripes of at most ``cap`` bytes for an array; None when it has no elements
    or no axis (0-d) or when one element is larger than ``cap``."""
    if not shape or math.prod(shape) == 0 or itemsize <= 0:
        return None
    for depth in range(len(shape)):
        row = math.prod(shape[depth + 1 :]) * itemsize
        if row <= cap:
            return StripeLayout(
                tuple(shape), tuple(chunks), itemsize, depth, max(1, min(chunks[depth], cap // row))
            )
    return None
