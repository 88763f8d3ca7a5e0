"""Writes that once lost data or grew memory without bound, without a mount.

Each test here failed on the code before its fix (issue 10, items B.1, D.1, D.4, E.3).
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import trio
import zarr

from tests.mounting import memory_cap
from zarrfs.core.arrays import ArrayState
from zarrfs.core.chunks import ChunkCache
from zarrfs.core.writeback import WriteBack
from zarrfs.errors import InvalidArgumentError
from zarrfs.formats.v2 import parse_array
from zarrfs.stores.directory import DirectoryStore
from zarrfs.views.npy import NpyView
from zarrfs.views.raw import RawView


def open_array(root: Path, budget: int = 1 << 30) -> tuple[ArrayState, WriteBack]:
    store = DirectoryStore(str(root))
    cache = ChunkCache(store, 1 << 20)
    writeback = WriteBack(store, cache, budget=budget, interval=60)
    zarray = (root / ".zarray").read_bytes()
    state = ArrayState(parse_array("", zarray, None), {".zarray": zarray}, cache, writeback)
    return state, writeback


def f8_array(root: Path, n: int = 64, chunk: int = 8) -> np.ndarray:
    data = np.arange(n, dtype="<f8")
    z = zarr.create_array(
        store=str(root),
        shape=(n,),
        chunks=(chunk,),
        dtype="<f8",
        zarr_format=2,
        compressors=[{"id": "zlib", "level": 1}],
    )
    z[...] = data
    return data


@pytest.mark.parametrize("raw_first", [True, False])
@pytest.mark.parametrize("element", [3, 7, 12])
def test_raw_and_npy_writers_of_one_element_both_land(
    tmp_path: Path, raw_first: bool, element: int
) -> None:
    """Two writers of disjoint bytes of one element, through the two files, on a
    chunk not yet cached: both land (the partial-element path once wrote back a
    stale copy of the element it had read before an await)."""
    root = tmp_path / "a.zarr"
    data = f8_array(root)
    state, writeback = open_array(root)
    raw, npy = RawView(state), NpyView(state)
    offset = element * 8
    header = len(npy.header)

    async def both() -> None:
        async with trio.open_nursery() as nursery:
            writers = [
                lambda: raw.write(offset + 1, b"\xaa" * 8),
                lambda: npy.write(header + offset, b"\xbb"),
            ]
            for writer in writers if raw_first else writers[::-1]:
                nursery.start_soon(writer)
        await writeback.flush_array(state)

    trio.run(both)
    expected = bytearray(data.tobytes())
    expected[offset + 1 : offset + 9] = b"\xaa" * 8
    expected[offset] = 0xBB
    got = zarr.open_array(str(root), mode="r")[...].tobytes()
    assert got == bytes(expected)


@pytest.mark.parametrize("through", ["raw", "npy"])
def test_a_write_far_past_the_end_costs_no_memory(tmp_path: Path, through: str) -> None:
    """One byte 12 GiB past the end of a 1 KiB array: the gap reads as fill value and
    costs nothing (it was materialised as fill bytes and dirty chunks: 24 GB RSS)."""
    root = tmp_path / "a.zarr"
    zarr.create_array(
        store=str(root), shape=(1024,), chunks=(256,), dtype="u1", zarr_format=2, fill_value=3
    )
    state, writeback = open_array(root, budget=64 << 20)
    gap = 12 << 30

    async def go() -> None:
        tracemalloc.start()
        if through == "raw":
            await RawView(state).write(gap, b"\x07")
        else:
            npy = NpyView(state)
            await npy.write(len(npy.header) + gap, b"\x07")
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 16 << 20, peak
        assert state.size == gap + 1
        assert await state.read(gap - 2, 3) == b"\x03\x03\x07"
        assert await state.read(5 << 30, 4) == b"\x03" * 4
        tracemalloc.start()
        await writeback.flush_array(state)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 16 << 20, peak

    with memory_cap():
        trio.run(go)
    z = zarr.open_array(str(root), mode="r")
    assert z.shape == (gap + 1,)
    assert z[gap] == 7 and z[gap - 1] == 3 and z[1000] == 3
    stored = sorted(p.name for p in root.iterdir() if not p.name.startswith("."))
    assert len(stored) <= 5, stored  # the old chunks and the last one: no fill chunks


def test_a_write_far_past_the_end_of_a_wide_array_costs_no_memory(tmp_path: Path) -> None:
    """Rows of 4 KiB: the gap is whole rows of fill plus part of the last row."""
    root = tmp_path / "a.zarr"
    zarr.create_array(store=str(root), shape=(2, 1024), chunks=(1, 512), dtype="<i4", zarr_format=2)
    state, writeback = open_array(root, budget=64 << 20)
    row = 4096
    offset = (2 << 30) + 10 * 4

    async def go() -> None:
        tracemalloc.start()
        await state.write(offset, b"\x01\x00\x00\x00")
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 16 << 20, peak
        assert state.meta.shape[0] == offset // row
        assert len(state.tail) == offset % row + 4
        await state.write(offset + 4, bytes(row - len(state.tail)))
        assert not state.tail
        await writeback.flush_array(state)

    with memory_cap():
        trio.run(go)
    z = zarr.open_array(str(root), mode="r")
    assert z.shape == (offset // row + 1, 1024)
    assert z[-1, 10] == 1 and z[-1, 9] == 0 and z[-2, 10] == 0


def test_npy_write_far_past_a_pending_header_is_einval_at_once(tmp_path: Path) -> None:
    """After O_TRUNC, a write 3 GiB into the file before any header: EINVAL without
    zero-filling the header buffer up to the offset (6.3 GB and 11.6 s before)."""
    root = tmp_path / "a.zarr"
    f8_array(root)
    state, _ = open_array(root)
    npy = NpyView(state)
    npy.truncate(0)

    async def go() -> None:
        tracemalloc.start()
        with pytest.raises(InvalidArgumentError):
            await npy.write(3 << 30, b"x")
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 1 << 20, peak

    with memory_cap():
        trio.run(go)


def test_an_interrupted_np_save_leaves_a_loadable_npy_after_raw_appends(tmp_path: Path) -> None:
    """``: > array.npy`` then rows appended to array.raw: array.npy shows those rows
    (it stayed an empty file, and np.load raised EOFError, until remount)."""
    root = tmp_path / "a.zarr"
    f8_array(root)
    state, writeback = open_array(root)
    npy = NpyView(state)
    npy.truncate(0)
    npy.closed()  # the handle that truncated is closed without writing a header
    assert npy.size == len(npy.header)

    async def go() -> None:
        await RawView(state).write(0, np.arange(5, dtype="<f8").tobytes())
        assert npy.size == len(npy.header) + 40
        body = await npy.read(0, npy.size)
        (tmp_path / "copy.npy").write_bytes(bytes(body))
        await writeback.flush_array(state)

    trio.run(go)
    assert np.load(tmp_path / "copy.npy").tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_a_raw_write_drops_a_pending_npy_header(tmp_path: Path) -> None:
    root = tmp_path / "a.zarr"
    f8_array(root)
    state, _ = open_array(root)
    npy = NpyView(state)
    npy.truncate(0)

    async def go() -> None:
        await npy.write(0, b"\x93NUM")  # the start of a header, then a raw append
        await RawView(state).write(0, np.arange(2, dtype="<f8").tobytes())

    trio.run(go)
    assert state.npy_header_pending is None
    assert npy.size == len(npy.header) + 16
