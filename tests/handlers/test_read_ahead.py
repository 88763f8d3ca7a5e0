"""The read path's speed-ups stay correct: contiguous chunks, read-ahead, the worker pool."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import trio
import zarr
from hypothesis import given
from hypothesis import strategies as st

from tests.support.handlers import make_ops, open_raw
from tests.support.stores import CountingStore, zlib_array
from zarrfs.core.arrays import ArrayState
from zarrfs.core.pool import BACKGROUND, URGENT, WorkerPool
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.write.documents import Documents
from zarrfs.core.write.writeback import WriteBack
from zarrfs.daemon.mountinfo import mount_device
from zarrfs.formats.grid.layout import contiguous_chunk_nbytes, contiguous_runs
from zarrfs.formats.metadata.v2 import parse_array
from zarrfs.fuse.operations import STREAM_START, Operations
from zarrfs.namespace.tree import Tree

# -- pure layout ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "chunks", "order", "expected"),
    [
        ((100,), (10,), "C", 40),
        ((100,), (10,), "F", 40),  # one axis: F is C
        ((100, 8), (10, 8), "C", 320),
        ((100, 8), (10, 8), "F", None),  # F order inside a chunk: not a run
        ((100, 8), (10, 4), "C", None),  # chunk does not span the row
        ((5, 6, 7), (2, 6, 7), "C", 2 * 6 * 7 * 4),
        ((5, 6, 7), (2, 6, 3), "C", None),
        ((), (), "C", None),  # 0-d arrays take the general path
    ],
)
def test_contiguous_chunk_nbytes(shape, chunks, order, expected) -> None:
    assert contiguous_chunk_nbytes(shape, chunks, 4, order) == expected


@given(st.integers(1, 64), st.integers(0, 10_000), st.integers(0, 2_000))
def test_contiguous_runs_tile_the_range(chunk: int, offset: int, length: int) -> None:
    runs = contiguous_runs(chunk, offset, length)
    position = offset
    for number, start, stop in runs:
        assert 0 <= start < stop <= chunk
        assert number * chunk + start == position  # in order, no gap, no overlap
        position += stop - start
    assert position == offset + length


def test_mount_device_from_mountinfo() -> None:
    info = (
        "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
        "40 22 0:41 / /mnt/my\\040data rw - fuse.zarrfs zarrfs rw\n"
        "41 22 0:45 / /mnt/z rw - fuse.zarrfs zarrfs rw\n"
        "42 22 0:47 / /mnt/z rw - fuse.zarrfs zarrfs rw\n"  # mounted over: the newest
    )
    assert mount_device("/mnt/my data", info) == "0:41"
    assert mount_device("/mnt/z", info) == "0:47"
    assert mount_device("/mnt/other", info) is None


# -- the worker pool --------------------------------------------------------------------


def test_urgent_jobs_overtake_queued_background_jobs() -> None:
    pool = WorkerPool(1, "test-pool")
    release = threading.Event()
    ran: list[str] = []

    def job(name: str) -> str:
        if name == "first":
            release.wait(10)
        ran.append(name)
        return name

    async def main() -> list[str]:
        results: list[str] = []
        async with trio.open_nursery() as nursery:

            async def run(name: str, priority: int) -> None:
                results.append(await pool.run(job, name, priority=priority))

            nursery.start_soon(run, "first", URGENT)
            await trio.sleep(0.05)  # the only worker is now busy with "first"
            nursery.start_soon(run, "background", BACKGROUND)
            await trio.sleep(0.05)
            nursery.start_soon(run, "urgent", URGENT)
            await trio.sleep(0.05)
            release.set()
        return results

    results = trio.run(main)
    assert ran == ["first", "urgent", "background"]
    assert sorted(results) == sorted(ran)


def test_pool_delivers_exceptions() -> None:
    pool = WorkerPool(2, "test-pool")

    def fail() -> None:
        raise ValueError("boom")

    async def main() -> None:
        with pytest.raises(ValueError, match="boom"):
            await pool.run(fail)

    trio.run(main)


# -- read-ahead through the handlers ----------------------------------------------------

ROWS, COLUMNS, CHUNK_ROWS = 64, 256, 4  # 16 chunks of 4 KiB


def write_store(root: Path) -> np.ndarray:
    return zlib_array(root, ROWS, COLUMNS, CHUNK_ROWS)


async def settle(cache: ChunkCache) -> None:
    """Wait until no load is under way (read-ahead runs on after a read returns)."""
    for _ in range(500):
        if cache.loader.idle:
            return
        await trio.sleep(0.01)
    raise AssertionError("loads did not finish")


def test_sequential_reads_load_ahead_each_chunk_once(tmp_path: Path) -> None:
    data = write_store(tmp_path)
    ops, cache = make_ops(tmp_path)
    fh = open_raw(ops)
    request = 4096  # one chunk per request: read-ahead must run ahead of the reader

    async def main() -> bytes:
        out = b""
        for offset in range(0, data.nbytes, request):
            out += bytes(await ops.read(fh, offset, request))
        await settle(cache)
        return out

    assert trio.run(main) == data.tobytes()
    assert cache.counters.read_ahead_loads > 0, "a sequential reader got no read-ahead"
    assert cache.counters.chunks_loaded == ROWS // CHUNK_ROWS, "every chunk is loaded exactly once"
    assert not [k for k, n in ops.tree.store.gets.items() if n > 1 and k[0].isdigit()]


def test_random_reads_do_not_load_ahead(tmp_path: Path) -> None:
    write_store(tmp_path)
    ops, cache = make_ops(tmp_path)
    fh = open_raw(ops)

    async def main() -> None:
        for offset in (40960, 4096, 61440, 0, 20480):
            await ops.read(fh, offset, 4096)
        await settle(cache)

    trio.run(main)
    assert cache.counters.read_ahead_loads == 0
    assert cache.counters.chunks_loaded == 5


@pytest.mark.parametrize(("first", "ahead"), [(STREAM_START, True), (STREAM_START // 2, False)])
def test_a_large_first_read_from_the_start_begins_a_stream(
    tmp_path: Path, first: int, ahead: bool
) -> None:
    """dd's first 1 MiB overlaps the load of what follows it; a header probe (file(1),
    np.load reading its first bytes) loads nothing more until a read continues it."""
    data = zlib_array(tmp_path, 1024, COLUMNS, CHUNK_ROWS)  # 1 MiB, chunks of 4 KiB
    ops, cache = make_ops(tmp_path)
    fh = open_raw(ops)

    async def main() -> int:
        assert bytes(await ops.read(fh, 0, first)) == data.tobytes()[:first]
        await settle(cache)
        return cache.counters.read_ahead_loads

    assert (trio.run(main) > 0) == ahead
    assert cache.counters.chunks_loaded == first // 4096 + cache.counters.read_ahead_loads


def test_cached_and_prefetched_chunks_are_current_after_a_write(tmp_path: Path) -> None:
    data = write_store(tmp_path)
    ops, cache = make_ops(tmp_path)
    fh = open_raw(ops)
    expected = bytearray(data.tobytes())

    async def main() -> None:
        # Read the first chunks sequentially: they are cached, the next ones prefetched.
        for offset in range(0, 3 * 4096, 4096):
            await ops.read(fh, offset, 4096)
        await settle(cache)
        assert cache.counters.read_ahead_loads > 0
        # Overwrite a cached chunk in part and a prefetched one whole, then read both.
        for offset, length in ((1000, 300), (5 * 4096, 4096)):
            new = bytes(range(256)) * (length // 256) + bytes(length % 256)
            await ops.write(fh, offset, new)
            expected[offset : offset + length] = new
        assert bytes(await ops.read(fh, 0, len(expected))) == bytes(expected)
        # Stored and read back through the cache again: still the new bytes.
        await ops.fsync(fh, False)
        assert bytes(await ops.read(fh, 0, len(expected))) == bytes(expected)

    trio.run(main)
    np.testing.assert_array_equal(
        zarr.open_array(str(tmp_path))[...],
        np.frombuffer(bytes(expected), dtype="<f4").reshape(ROWS, COLUMNS),
    )


def test_a_load_overtaken_by_a_write_is_not_cached(tmp_path: Path) -> None:
    """A chunk written (and stored) while its read-ahead load runs: the load's old
    bytes must not land in the cache afterwards."""
    data = write_store(tmp_path)
    store = CountingStore(str(tmp_path))
    cache = ChunkCache(store, 1 << 24)
    cache.read_ahead = True
    writeback = WriteBack(store, cache, budget=1 << 30, interval=60)
    zarray = (tmp_path / ".zarray").read_bytes()
    state = ArrayState(
        parse_array("", zarray, None), Documents({".zarray": zarray}), cache, writeback
    )
    gate = threading.Event()
    load = cache.loader.load

    def slow_load(*args):
        old = load(*args)  # read from the store before the write...
        gate.wait(10)  # ...and delivered after it was stored
        return old

    cache.loader.load = slow_load  # type: ignore[method-assign]
    chunk = 4 * COLUMNS * 4
    new = np.full(4 * COLUMNS, 7.5, dtype="<f4").tobytes()

    async def main() -> bytes:
        assert cache.prefetch(state.meta, (2, 0))
        await trio.sleep(0.1)  # the load has read the old chunk and waits at the gate
        await state.write(2 * chunk, new)  # the whole chunk: no read needed
        await writeback.flush_array(state)
        gate.set()
        await settle(cache)
        return bytes(await state.read(2 * chunk, chunk))

    assert trio.run(main) == new
    cached, chunk = cache.ready("", (2, 0))
    assert cached and np.asarray(chunk).tobytes() == new
    assert np.frombuffer(new, dtype="<f4")[0] != data[8, 0]


# -- decode buffers recycled ------------------------------------------------------------


def blosc_store(root: Path, chunks: int = 24) -> np.ndarray:
    """1-D float64 array of ``chunks`` 4 KiB chunks, blosc (decoded into our buffers)."""
    data = np.random.default_rng(5).normal(size=chunks * 512)
    z = zarr.create_array(
        store=str(root),
        shape=data.shape,
        chunks=(512,),
        dtype="<f8",
        zarr_format=2,
        compressors=[{"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1}],
    )
    z[...] = data
    return data


def small_cache_state(root: Path, cache_chunks: int) -> tuple[ArrayState, ChunkCache]:
    store = CountingStore(str(root))
    cache = ChunkCache(store, cache_chunks * 4096)
    zarray = (root / ".zarray").read_bytes()
    return ArrayState(parse_array("", zarray, None), {".zarray": zarray}, cache), cache


def test_recycled_buffers_hold_the_right_chunks(tmp_path: Path) -> None:
    data = blosc_store(tmp_path)
    state, cache = small_cache_state(tmp_path, cache_chunks=3)
    order = [*range(24), *reversed(range(24)), *range(0, 24, 5)]

    async def main() -> None:
        for number in order:
            got = bytes(await state.read(number * 4096, 4096))
            assert got == data[number * 512 : (number + 1) * 512].tobytes(), number

    trio.run(main)
    assert cache.counters.buffers_recycled > 20, "evicted buffers were not reused"


def test_a_chunk_still_referenced_is_never_recycled(tmp_path: Path) -> None:
    data = blosc_store(tmp_path)
    state, cache = small_cache_state(tmp_path, cache_chunks=2)

    async def main() -> None:
        held = await state.read(0, 4096)  # a slice of chunk 0's buffer, kept
        assert isinstance(held, memoryview)
        whole = await cache.get(state.meta, (1,))  # the chunk array itself, kept
        for number in range(2, 24):  # evicts 0 and 1 many times over
            await state.read(number * 4096, 4096)
        assert bytes(held) == data[:512].tobytes()
        assert whole is not None and whole.tobytes() == data[512:1024].tobytes()

    trio.run(main)
    assert cache.counters.buffers_recycled > 0


def test_a_stream_gives_back_what_it_read_ahead(tmp_path: Path) -> None:
    data = blosc_store(tmp_path, chunks=64)
    store = CountingStore(str(tmp_path))
    cache = ChunkCache(store, 1 << 24)  # room for everything: only use-once frees
    cache.read_ahead = True
    tree = Tree(store, cache)
    ops = Operations(tree, cache.counters, read_only=True)
    fh = open_raw(ops)

    async def main() -> bytes:
        out = b""
        for offset in range(0, data.nbytes, 4096):
            out += bytes(await ops.read(fh, offset, 4096))
        await settle(cache)
        return out

    assert trio.run(main) == data.tobytes()
    assert cache.counters.read_ahead_loads > 32
    assert cache.counters.buffers_recycled > 32, "chunks the stream passed were not given back"
    # Left: the first chunks (read before the stream was known) and the last two.
    assert cache.nbytes <= 4 * 4096, "the stream's chunks stayed cached"


def test_a_chunk_passed_while_it_loads_ahead_is_not_kept(tmp_path: Path) -> None:
    """The stream went past a chunk whose read-ahead load was still running (the reader
    joined that load): when it finishes, the reader gets it, the cache does not."""
    blosc_store(tmp_path, chunks=4)
    state, cache = small_cache_state(tmp_path, 64)
    cache.read_ahead = True
    gate = threading.Event()
    load = cache.loader.load

    def slow_load(*args):
        gate.wait(10)
        return load(*args)

    cache.loader.load = slow_load  # type: ignore[method-assign]

    async def main() -> None:
        assert cache.prefetch(state.meta, (1,))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cache.get, state.meta, (1,))  # the reader waits for it
            await trio.sleep(0.05)
            cache.release(state.meta, (1,))  # ...and has moved past it
            gate.set()
        await settle(cache)

    trio.run(main)
    assert not cache.has("", (1,)), "a passed chunk stayed cached"
    assert cache.counters.chunks_loaded == 1
