"""An array's bytes big-endian (core/read/twinreads.py, core/read/byteorder.py): the
decoders turn the chunks round, the cache keeps them under the twin's path, and
every change the cache is told of for the array reaches the twin."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import trio
import zarr

from zarrfs.core.arrays import ArrayState
from zarrfs.core.read.byteorder import big_endian, twin_path
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.read.lru import ChunkKey
from zarrfs.formats.metadata.v2 import parse_array
from zarrfs.formats.metadata.v3 import parse_node
from zarrfs.formats.model import ArrayMeta
from zarrfs.stores.directory import DirectoryStore

BLOSC = {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1}

LAYOUTS = {  # name → (shape, chunks, shards: None for v2)
    "rows": ((40, 30), (8, 30), None),
    "tiles": ((40, 30), (8, 7), None),
    "shards": ((40, 30), (4, 5), (8, 15)),
}


def make(root: Path, layout: str, dtype: str = "<f4") -> np.ndarray:
    shape, chunks, shards = LAYOUTS[layout]
    data = (np.arange(np.prod(shape)) * 1.5 - 7).astype(dtype).reshape(shape)
    if shards is None:
        z = zarr.create_array(
            str(root), shape=shape, chunks=chunks, dtype=dtype, zarr_format=2,
            compressors=[BLOSC], fill_value=-2,
        )  # fmt: skip
    else:
        z = zarr.create_array(
            str(root), shape=shape, chunks=chunks, shards=shards, dtype=dtype, fill_value=-2
        )
    z[...] = data
    return data


def state_of(root: Path, read_ahead: bool = True) -> tuple[ArrayState, ChunkCache]:
    cache = ChunkCache(DirectoryStore(str(root)), 1 << 24)
    cache.read_ahead = read_ahead
    if (root / "zarr.json").exists():
        meta = parse_node("", (root / "zarr.json").read_bytes())
    else:
        meta = parse_array("", (root / ".zarray").read_bytes(), None)
    assert isinstance(meta, ArrayMeta)
    return ArrayState(meta, {}, cache), cache


def big(values: np.ndarray) -> bytes:
    return values.astype(values.dtype.newbyteorder(">")).tobytes()


async def stream(state: ArrayState, step: int = 1000) -> bytes:
    """The twin read as a sequential reader reads, read-ahead on."""
    out = bytearray()
    size = state.meta.nbytes
    while len(out) < size:
        state.big_endian.prefetch(len(out))
        out += await state.big_endian.read(len(out), min(step, size - len(out)))
        await trio.sleep(0.01)  # read-ahead and stripes made meanwhile
    return bytes(out)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("read_ahead", [True, False])
def test_every_layout_reads_big_endian(tmp_path: Path, layout: str, read_ahead: bool) -> None:
    data = make(tmp_path, layout)
    state, _ = state_of(tmp_path, read_ahead)
    assert trio.run(stream, state) == big(data)

    async def random_reads() -> None:
        rng = np.random.default_rng(1)
        whole = big(data)
        for _ in range(100):
            offset = int(rng.integers(0, len(whole)))
            length = int(rng.integers(1, 900))
            got = await state.big_endian.read(offset, length)
            expected = whole[offset : offset + length]
            assert bytes(got) == expected + bytes(length - len(expected)), (offset, length)

    trio.run(random_reads)


def test_the_decoders_turn_the_chunks_the_array_is_not_decoded(tmp_path: Path) -> None:
    data = make(tmp_path, "rows")
    state, cache = state_of(tmp_path)
    assert trio.run(stream, state, 8 * 30 * 4) == big(data)
    # (a stream's chunks make room once passed: the last ones are still cached)
    keys = cache.lru.keys_of(twin_path(""), ChunkKey)
    assert keys and all(cache.lru.peek(k)[1].dtype == ">f4" for k in keys)
    assert not cache.lru.keys_of("", ChunkKey)
    assert cache.counters.chunks_decoded == 5  # each chunk once, turned as it was decoded


def test_a_written_chunk_is_read_turned(tmp_path: Path) -> None:
    """A dirty chunk (not stored yet) is the array's as its reads see it, turned."""
    data = make(tmp_path, "tiles")
    state, _ = state_of(tmp_path)

    async def write_then_read() -> bytes:
        before = await stream(state)
        assert before == big(data)
        await state.write(0, np.full(30, 5.5, "<f4").tobytes())  # row 0 of every tile
        return await stream(state)

    after = trio.run(write_then_read)
    data[0] = 5.5
    assert after == big(data)


def test_what_write_back_tells_the_cache_reaches_the_twin(tmp_path: Path) -> None:
    """A chunk stored by write-back (``put``), and an array invalidated: the twin
    reads what the store holds, not the chunks it had cached."""
    data = make(tmp_path, "rows")
    state, cache = state_of(tmp_path)
    z = zarr.open_array(str(tmp_path), mode="r+")

    async def check() -> None:
        assert await stream(state) == big(data)
        z[:8] = 100
        data[:8] = 100
        cache.put("", (0, 0), data[:8].copy())
        assert await stream(state) == big(data)
        z[8:16] = 200
        data[8:16] = 200
        cache.invalidate("")
        assert await stream(state) == big(data)

    trio.run(check)


def test_a_shard_replaced_by_write_back_reaches_the_twin(tmp_path: Path) -> None:
    """Write-back's shard replace, as it tells the cache: the twin reads the new
    shard by its new index, not its inner chunks at the old offsets."""
    data = make(tmp_path, "shards")
    state, cache = state_of(tmp_path)
    z = zarr.open_array(str(tmp_path), mode="r+")
    new = np.random.default_rng(2).standard_normal((8, 15)).astype("<f4")  # other sizes

    async def check() -> None:
        assert await stream(state) == big(data)
        cache.begin_replace(state.meta, (0, 0))
        z[:8, :15] = new
        data[:8, :15] = new
        for index in [(i, j) for i in range(2) for j in range(3)]:  # the shard's chunks
            cache.forget("", index)
        cache.end_replace("", (0, 0), object())  # its index: read again when needed
        assert await stream(state) == big(data)

    trio.run(check)


def test_a_resize_is_followed(tmp_path: Path) -> None:
    data = make(tmp_path, "tiles")
    state, _ = state_of(tmp_path)

    async def check() -> None:
        assert await stream(state) == big(data)
        state.resize(43)
        grown = np.concatenate([data, np.full((3, 30), -2, "<f4")])
        assert await stream(state) == big(grown)
        state.resize(5)
        assert await stream(state) == big(data[:5])
        # A reader that asks past the end (it looked before the shrink) reads zeros.
        assert await state.big_endian.read(5 * 30 * 4 - 4, 12) == big(data[4, -1:]) + bytes(8)

    trio.run(check)


def test_the_twins_metadata() -> None:
    meta = parse_array("g/a", DOC, None)
    twin = big_endian(meta)
    assert twin.dtype == np.dtype(">f4") and twin.path == twin_path("g/a") != "g/a"
    assert twin.display_name == meta.display_name == "g/a"
    assert twin.fill_value == np.array(-2.5, ">f4").tobytes()


DOC = json.dumps(
    {
        "zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<f4", "fill_value": -2.5,
        "order": "C", "compressor": None, "filters": None,
    }
).encode()  # fmt: skip
