"""array.npy's header is byte for byte the one ``np.save`` writes for the array."""

from __future__ import annotations

import contextlib
import io
import math
import warnings

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from zarrfs.views.npy import npy_header, parse_npy_header


class _HeaderWritten(Exception):
    pass


class _HeaderOnly(io.RawIOBase):
    """A file that keeps the first write (numpy writes the header in one) and
    refuses the next, so no array data is ever written."""

    def __init__(self) -> None:
        self.header: bytes | None = None

    def writable(self) -> bool:
        return True

    def write(self, data: object) -> int:
        if self.header is not None:
            raise _HeaderWritten
        self.header = bytes(data)  # type: ignore[call-overload]
        return len(self.header)


def saved_header(array: np.ndarray) -> bytes:
    """The header ``np.save`` writes for ``array``."""
    sink = _HeaderOnly()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "stored in format 2.0/3.0"
        with contextlib.suppress(_HeaderWritten):
            np.save(sink, array)
    assert sink.header is not None
    return sink.header


def shaped(dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """An array of any shape, however large, backed by one element (C order)."""
    return np.lib.stride_tricks.as_strided(
        np.zeros(1, dtype), shape=shape, strides=(0,) * len(shape), writeable=False
    )


def fortran_saved(array: np.ndarray) -> bool:
    """Whether np.save marks ``array`` as Fortran order (as numpy decides it)."""
    return bool(array.flags.f_contiguous and not array.flags.c_contiguous)


MANY_FIELDS = np.dtype([(f"field_{i:05d}_with_a_long_name", "<f8") for i in range(2000)])

DTYPES = [
    "<f8",
    ">f8",
    "<f2",
    ">f4",
    "|u1",
    "|i1",
    "<i2",
    ">i4",
    "<u8",
    "|b1",
    "<c16",
    ">c8",
    "<M8[ns]",
    ">m8[s]",
    "|S7",
    "<U3",
    ">U3",
    "|V5",
    [("a", "<f4"), ("b", ">i8")],
    [("x", "<f4", (2, 3)), ("y", "|u1")],
    [("outer", [("inner", "<i2"), ("other", ">f8")]), ("z", "|S2")],
    {"names": ["a", "b"], "formats": ["|u1", "<f8"], "offsets": [0, 8], "itemsize": 24},
    [("é", "<f4")],  # latin-1: still 1.0
    [("π", "<f4"), ("b", ">i2")],  # outside latin-1: 3.0
    MANY_FIELDS,  # a header longer than 1.0 allows: 2.0
]

SHAPES = [
    (),
    (0,),
    (1,),
    (7,),
    (3, 4),
    (2, 3, 4),
    (5, 0),
    (10**11,),
    (2**30, 3),
    (3, 10**10),
]


@pytest.mark.parametrize("descr", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_header_is_the_one_np_save_writes(descr: object, shape: tuple[int, ...]) -> None:
    dtype = np.dtype(descr)  # type: ignore[call-overload]
    header = npy_header(dtype, shape)
    assert header == saved_header(shaped(dtype, shape))
    if header[6] == 1:  # (2.0 here is longer than numpy reads unasked)
        assert parse_npy_header(header + b"data") == (len(header), dtype, shape, False)


@pytest.mark.parametrize("descr", ["<f8", ">i2", "|S3", [("a", "<f4"), ("π", ">u2")]], ids=str)
@pytest.mark.parametrize("shape", [(2, 3), (3, 1, 2), (4, 7, 2, 3), (2, 100_000)], ids=str)
def test_a_fortran_order_header_is_the_one_np_save_writes(
    descr: object, shape: tuple[int, ...]
) -> None:
    dtype = np.dtype(descr)  # type: ignore[call-overload]
    array = np.zeros(shape, dtype, order="F")
    assert fortran_saved(array)
    assert npy_header(dtype, shape, True) == saved_header(array)


def test_the_versions_numpy_picks() -> None:
    """1.0 when it fits, 2.0 for a long header, 3.0 for names outside latin-1."""
    assert npy_header(np.dtype("<f8"), (3,))[6:8] == b"\x01\x00"
    assert npy_header(MANY_FIELDS, (3,))[6:8] == b"\x02\x00"
    assert npy_header(np.dtype([("π", "<f4")]), (3,))[6:8] == b"\x03\x00"


def test_headers_keep_the_data_aligned() -> None:
    for descr in DTYPES:
        dtype = np.dtype(descr)  # type: ignore[call-overload]
        for shape in SHAPES:
            assert len(npy_header(dtype, shape)) % 64 == 0


# Field names from all of Unicode: those outside latin-1 make numpy write 3.0.
named_fields = st.lists(
    st.tuples(st.text(min_size=1, max_size=6), hnp.scalar_dtypes()),
    min_size=1,
    max_size=6,
    unique_by=lambda field: field[0],
).map(np.dtype)
dtypes = st.one_of(
    hnp.scalar_dtypes(),
    hnp.byte_string_dtypes(),
    hnp.unicode_string_dtypes(),
    hnp.array_dtypes(allow_subarrays=True),
    hnp.nested_dtypes(),
    named_fields,
)
byte_orders = st.sampled_from(["<", ">", "="])


@settings(max_examples=300, deadline=None)
@given(
    dtype=dtypes,
    order=byte_orders,
    shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=2**45),
)
def test_any_header_is_the_one_np_save_writes(
    dtype: np.dtype, order: str, shape: tuple[int, ...]
) -> None:
    dtype = dtype.newbyteorder(order)
    # numpy's limit on array size (its every side counted, even next to a zero)
    assume(math.prod(max(side, 1) for side in shape) * dtype.itemsize < 2**62)
    assert npy_header(dtype, shape) == saved_header(shaped(dtype, shape))


@settings(max_examples=150, deadline=None)
@given(
    dtype=dtypes,
    shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=5),
    fortran=st.booleans(),
)
def test_any_memory_order_gives_the_header_np_save_writes(
    dtype: np.dtype, shape: tuple[int, ...], fortran: bool
) -> None:
    array = np.zeros(shape, dtype, order="F" if fortran else "C")
    assert npy_header(dtype, shape, fortran_saved(array)) == saved_header(array)
