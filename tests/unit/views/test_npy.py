"""array.npy: the NPY header (zarrfs.views.npy.npy_header) and NpyView byte ranges.

Oracles: ``numpy.lib.format.write_array`` for the header bytes, ``np.load`` for the
whole file, zarr-python's ``z[...]`` for the data part.
"""

from __future__ import annotations

import contextlib
import io
import warnings

import numpy as np
import pytest
import trio
import zarr
from numpy.lib import format as npy_format

from zarrfs.core.arrays import ArrayState
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.formats.metadata.v2 import parse_array
from zarrfs.stores.directory import DirectoryStore
from zarrfs.views.npy import NpyView, npy_header

NESTED = np.dtype([("a", "<i4"), ("b", [("c", ">f8"), ("d", "<u2", (2,))])])
XYZ = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4", (2, 2))])
LATIN1 = np.dtype([("café", "<f4"), ("naïve", ">i2")])  # non-ASCII but latin-1: still 1.0
NON_LATIN1 = np.dtype([("温度", "<f4"), ("名前", ">i2"), ("plain", "u1")])
HUGE = np.dtype([(f"field_{i:05d}_with_a_rather_long_name", "<f4") for i in range(2500)])
HUGE_NON_LATIN1 = np.dtype([(f"字段_{i:05d}_很长很长的名字", "u1") for i in range(2500)])


class _HeaderOnly(io.RawIOBase):
    """A sink that keeps the first write (the NPY header) and refuses the data."""

    class Done(Exception):
        pass

    def __init__(self) -> None:
        self.header: bytes | None = None

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        if self.header is not None:
            raise self.Done
        self.header = bytes(data)
        return len(data)


def numpy_written_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """The header ``numpy.lib.format.write_array`` writes for a C-order array."""
    arr = np.broadcast_to(np.zeros((), dtype=dtype), shape)
    if arr.size and np.prod(shape) < 10**6:
        arr = np.array(arr, order="C")  # (ascontiguousarray would make 0-d 1-d)
    sink = _HeaderOnly()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "stored in format 2.0/3.0"
        with contextlib.suppress(_HeaderOnly.Done):
            npy_format.write_array(sink, arr)
    assert sink.header is not None
    return sink.header


HEADER_CASES = [
    ("<f8", (3, 4), (1, 0)),
    (">i4", (5,), (1, 0)),
    ("|b1", (), (1, 0)),
    ("<i8", (), (1, 0)),
    ("<c16", (0,), (1, 0)),
    ("<f4", (2, 0, 3), (1, 0)),
    ("<u2", (0, 0), (1, 0)),
    (">f2", (1, 1, 1, 1), (1, 0)),
    (">c8", (4, 1), (1, 0)),
    ("<M8[ns]", (6,), (1, 0)),
    (">M8[D]", (2, 2), (1, 0)),
    (">m8[s]", (3,), (1, 0)),
    ("|S5", (4,), (1, 0)),
    ("<U3", (2, 3), (1, 0)),
    (">U3", (2,), (1, 0)),
    ("|V7", (5,), (1, 0)),
    (NESTED, (3, 2), (1, 0)),
    (XYZ, (4,), (1, 0)),
    (NESTED, (), (1, 0)),
    ("<f8", (2**40, 3), (1, 0)),  # big shapes only widen the header text
    ("|u1", (10**15, 10**3), (1, 0)),
    (LATIN1, (3,), (1, 0)),
    (NON_LATIN1, (3,), (3, 0)),
    (NON_LATIN1, (), (3, 0)),
    (HUGE, (2,), (2, 0)),
    (HUGE_NON_LATIN1, (2,), (3, 0)),
]


def _case_id(value):
    if isinstance(value, np.dtype) and value.names and len(value.names) > 10:
        return f"struct{len(value.names)}"
    return str(value)


def _sample(dtype: np.dtype, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Arbitrary bytes (NaN payloads and all) viewed as ``dtype``."""
    n = int(np.prod(shape)) * dtype.itemsize
    raw = np.random.default_rng(seed).integers(0, 256, size=n, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


@pytest.mark.parametrize(("dtype", "shape", "version"), HEADER_CASES, ids=_case_id)
def test_npy_header_matches_numpy(dtype, shape, version):
    dtype = np.dtype(dtype)
    header = npy_header(dtype, shape)
    assert header[:6] == b"\x93NUMPY"
    assert (header[6], header[7]) == version
    assert len(header) % 64 == 0
    assert header.endswith(b"\n")
    assert header == numpy_written_header(dtype, shape)

    fp = io.BytesIO(header)
    assert npy_format.read_magic(fp) == version
    if version == (1, 0):
        assert npy_format.read_array_header_1_0(fp) == (tuple(shape), False, dtype)
        assert fp.tell() == len(header)
    elif version == (2, 0):
        read = npy_format.read_array_header_2_0(fp, max_header_size=2**24)
        assert read == (tuple(shape), False, dtype)
        assert fp.tell() == len(header)


@pytest.mark.parametrize(
    ("dtype", "shape", "version"),
    [c for c in HEADER_CASES if np.prod(c[1]) * np.dtype(c[0]).itemsize < 2**20],
    ids=_case_id,
)
def test_header_plus_data_loads(dtype, shape, version, tmp_path):
    dtype = np.dtype(dtype)
    arr = _sample(dtype, shape)
    data = npy_header(dtype, shape) + arr.tobytes()
    loaded = np.load(io.BytesIO(data), max_header_size=2**24)
    assert loaded.dtype == dtype
    assert loaded.shape == tuple(shape)
    assert loaded.tobytes() == arr.tobytes()
    if arr.size:
        path = tmp_path / "a.npy"
        path.write_bytes(data)
        mapped = np.load(path, mmap_mode="r", max_header_size=2**24)
        assert mapped.shape == tuple(shape)
        assert mapped.tobytes() == arr.tobytes()
        del mapped


def test_small_headers_load_without_options():
    # the common case needs no max_header_size: np.load(path) just works
    cases = [("<f8", (3, 4)), (NESTED, (2,)), (LATIN1, ()), (NON_LATIN1, (2,)), ("|b1", ())]
    for dtype, shape in cases:
        dtype = np.dtype(dtype)
        arr = _sample(dtype, shape, seed=1)
        loaded = np.load(io.BytesIO(npy_header(dtype, shape) + arr.tobytes()))
        assert loaded.tobytes() == arr.tobytes()


# ---------------------------------------------------------------- NpyView over a real store


def _write(root, name, data, chunks, fill, order="C", **kwargs) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        group = zarr.open_group(str(root), mode="a", zarr_format=2)
        arr = group.create_array(
            name,
            shape=data.shape,
            chunks=chunks,
            dtype=data.dtype,
            fill_value=fill,
            order=order,
            **kwargs,
        )
        return arr


def _view(root, name):
    meta = parse_array(name, (root / name / ".zarray").read_bytes(), None)
    cache = ChunkCache(DirectoryStore(str(root)), 1 << 22)
    return meta, NpyView(ArrayState(meta, {}, cache))


@pytest.fixture
def store(tmp_path):
    rng = np.random.default_rng(7)
    root = tmp_path / "s.zarr"
    # 2-D, big-endian, order F, overhanging edge chunks, two chunks left missing
    a = _write(root, "grid", np.zeros((7, 9), ">i4"), (3, 4), 42, order="F")
    data = rng.integers(-(2**31), 2**31, size=(7, 9)).astype(">i4")
    a[...] = data
    (root / "grid" / "1.1").unlink()
    (root / "grid" / "2.2").unlink()
    # structured dtype, partially written
    rgb = np.dtype([("r", "u1"), ("g", "u1"), ("b", "u1")])
    s = _write(root, "rgb", np.zeros((11,), rgb), (4,), None)
    s[2:7] = np.array([(i, 2 * i, 3 * i) for i in range(5)], dtype=rgb)
    # 0-d
    z = _write(root, "scalar", np.zeros((), "<f8"), (), np.nan)
    z[...] = 2.5
    # float with NaN fill, no chunk stored at all
    _write(root, "empty", np.zeros((5, 3), "<f4"), (2, 2), np.nan)
    # a zero-length axis
    _write(root, "nothing", np.zeros((0, 4), "<i2"), (2, 2), 1)
    return root


ARRAYS = ["grid", "rgb", "scalar", "empty", "nothing"]


def _oracle(root, name) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return zarr.open_array(str(root / name), mode="r")[...]


@pytest.mark.parametrize("name", ARRAYS)
def test_npy_view_reads_equal_slices_of_the_full_file(store, name):
    oracle = _oracle(store, name)
    meta, view = _view(store, name)
    header = npy_header(meta.dtype, meta.shape)
    full = header + oracle.tobytes()
    assert view.header == header
    assert view.size == len(full)
    hlen = len(header)
    rng = np.random.default_rng(3)
    ranges = [(0, len(full)), (0, 0), (len(full), 10), (len(full) + 5, 10), (0, 10**6)]
    ranges += [(hlen + d, n) for d in range(-6, 7) for n in (0, 1, 3, 6, 13, 400)]
    ranges += [(int(o), int(n)) for o, n in rng.integers(0, len(full) + 8, size=(60, 2))]

    async def run() -> list[bytes]:
        return [await view.read(offset, size) for offset, size in ranges if offset >= 0]

    got = trio.run(run)
    for (offset, size), data in zip([r for r in ranges if r[0] >= 0], got):
        assert data == full[offset : offset + size], (offset, size)


@pytest.mark.parametrize("name", ARRAYS)
def test_npy_view_whole_file_loads_equal_to_zarr(store, name, tmp_path):
    oracle = _oracle(store, name)
    _, view = _view(store, name)

    async def read_in_pieces(step: int) -> bytes:
        parts = []
        offset = 0
        while True:
            part = await view.read(offset, step)
            if not part:
                return b"".join(parts)
            parts.append(part)
            offset += len(part)

    for step in (1, 61, 4096):
        data = trio.run(read_in_pieces, step)
        assert len(data) == view.size
        loaded = np.load(io.BytesIO(data))
        assert loaded.dtype == oracle.dtype
        assert loaded.shape == oracle.shape
        assert loaded.tobytes() == oracle.tobytes()
    path = tmp_path / f"{name}.npy"
    path.write_bytes(data)
    if oracle.size:
        mapped = np.load(path, mmap_mode="r")
        assert mapped.tobytes() == oracle.tobytes()
        del mapped


def test_missing_chunks_show_fill_value_in_npy(store):
    _, view = _view(store, "grid")
    data = trio.run(view.read, 0, view.size)
    loaded = np.load(io.BytesIO(data))
    assert loaded.dtype == np.dtype(">i4")
    assert (loaded[3:6, 4:8] == 42).all()  # chunk 1.1 was deleted
    assert (loaded[6:7, 8:9] == 42).all()  # chunk 2.2 (edge) was deleted
    empty = np.load(io.BytesIO(trio.run(_view(store, "empty")[1].read, 0, 10**6)))
    assert np.isnan(empty).all() and empty.shape == (5, 3)
