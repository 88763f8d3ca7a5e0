"""zarrfs.formats.grid.layout: byte range of the C-order array -> chunk regions (pure math).

Table-driven cases are worked out by hand; the hypothesis properties check the plan
against a reference numpy array cut into (garbage-padded) chunks by hand.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zarrfs.formats.grid.layout import (
    Piece,
    RangePlan,
    array_nbytes,
    chunk_count,
    grid_shape,
    linear_boxes,
    plan_range,
)

S = slice

# ---------------------------------------------------------------- small helpers


def test_grid_shape_chunk_count_array_nbytes():
    assert grid_shape((10,), (4,)) == (3,)
    assert grid_shape((5, 7), (2, 3)) == (3, 3)
    assert grid_shape((4, 6), (4, 6)) == (1, 1)
    assert grid_shape((3,), (10,)) == (1,)
    assert grid_shape((0, 5), (2, 2)) == (0, 3)
    assert grid_shape((), ()) == ()
    assert chunk_count((5, 7), (2, 3)) == 9
    assert chunk_count((0, 5), (2, 2)) == 0
    assert chunk_count((), ()) == 1
    assert array_nbytes((5, 7), 4) == 140
    assert array_nbytes((), 8) == 8
    assert array_nbytes((3, 0), 8) == 0


# ---------------------------------------------------------------- linear_boxes table

LINEAR_BOXES = [
    # (shape, start, stop, expected boxes)
    ((), 0, 1, [((), ())]),
    ((), 0, 0, []),
    ((10,), 3, 7, [((3,), (7,))]),
    ((10,), 0, 10, [((0,), (10,))]),
    ((10,), 5, 5, []),
    ((10,), 7, 3, []),
    # inside one row
    ((5, 7), 9, 12, [((1, 2), (2, 5))]),
    # exactly one row
    ((5, 7), 7, 14, [((1, 0), (2, 7))]),
    # whole rows only
    ((5, 7), 7, 21, [((1, 0), (3, 7))]),
    ((5, 7), 0, 35, [((0, 0), (5, 7))]),
    # start of a row to the middle of the same row
    ((5, 7), 7, 10, [((1, 0), (2, 3))]),
    # tail of one row, head of the next (no whole rows between)
    ((5, 7), 6, 8, [((0, 6), (1, 7)), ((1, 0), (2, 1))]),
    # tail, whole rows, head
    ((5, 7), 5, 30, [((0, 5), (1, 7)), ((1, 0), (4, 7)), ((4, 0), (5, 2))]),
    # tail then whole rows up to the end
    ((5, 7), 12, 35, [((1, 5), (2, 7)), ((2, 0), (5, 7))]),
    # 3-D: the partial outer row is itself cut into a partial inner row and whole rows
    (
        (2, 3, 4),
        5,
        19,
        [
            ((0, 1, 1), (1, 2, 4)),
            ((0, 2, 0), (1, 3, 4)),
            ((1, 0, 0), (2, 1, 4)),
            ((1, 1, 0), (2, 2, 3)),
        ],
    ),
    # 3-D worst case: 2 * ndim - 1 = 5 boxes
    (
        (3, 3, 3),
        1,
        26,
        [
            ((0, 0, 1), (1, 1, 3)),
            ((0, 1, 0), (1, 3, 3)),
            ((1, 0, 0), (2, 3, 3)),
            ((2, 0, 0), (3, 2, 3)),
            ((2, 2, 0), (3, 3, 2)),
        ],
    ),
    # zero-length axis: the only valid range is empty
    ((3, 0, 2), 0, 0, []),
]


@pytest.mark.parametrize(("shape", "start", "stop", "expected"), LINEAR_BOXES)
def test_linear_boxes_table(shape, start, stop, expected):
    assert linear_boxes(shape, start, stop) == expected


# ---------------------------------------------------------------- plan_range table


def _piece(chunk_sel, box_start, box_shape, box_sel):
    return Piece(tuple(chunk_sel), box_start, tuple(box_shape), tuple(box_sel))


# 2-D shape (5, 7), chunks (2, 3): grid (3, 3); row 4 and column 6 lie in overhanging
# edge chunks. Elements [5, 30) are boxes A=((0,5),(1,7)) B=((1,0),(4,7)) C=((4,0),(5,2)).
_SPAN_ROWS_CHUNKS = {
    (0, 0): [_piece((S(1, 2), S(0, 3)), 2, (3, 7), (S(0, 1), S(0, 3)))],
    (0, 1): [
        _piece((S(0, 1), S(2, 3)), 0, (1, 2), (S(0, 1), S(0, 1))),
        _piece((S(1, 2), S(0, 3)), 2, (3, 7), (S(0, 1), S(3, 6))),
    ],
    (0, 2): [
        _piece((S(0, 1), S(0, 1)), 0, (1, 2), (S(0, 1), S(1, 2))),
        _piece((S(1, 2), S(0, 1)), 2, (3, 7), (S(0, 1), S(6, 7))),
    ],
    (1, 0): [_piece((S(0, 2), S(0, 3)), 2, (3, 7), (S(1, 3), S(0, 3)))],
    (1, 1): [_piece((S(0, 2), S(0, 3)), 2, (3, 7), (S(1, 3), S(3, 6)))],
    (1, 2): [_piece((S(0, 2), S(0, 1)), 2, (3, 7), (S(1, 3), S(6, 7)))],
    (2, 0): [_piece((S(0, 1), S(0, 2)), 23, (1, 2), (S(0, 1), S(0, 2)))],
}

# fmt: off
PLAN_RANGE = [
    pytest.param(
        (10,), (4,), 2, 3, 10,
        RangePlan(1, 7, 1, 10, {
            (0,): [_piece((S(1, 4),), 0, (6,), (S(0, 3),))],
            (1,): [_piece((S(0, 3),), 0, (6,), (S(3, 6),))],
        }),
        id="1d-partial-elements-both-ends",
    ),
    pytest.param(
        (10,), (4,), 1, 0, 10,
        RangePlan(0, 10, 0, 10, {
            (0,): [_piece((S(0, 4),), 0, (10,), (S(0, 4),))],
            (1,): [_piece((S(0, 4),), 0, (10,), (S(4, 8),))],
            (2,): [_piece((S(0, 2),), 0, (10,), (S(8, 10),))],
        }),
        id="1d-whole-array-overhanging-last-chunk",
    ),
    pytest.param(
        (10,), (4,), 2, 15, 100,
        RangePlan(7, 10, 1, 5, {
            (1,): [_piece((S(3, 4),), 0, (3,), (S(0, 1),))],
            (2,): [_piece((S(0, 2),), 0, (3,), (S(1, 3),))],
        }),
        id="1d-length-clipped-at-end",
    ),
    pytest.param(
        (10,), (100,), 8, 8, 16,
        RangePlan(1, 3, 0, 16, {(0,): [_piece((S(1, 3),), 0, (2,), (S(0, 2),))]}),
        id="1d-chunk-larger-than-array",
    ),
    pytest.param(
        (5, 7), (2, 3), 4, 36, 12,
        RangePlan(9, 12, 0, 12, {
            (0, 0): [_piece((S(1, 2), S(2, 3)), 0, (1, 3), (S(0, 1), S(0, 1)))],
            (0, 1): [_piece((S(1, 2), S(0, 2)), 0, (1, 3), (S(0, 1), S(1, 3)))],
        }),
        id="2d-inside-one-row",
    ),
    pytest.param(
        (5, 7), (2, 3), 1, 34, 1,
        RangePlan(34, 35, 0, 1, {
            (2, 2): [_piece((S(0, 1), S(0, 1)), 0, (1, 1), (S(0, 1), S(0, 1)))],
        }),
        id="2d-last-element-in-corner-edge-chunk",
    ),
    pytest.param(
        (5, 7), (2, 3), 1, 5, 25, RangePlan(5, 30, 0, 25, _SPAN_ROWS_CHUNKS),
        id="2d-spanning-rows-edge-chunks",
    ),
    pytest.param(
        # bytes [21, 118) of a 4-byte dtype: elements 5..29 with 1 byte cut at the
        # start and 2 bytes cut at the end
        (5, 7), (2, 3), 4, 21, 97, RangePlan(5, 30, 1, 97, _SPAN_ROWS_CHUNKS),
        id="2d-spanning-rows-partial-elements-both-ends",
    ),
    pytest.param(
        (), (), 8, 0, 8,
        RangePlan(0, 1, 0, 8, {(): [_piece((), 0, (), ())]}),
        id="0d-whole",
    ),
    pytest.param(
        (), (), 8, 3, 100,
        RangePlan(0, 1, 3, 5, {(): [_piece((), 0, (), ())]}),
        id="0d-partial-clipped",
    ),
    pytest.param((3, 0, 2), (2, 2, 2), 4, 0, 100, RangePlan(0, 0, 0, 0), id="zero-length-axis"),
    pytest.param((10,), (4,), 2, 20, 5, RangePlan(0, 0, 0, 0), id="offset-at-end"),
    pytest.param((10,), (4,), 2, 25, 5, RangePlan(0, 0, 0, 0), id="offset-past-end"),
    pytest.param((10,), (4,), 2, 4, 0, RangePlan(0, 0, 0, 0), id="zero-length"),
    pytest.param((), (), 8, 8, 1, RangePlan(0, 0, 0, 0), id="0d-offset-at-end"),
]
# fmt: on


@pytest.mark.parametrize(
    ("shape", "chunks", "itemsize", "offset", "length", "expected"), PLAN_RANGE
)
def test_plan_range_table(shape, chunks, itemsize, offset, length, expected):
    plan = plan_range(shape, chunks, itemsize, offset, length)
    assert plan == expected
    assert list(plan.chunks) == list(expected.chunks)  # C order of the chunk grid
    assert plan.n_elements == expected.elem_stop - expected.elem_start


def test_plan_range_3d_chunk_set():
    # shape (2, 3, 4), chunks (1, 2, 3), elements [5, 19) (see the linear_boxes table)
    plan = plan_range((2, 3, 4), (1, 2, 3), 2, 10, 28)
    assert (plan.elem_start, plan.elem_stop, plan.byte_offset, plan.nbytes) == (5, 19, 0, 28)
    expected = [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (1, 0, 0), (1, 0, 1)]
    assert list(plan.chunks) == expected


@pytest.mark.parametrize(
    ("shape", "chunks", "offset", "length"),
    [((4,), (2, 2), 0, 1), ((4,), (2,), -1, 1), ((4,), (2,), 0, -1), ((), (1,), 0, 1)],
)
def test_plan_range_rejects_bad_arguments(shape, chunks, offset, length):
    with pytest.raises(ValueError):
        plan_range(shape, chunks, 1, offset, length)


# ---------------------------------------------------------------- hypothesis properties


def _c_linear(index, shape):
    linear = 0
    for i, s in zip(index, shape):
        linear = linear * s + i
    return linear


@st.composite
def geometries(draw):
    ndim = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(0, 6), min_size=ndim, max_size=ndim)))
    chunks = tuple(draw(st.lists(st.integers(1, 8), min_size=ndim, max_size=ndim)))
    itemsize = draw(st.sampled_from([1, 2, 3, 4, 8]))
    total = math.prod(shape) * itemsize
    offset = draw(st.integers(0, total + 10))
    length = draw(st.integers(0, total + 10))
    return shape, chunks, itemsize, offset, length


def _chunk_of(ref, index, chunks, rng):
    """Chunk ``index`` of ``ref`` (shape + (itemsize,)), padded to full size with garbage."""
    itemsize = ref.shape[-1]
    full = rng.integers(0, 256, size=(*chunks, itemsize), dtype=np.uint8)
    region = tuple(S(i * c, (i + 1) * c) for i, c in zip(index, chunks))
    part = ref[region]
    full[tuple(S(0, n) for n in part.shape[:-1])] = part
    return full


def _brute_force_chunks(shape, chunks, start, stop):
    if stop <= start:
        return set()
    if not shape:
        return {()}
    coords = np.unravel_index(np.arange(start, stop), shape)
    per_dim = [c // k for c, k in zip(coords, chunks)]
    return set(zip(*(p.tolist() for p in per_dim)))


_SETTINGS = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,  # same examples every run
    suppress_health_check=[HealthCheck.too_slow],
)


@_SETTINGS
@given(geometries(), st.integers(0, 2**32 - 1))
def test_plan_assembles_reference_bytes(geometry, seed):
    shape, chunks, itemsize, offset, length = geometry
    rng = np.random.default_rng(seed)
    ref = rng.integers(0, 256, size=(*shape, itemsize), dtype=np.uint8)
    expected = ref.tobytes()[offset : offset + length]

    plan = plan_range(shape, chunks, itemsize, offset, length)
    assert plan.nbytes == len(expected)
    buf = np.full((plan.n_elements, itemsize), 0xEE, dtype=np.uint8)
    for index, pieces in plan.chunks.items():
        chunk = _chunk_of(ref, index, chunks, rng)
        for piece in pieces:
            count = math.prod(piece.box_shape)
            box = buf[piece.box_start : piece.box_start + count].reshape(
                (*piece.box_shape, itemsize)
            )
            box[piece.box_selection] = chunk[piece.chunk_selection]
    got = buf.tobytes()[plan.byte_offset : plan.byte_offset + plan.nbytes]
    assert got == expected


@_SETTINGS
@given(geometries())
def test_plan_touches_exactly_the_overlapping_chunks_once(geometry):
    shape, chunks, itemsize, offset, length = geometry
    plan = plan_range(shape, chunks, itemsize, offset, length)
    total = math.prod(shape) * itemsize
    end = min(offset + length, total)
    if offset < end:
        assert plan.elem_start == offset // itemsize
        assert plan.elem_stop == -(-end // itemsize)
        assert plan.byte_offset == offset - plan.elem_start * itemsize
        assert plan.nbytes == end - offset
    else:
        assert plan.n_elements == 0 and plan.nbytes == 0 and not plan.chunks

    brute = _brute_force_chunks(shape, chunks, plan.elem_start, plan.elem_stop)
    assert set(plan.chunks) == brute
    assert list(plan.chunks) == sorted(plan.chunks)
    assert all(plan.chunks[index] for index in plan.chunks)  # no chunk without pieces

    # every element of the range is written by exactly one piece, and every piece
    # reads only in-bounds elements of its chunk
    written = np.zeros(plan.n_elements, dtype=np.int64)
    for index, pieces in plan.chunks.items():
        for piece in pieces:
            count = math.prod(piece.box_shape)
            box = written[piece.box_start : piece.box_start + count].reshape(piece.box_shape)
            box[piece.box_selection] += 1
            for sel, i, c, n in zip(piece.chunk_selection, index, chunks, shape):
                assert 0 <= sel.start < sel.stop <= c
                assert i * c + sel.stop <= n
    assert (written == 1).all()


@st.composite
def element_ranges(draw):
    ndim = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(0, 6), min_size=ndim, max_size=ndim)))
    total = math.prod(shape)
    start = draw(st.integers(0, total))
    stop = draw(st.integers(start, total))
    return shape, start, stop


@_SETTINGS
@given(element_ranges())
def test_linear_boxes_partition_the_range_in_c_order(case):
    shape, start, stop = case
    boxes = linear_boxes(shape, start, stop)
    assert len(boxes) <= max(1, 2 * len(shape) - 1)
    covered: list[int] = []
    for lo, hi in boxes:
        assert len(lo) == len(hi) == len(shape)
        assert all(0 <= a < b <= n for a, b, n in zip(lo, hi, shape))
        linear = [_c_linear(ix, shape) for ix in itertools.product(*map(range, lo, hi))]
        # contiguous in C order: iterating the box in C order walks consecutive indices
        assert linear == list(range(_c_linear(lo, shape), _c_linear(lo, shape) + len(linear)))
        covered.extend(linear)
    # disjoint, in increasing order, and covering exactly [start, stop)
    assert covered == list(range(start, stop))
