"""The live metadata of an array and the fill-value arithmetic reads and writes share."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tests.support.stores import v2_zarray
from zarrfs.core.livemeta import LiveMeta, fill_element, fill_run, void_dtype
from zarrfs.formats.metadata.v2 import parse_array
from zarrfs.formats.model import ArrayMeta


def meta_of(shape: list[int], chunks: list[int], dtype: str = "<i4", **extra: object) -> ArrayMeta:
    return parse_array("a", json.dumps(v2_zarray(shape, chunks, dtype, **extra)).encode(), None)


@given(
    fill=st.binary(min_size=1, max_size=9),
    start=st.integers(0, 100),
    length=st.integers(0, 100),
)
def test_a_fill_run_is_the_fill_repeated_from_element_boundaries(
    fill: bytes, start: int, length: int
) -> None:
    everything = fill * (-(-(start + length) // len(fill)) + 1)
    assert fill_run(fill, start, start + length) == everything[start : start + length]


def test_the_fill_element_holds_the_fill_bytes() -> None:
    meta = meta_of([4], [2], "<f8", fill_value="NaN")
    assert void_dtype(meta) == np.dtype("V8")
    assert fill_element(meta).tobytes() == np.float64("nan").tobytes() == meta.fill_bytes
    null = meta_of([4], [2], "<i2", fill_value=None)
    assert fill_element(null).tobytes() == b"\0\0"


def test_what_follows_from_the_metadata_follows_a_resize() -> None:
    live = LiveMeta(meta_of([10, 6], [4, 6], "<i2", fill_value=7))
    assert live.run == 4 * 6 * 2  # chunks span whole rows: runs of array.raw
    assert live.trailing == (0,)
    assert live.row_nbytes == 12
    assert live.fill.tobytes() == (7).to_bytes(2, "little")
    live.replace(live.meta.resized(3))
    assert live.meta.shape == (3, 6)
    assert live.run == 4 * 6 * 2 and live.row_nbytes == 12

    split = LiveMeta(meta_of([10, 6], [4, 3]))
    assert split.run is None  # a chunk is no run of array.raw
    scalar = LiveMeta(meta_of([], []))
    assert scalar.row_nbytes is None and scalar.trailing == ()


def test_locate_and_bounds() -> None:
    live = LiveMeta(meta_of([10, 6], [4, 4]))
    assert live.locate(0) == ((0, 0), (0, 0))
    assert live.locate(6 * 5 + 5) == ((1, 1), (1, 1))
    assert live.in_bounds((2, 1)) == (slice(0, 2), slice(0, 2))  # the edge chunk
    assert live.in_bounds((0, 0)) == (slice(0, 4), slice(0, 4))
