"""Writes that could lose data or grow memory without bound, without a mount: each
test holds the write path to one such case.
"""

from __future__ import annotations

import io
import logging
import re
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import trio
import zarr

from tests.support.mounting import memory_cap
from zarrfs.core.arrays import ArrayState
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.write.documents import Documents
from zarrfs.core.write.writeback import WriteBack
from zarrfs.errors import InvalidArgumentError
from zarrfs.formats.metadata.v2 import parse_array
from zarrfs.stores.directory import DirectoryStore
from zarrfs.views.npy import NpyView
from zarrfs.views.raw import RawView


def open_array(root: Path, budget: int = 1 << 30) -> tuple[ArrayState, WriteBack]:
    store = DirectoryStore(str(root))
    cache = ChunkCache(store, 1 << 20)
    writeback = WriteBack(store, cache, budget=budget, interval=60)
    zarray = (root / ".zarray").read_bytes()
    state = ArrayState(
        parse_array("", zarray, None), Documents({".zarray": zarray}), cache, writeback
    )
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


def test_an_interrupted_np_save_leaves_the_array_as_it_was(tmp_path: Path) -> None:
    """``: > array.npy`` (O_TRUNC, then close without a header): the truncate was
    held for a header and is dropped, so the array and array.npy are unchanged, and
    rows appended to array.raw afterwards show in array.npy."""
    root = tmp_path / "a.zarr"
    data = f8_array(root)
    state, writeback = open_array(root)
    npy = NpyView(state)
    before = npy.size
    npy.open_truncated()
    assert npy.size == 0  # the writer sees an empty file
    npy.closed()  # closed without writing a header
    assert npy.size == before and state.meta.shape == data.shape

    async def go() -> None:
        await RawView(state).write(state.size, np.arange(5, dtype="<f8").tobytes())
        assert npy.size == before + 40
        body = await npy.read(0, npy.size)
        (tmp_path / "copy.npy").write_bytes(bytes(body))
        await writeback.flush_array(state)

    trio.run(go)
    assert np.load(tmp_path / "copy.npy").tolist() == [*data.tolist(), 0.0, 1.0, 2.0, 3.0, 4.0]


def _npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


REFUSED_SAVES = {
    "dtype": (np.zeros((1, 90, 180), "<f8"), "dtype <f8 is not the array's <i2"),
    "trailing shape": (np.zeros((1, 90, 181), "<i2"), "trailing shape (90, 181)"),
    "dimensions": (np.zeros((90, 180), "<i2"), "2 dimensions, the array has 3"),
    "byte order": (np.zeros((1, 90, 180), ">i2"), "dtype >i2 is not the array's <i2"),
}


@pytest.mark.parametrize("whole", [True, False], ids=["one-write", "header-then-data"])
@pytest.mark.parametrize("what", sorted(REFUSED_SAVES))
def test_a_refused_np_save_changes_nothing(
    tmp_path: Path, what: str, whole: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """np.save of another dtype or trailing shape onto array.npy (O_TRUNC, header,
    data): EINVAL with one log line naming the array and the reason; the data that
    follows is refused too; after close the array, its metadata and its chunks are
    as they were."""
    root = tmp_path / "tas"
    old = np.arange(3 * 90 * 180, dtype="<i2").reshape(3, 90, 180)
    z = zarr.create_array(
        store=str(root), shape=old.shape, chunks=(1, 45, 90), dtype="<i2", zarr_format=2
    )
    z[...] = old
    files_before = sorted(p.name for p in root.iterdir())
    state, writeback = open_array(root)
    npy = NpyView(state)
    bad, reason = REFUSED_SAVES[what]
    body = _npy_bytes(bad)
    header_length = len(body) - bad.nbytes

    async def go() -> None:
        npy.open_truncated()
        writes = [body] if whole else [body[:header_length], body[header_length:]]
        offset = 0
        with pytest.raises(InvalidArgumentError, match=re.escape(reason)):
            await npy.write(offset, writes[0])
        offset += len(writes[0])
        for more in writes[1:]:
            with pytest.raises(InvalidArgumentError):
                await npy.write(offset, more)
        npy.closed()
        await writeback.flush_all()

    with caplog.at_level(logging.WARNING):
        trio.run(go)
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and reason in lines[0] and "unchanged" in lines[0], lines
    assert state.meta.shape == old.shape
    assert npy.size == len(npy.header) + old.nbytes
    assert sorted(p.name for p in root.iterdir()) == files_before
    assert np.array_equal(zarr.open_array(str(root), mode="r")[...], old)


def test_a_matching_np_save_after_a_held_truncate_replaces_the_array(tmp_path: Path) -> None:
    """The held truncate is applied when the header matches: rows beyond the new
    data read as fill value, never the old bytes."""
    root = tmp_path / "a.zarr"
    f8_array(root)
    state, writeback = open_array(root)
    npy = NpyView(state)
    new = np.arange(100, 110, dtype="<f8")
    body = _npy_bytes(new)
    header_length = len(body) - new.nbytes

    async def go() -> bytes:
        npy.open_truncated()
        await npy.write(0, body[:header_length])
        assert state.meta.shape == (10,)
        got = await npy.read(0, npy.size)
        await npy.write(header_length, body[header_length:])
        npy.closed()
        await writeback.flush_array(state)
        return bytes(got)

    unwritten = trio.run(go)
    fill = np.frombuffer(unwritten[header_length:], "<f8")
    assert np.all(fill == 0.0)  # the old array held 0..9 here: never shown
    assert np.array_equal(zarr.open_array(str(root), mode="r")[...], new)


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
    assert npy.pending_header is None
    assert npy.size == len(npy.header) + 16
