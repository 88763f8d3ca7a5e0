"""ArrayState and WriteBack without a mount: random writes and resizes against a model."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import trio
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.stores import CountingStore
from zarrfs.core.arrays import ArrayState
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.write.documents import Documents
from zarrfs.core.write.writeback import WriteBack
from zarrfs.errors import FileTooLargeError, InvalidArgumentError
from zarrfs.formats.metadata.v2 import parse_array


def make_array(
    root: Path, shape: tuple[int, ...], chunks: tuple[int, ...], dtype: str, order: str, fill
) -> tuple[ArrayState, WriteBack, CountingStore, np.ndarray]:
    rng = np.random.default_rng(1)
    z = zarr.create_array(
        store=str(root),
        shape=shape,
        chunks=chunks,
        dtype=dtype,
        zarr_format=2,
        order=order,
        fill_value=fill,
        compressors=[{"id": "zlib", "level": 1}],
    )
    data = (rng.integers(0, 100, size=shape)).astype(dtype)
    z[...] = data
    store = CountingStore(str(root))
    cache = ChunkCache(store, 1 << 20)
    writeback = WriteBack(store, cache, budget=1 << 30, interval=60)
    zarray = (root / ".zarray").read_bytes()
    meta = parse_array("", zarray, None)
    state = ArrayState(meta, Documents({".zarray": zarray}), cache, writeback)
    return state, writeback, store, np.ascontiguousarray(data)


OPS = st.lists(
    st.tuples(
        st.sampled_from(["write", "write", "write", "truncate", "append", "flush"]),
        st.integers(0, 10**6),
        st.integers(0, 300),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=30, deadline=None)
@given(ops=OPS, order=st.sampled_from("CF"), dtype=st.sampled_from(["<i2", ">f4", "u1"]))
def test_random_writes_match_a_model(
    tmp_path_factory: pytest.TempPathFactory, ops: list, order: str, dtype: str
) -> None:
    root = tmp_path_factory.mktemp("a") / "arr.zarr"
    state, writeback, _, data = make_array(root, (13, 7), (4, 3), dtype, order, 5)
    itemsize = np.dtype(dtype).itemsize
    row = 7 * itemsize
    fill = np.array(5, dtype=dtype).tobytes()
    model = bytearray(data.tobytes())

    async def run() -> None:
        for op, a, b in ops:
            if op == "write":
                offset = a % (len(model) + 1)
                chunk = bytes(random.Random(a).randrange(256) for _ in range(b))
                await state.write(offset, chunk)
                end = offset + len(chunk)
                if end > len(model):
                    model.extend(bytes(end - len(model)))
                model[offset:end] = chunk
                if len(model) % row:  # keep whole rows: complete the row as the model would
                    pad = bytes(row - len(model) % row)
                    await state.write(len(model), pad)
                    model.extend(pad)
            elif op == "truncate":
                rows = a % 20
                state.truncate(rows * row)
                if rows * row < len(model):
                    del model[rows * row :]
                else:
                    model.extend(fill * ((rows * row - len(model)) // itemsize))
            elif op == "append":
                rows = b % 3
                extra = bytes(random.Random(b).randrange(256) for _ in range(rows * row))
                await state.write(len(model), extra)
                model.extend(extra)
            else:
                await writeback.flush_array(state)
            assert state.size == len(model)
            assert await state.read(0, len(model) + 10) == bytes(model)
        await writeback.flush_array(state)

    trio.run(run)
    shape = json.loads((root / ".zarray").read_text())["shape"]
    assert shape == [len(model) // row, 7]
    z = zarr.open_array(str(root), mode="r", zarr_format=2)
    assert np.ascontiguousarray(z[...]).tobytes() == bytes(model)
    assert not state.dirty and writeback.dirty_bytes == 0


def test_whole_chunk_writes_never_read_the_store(tmp_path: Path) -> None:
    state, writeback, store, _ = make_array(tmp_path / "a", (8, 6), (4, 6), "<i4", "C", 0)
    chunk_bytes = 4 * 6 * 4
    new = np.arange(8 * 6, dtype="<i4").tobytes()

    async def run() -> None:
        for start in range(0, len(new), 12):  # small pieces across chunk boundaries
            await state.write(start, new[start : start + 12])
        await writeback.flush_array(state)

    trio.run(run)
    assert not [k for k in store.gets if k in ("0.0", "1.0")], store.gets
    z = zarr.open_array(str(tmp_path / "a"), mode="r", zarr_format=2)
    assert z[...].tobytes() == new
    assert chunk_bytes == 96


def test_fill_chunks_are_deleted_bitwise(tmp_path: Path) -> None:
    state, writeback, _, _ = make_array(tmp_path / "a", (4,), (2,), "<f4", "C", 0.0)

    async def run() -> None:
        await state.write(0, np.zeros(2, "<f4").tobytes())
        await state.write(8, np.array([-0.0, 0.0], "<f4").tobytes())
        await writeback.flush_array(state)

    trio.run(run)
    assert not (tmp_path / "a" / "0").exists()
    assert (tmp_path / "a" / "1").exists()  # -0.0 is not the fill value 0.0


def test_truncate_to_a_partial_row_is_einval(tmp_path: Path) -> None:
    state, _, _, _ = make_array(tmp_path / "a", (4, 3), (2, 2), "<i2", "C", 0)
    with pytest.raises(InvalidArgumentError):
        state.truncate(7)
    assert state.size == 4 * 3 * 2


def test_pending_partial_row_fails_the_flush(tmp_path: Path) -> None:
    state, writeback, _, _ = make_array(tmp_path / "a", (2, 3), (2, 2), "<i2", "C", 0)

    async def run() -> None:
        await state.write(12, b"\x01\x02\x03")
        assert state.size == 15
        with pytest.raises(InvalidArgumentError):
            await writeback.flush_array(state)
        await state.write(15, b"\x04\x05\x06")
        await writeback.flush_array(state)

    trio.run(run)
    assert json.loads((tmp_path / "a" / ".zarray").read_text())["shape"] == [3, 3]


def test_zero_d_arrays_keep_their_size(tmp_path: Path) -> None:
    state, writeback, _, _ = make_array(tmp_path / "a", (), (), "<f8", "C", 0.0)

    async def run() -> None:
        await state.write(0, np.float64(2.5).tobytes())
        with pytest.raises(FileTooLargeError):
            await state.write(4, bytes(8))
        await writeback.flush_array(state)

    trio.run(run)
    with pytest.raises(InvalidArgumentError):
        state.truncate(0)
    state.truncate(8)
    assert zarr.open_array(str(tmp_path / "a"), mode="r", zarr_format=2)[()] == 2.5


@pytest.mark.parametrize("seed", range(8))
def test_seeded_resize_and_flush_sequences(tmp_path: Path, seed: int) -> None:
    """Shrinks, regrows, appends and flushes interleaved (found the stale-mark bug)."""
    rng = random.Random(seed)
    shape, row = (30, 7), 28
    state, writeback, _, data = make_array(tmp_path / "a", shape, (3, 4), "<f4", "C", -1.5)
    fill = np.array(-1.5, "<f4").tobytes()
    model = bytearray(data.tobytes())

    async def run() -> None:
        for step in range(250):
            op = rng.choice(["write", "write", "truncate", "flush", "append"])
            if op == "write":
                offset, size = rng.randrange(len(model) + 1), rng.randrange(1, 120)
                if offset + size > len(model):  # end on a row boundary
                    size = -(-(offset + size) // row) * row - offset
                payload = rng.randbytes(size)
                await state.write(offset, payload)
                if offset > len(model):
                    model.extend((fill * row)[: offset - len(model)])
                model.extend(bytes(max(0, offset + size - len(model))))
                model[offset : offset + size] = payload
            elif op == "truncate":
                rows = rng.randrange(0, 40)
                state.truncate(rows * row)
                del model[rows * row :]
                model.extend(fill * ((rows * row - len(model)) // 4))
            elif op == "append":
                payload = rng.randbytes(row * rng.randrange(1, 3))
                await state.write(len(model), payload)
                model.extend(payload)
            else:
                await writeback.flush_array(state)
            got = await state.read(0, len(model))
            assert got == bytes(model), f"seed {seed}, step {step} ({op})"
        await writeback.flush_array(state)

    trio.run(run)
    z = zarr.open_array(str(tmp_path / "a"), mode="r", zarr_format=2)
    assert np.ascontiguousarray(z[...]).tobytes() == bytes(model)
