"""Stripes: runs of array.raw assembled by workers from a row of chunks.

Pure geometry first (stripes tile the array, need exactly their row of chunks),
then assembly against numpy, then the read path through the handlers: streams
use stripes and load each chunk once, random reads do not, writes (before,
during and after an assembly) are seen, a corrupt chunk fails its stripe only,
and a cache too small for a row of chunks reads as before. A real mount reads stripes in
tests/mount/reads/test_stripes_mount.py.
"""

from __future__ import annotations

import copy
import errno
import gc
import json
import math
import threading
from pathlib import Path

import numpy as np
import pytest
import trio
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.handlers import make_ops, open_raw
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.read.reading import assemble
from zarrfs.core.read.stripes import _Assembly
from zarrfs.errors import ChunkError, InvalidValueError, MetadataError, StoreError
from zarrfs.formats.grid.layout import grid_shape, plan_range
from zarrfs.formats.grid.stripes import stripe_layout
from zarrfs.formats.metadata.v2 import parse_array
from zarrfs.formats.model import ArrayMeta
from zarrfs.fuse.operations import Operations

# -- geometry ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "chunks", "itemsize", "cap", "depth", "rows"),
    [
        ((1000, 3000), (128, 512), 4, 4 << 20, 0, 128),  # a row of tiles fits
        ((1000, 3000), (128, 512), 4, 24000, 0, 2),  # it does not: 2 rows a stripe
        ((1000, 3000), (128, 512), 4, 11999, 1, 512),  # one row is over the cap
        ((10, 20, 30), (3, 4, 5), 8, 10**6, 0, 3),
        ((10, 20, 30), (3, 4, 5), 8, 1000, 1, 4),  # one plane is over: rows of it
        ((7,), (3,), 2, 100, 0, 3),
        ((7,), (3,), 2, 5, 0, 2),
    ],
)
def test_stripe_layout(shape, chunks, itemsize, cap, depth, rows) -> None:
    layout = stripe_layout(shape, chunks, itemsize, cap)
    assert layout is not None
    assert (layout.depth, layout.rows) == (depth, rows)
    assert layout.max_stripe_nbytes <= cap


@pytest.mark.parametrize(
    ("shape", "itemsize", "cap"),
    [((), 4, 100), ((0, 5), 4, 100), ((5, 0), 4, 100), ((3,), 16, 8)],
)
def test_no_stripes(shape, itemsize, cap) -> None:
    assert stripe_layout(shape, tuple(max(1, s) for s in shape), itemsize, cap) is None


@st.composite
def arrays(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], int, int]:
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=ndim, max_size=ndim)))
    chunks = tuple(draw(st.integers(1, s + 2)) for s in shape)
    itemsize = draw(st.sampled_from([1, 2, 4, 8, 3]))
    cap = draw(st.integers(itemsize, 4 * math.prod(shape) * itemsize))
    return shape, chunks, itemsize, cap


@given(arrays())
@settings(max_examples=300, deadline=None)
def test_stripes_tile_the_array_and_need_their_row_of_chunks(array) -> None:
    shape, chunks, itemsize, cap = array
    layout = stripe_layout(shape, chunks, itemsize, cap)
    assert layout is not None
    position, total = 0, math.prod(shape) * itemsize
    while position < total:
        stripe = layout.stripe_at(position)
        assert stripe.start == position, "stripes follow one another with no gap"
        assert 0 < stripe.nbytes <= layout.max_stripe_nbytes <= max(cap, itemsize)
        assert stripe.nbytes % itemsize == 0
        # every offset inside names the same stripe
        assert layout.stripe_at(stripe.stop - 1) == stripe
        assert layout.stripe_at((stripe.start + stripe.stop) // 2) == stripe
        plan = plan_range(shape, chunks, itemsize, stripe.start, stripe.nbytes)
        needed = layout.chunk_indices(stripe)
        assert set(plan.chunks) == set(needed)
        assert all(layout.holds(stripe, index) for index in needed)
        grid = grid_shape(shape, chunks)
        others = [i for i in np.ndindex(*grid) if tuple(i) not in set(needed)]
        assert not any(layout.holds(stripe, tuple(i)) for i in others)
        position = stripe.stop
    assert position == total


@st.composite
def chunked(draw: st.DrawFn) -> tuple[np.ndarray, tuple[int, ...], str, int]:
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 7), min_size=ndim, max_size=ndim)))
    chunks = tuple(draw(st.integers(1, s + 1)) for s in shape)
    dtype = np.dtype(draw(st.sampled_from(["u1", "<i2", ">i4", "<f8", "c8", "V3"])))
    order = draw(st.sampled_from("CF"))
    raw = draw(
        st.binary(
            min_size=math.prod(shape) * dtype.itemsize, max_size=math.prod(shape) * dtype.itemsize
        )
    )
    data = np.frombuffer(raw, dtype=dtype).reshape(shape)
    cap = draw(st.integers(dtype.itemsize, 2 * max(1, data.nbytes)))
    return data, chunks, order, cap


def _meta(data: np.ndarray, chunks: tuple[int, ...], order: str) -> ArrayMeta:
    document = {
        "zarr_format": 2,
        "shape": list(data.shape),
        "chunks": list(chunks),
        "dtype": data.dtype.str if data.dtype.kind != "V" else f"|V{data.dtype.itemsize}",
        "compressor": None,
        "fill_value": None,
        "order": order,
        "filters": None,
    }
    return parse_array("a", json.dumps(document).encode(), None)


@given(chunked(), st.data())
@settings(max_examples=200, deadline=None)
def test_stripe_assembly_matches_numpy(case, draw) -> None:
    data, chunks, order, cap = case
    meta = _meta(data, chunks, order)
    layout = stripe_layout(data.shape, chunks, data.dtype.itemsize, cap)
    assert layout is not None
    grid = grid_shape(data.shape, chunks)
    void = np.dtype((np.void, data.dtype.itemsize))
    expected = data.copy().view(void)
    fill = np.frombuffer(meta.fill_bytes, dtype=void)[0]
    stored: dict[tuple[int, ...], np.ndarray | None] = {}
    for index in np.ndindex(*grid):
        region = tuple(
            slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(index, chunks, data.shape)
        )
        if draw.draw(st.booleans(), label="missing"):
            stored[tuple(index)] = None  # not stored: fill value
            expected[region] = fill
            continue
        padded = np.zeros(chunks, dtype=data.dtype, order=order)
        padded[tuple(slice(0, r.stop - r.start) for r in region)] = data[region]
        stored[tuple(index)] = padded
    flat = expected.tobytes(order="C")
    position = 0
    while position < len(flat):
        stripe = layout.stripe_at(position)
        plan = plan_range(data.shape, chunks, data.dtype.itemsize, stripe.start, stripe.nbytes)
        out = np.empty(stripe.nbytes, dtype=np.uint8)
        view = assemble(meta, plan, {i: stored[i] for i in plan.chunks}, out)
        assert bytes(view) == flat[stripe.start : stripe.stop]
        assert np.shares_memory(np.frombuffer(view, np.uint8), out), "assembled in place"
        position = stripe.stop


# -- through the handlers -------------------------------------------------------------------

ROWS, COLUMNS, TILE_ROWS, TILE_COLUMNS = 64, 96, 8, 32  # 8 x 3 tiles of 1 KiB


def tiled_store(root: Path, *, compressor: dict | None = None) -> np.ndarray:
    data = np.arange(ROWS * COLUMNS, dtype="<f4").reshape(ROWS, COLUMNS)
    z = zarr.create_array(
        store=str(root),
        shape=data.shape,
        chunks=(TILE_ROWS, TILE_COLUMNS),
        dtype="<f4",
        zarr_format=2,
        compressors=[compressor or {"id": "zlib", "level": 1}],
    )
    z[...] = data
    return data


async def settle(cache: ChunkCache) -> None:
    for _ in range(500):
        if cache.loader.idle and cache.stripes.idle:
            return
        await trio.sleep(0.01)
    raise AssertionError("loads did not finish")


async def stream(ops: Operations, fh: int, size: int, request: int = 1024) -> bytes:
    out = b""
    for offset in range(0, size, request):
        out += bytes(await ops.read(fh, offset, request))
    return out


def read_through(ops: Operations, cache: ChunkCache, size: int, request: int = 1024) -> bytes:
    """A stream of ``size`` bytes from a fresh handle, then every load settled."""
    fh = open_raw(ops)

    async def main() -> bytes:
        out = await stream(ops, fh, size, request)
        await settle(cache)
        return out

    return trio.run(main)


def test_a_stream_reads_tiles_through_stripes_loading_each_chunk_once(tmp_path: Path) -> None:
    data = tiled_store(tmp_path)
    ops, cache = make_ops(tmp_path)
    assert read_through(ops, cache, data.nbytes) == data.tobytes()
    rows_of_tiles = ROWS // TILE_ROWS
    assert cache.counters.stripes_assembled >= rows_of_tiles - 1, "the stream did not use stripes"
    loads = rows_of_tiles * (COLUMNS // TILE_COLUMNS)
    assert cache.counters.chunks_loaded == loads, "a chunk loaded twice"
    assert cache.nbytes <= cache.max_bytes


def test_a_stream_plans_its_read_ahead_once_per_stripe(tmp_path: Path) -> None:
    """Once every stripe ahead of a stream is cached or under way, its next reads in
    the same stripe ask the cache nothing more for read-ahead (only where each read
    itself lies): the work per request of a stream stays small."""
    data = tiled_store(tmp_path)
    ops, cache = make_ops(tmp_path)
    asked = []
    pending = cache.stripes.pending

    def counted(path: str, stripe) -> bool:
        asked.append(stripe.start)
        return pending(path, stripe)

    cache.stripes.pending = counted  # type: ignore[method-assign]
    request = 1024
    assert read_through(ops, cache, data.nbytes, request) == data.tobytes()
    reads = data.nbytes // request
    stripes = ROWS // TILE_ROWS
    assert cache.counters.stripes_assembled >= stripes - 1, "the stream did not use stripes"
    # One question per read for the read itself; read-ahead's few per stripe on top.
    assert len(asked) <= reads + 4 * stripes, f"{len(asked)} questions for {reads} reads"


def test_a_long_stream_recycles_stripe_buffers(tmp_path: Path) -> None:
    data = tiled_store(tmp_path)
    ops, cache = make_ops(tmp_path)
    assert read_through(ops, cache, data.nbytes) == data.tobytes()
    reused = cache.counters.stripe_buffers_reused
    assert reused > 0, "no stripe was assembled into a buffer given back"


def test_a_stream_places_each_chunk_as_it_is_decoded(tmp_path: Path) -> None:
    """Every chunk a stream's stripes load is copied into its stripe by the worker
    that decoded it: no assembly pass is left for the stripe after its last chunk.
    (The stream's first read loads the first row of tiles before it is a stream.)"""
    data = tiled_store(tmp_path)
    ops, cache = make_ops(tmp_path)
    assert read_through(ops, cache, data.nbytes) == data.tobytes()
    across = COLUMNS // TILE_COLUMNS
    assert cache.counters.chunks_loaded == (ROWS // TILE_ROWS) * across
    assert cache.counters.stripe_chunks_placed >= cache.counters.chunks_loaded - across


def test_a_stripe_copies_the_chunks_cached_before_it(tmp_path: Path) -> None:
    data = tiled_store(tmp_path)
    ops, cache = make_ops(tmp_path)
    fh = open_raw(ops)
    raw = data.tobytes()

    async def main() -> bytes:
        at = TILE_ROWS * COLUMNS * 4 + 100  # in tile (1, 0), now cached
        assert bytes(await ops.read(fh, at, 16)) == raw[at : at + 16]
        assert cache.counters.stripes_assembled == 0
        out = await stream(ops, fh, data.nbytes)
        await settle(cache)
        return out

    assert trio.run(main) == raw
    across = COLUMNS // TILE_COLUMNS
    chunks = (ROWS // TILE_ROWS) * across
    placed = cache.counters.stripe_chunks_placed
    assert chunks - across - 1 <= placed <= chunks - 1, "the cached tile was placed by a load"


def test_a_chunk_placed_is_copied_again_when_another_is_returned(tmp_path: Path) -> None:
    """A load that placed its chunk can be superseded (its shard replaced meanwhile)
    and the chunk loaded again: the stripe holds the chunk its assembly got, not
    the one placed first."""
    data = tiled_store(tmp_path)
    ops, cache = make_ops(tmp_path)
    get = cache.get

    async def superseded(meta, index, *, priority=0, sink=None):
        chunk = await get(meta, index, priority=priority)
        if sink is not None:
            sink(None if chunk is None else np.full_like(chunk, 0x55))  # the old chunk
        return chunk

    cache.get = superseded  # type: ignore[method-assign]
    assert read_through(ops, cache, data.nbytes) == data.tobytes()
    assert cache.counters.stripes_assembled >= ROWS // TILE_ROWS - 1
    assert cache.counters.stripe_chunks_placed == 0


def test_random_reads_assemble_no_stripe(tmp_path: Path) -> None:
    data = tiled_store(tmp_path)
    ops, cache = make_ops(tmp_path)
    fh = open_raw(ops)
    offsets = [9000, 100, 20000, 4096, 15000]

    async def main() -> list[bytes]:
        return [bytes(await ops.read(fh, offset, 512)) for offset in offsets]

    got = trio.run(main)
    raw = data.tobytes()
    assert got == [raw[o : o + 512] for o in offsets]
    assert cache.counters.stripes_assembled == 0


def test_a_write_drops_the_stripes_holding_its_chunk(tmp_path: Path) -> None:
    data = tiled_store(tmp_path)
    ops, cache = make_ops(tmp_path)
    fh = open_raw(ops)
    expected = bytearray(data.tobytes())

    async def main() -> None:
        await stream(ops, fh, data.nbytes)
        await settle(cache)
        # Read the first rows again, as a stream: their stripes are assembled anew.
        await stream(ops, fh, 4 * ROWS * 4 * 3)
        await settle(cache)
        assert cache.stripes.known(""), "no stripe is cached to test with"
        # A few bytes into the first tile of row 1 (a cached stripe's chunk).
        offset, new = TILE_ROWS * COLUMNS * 4 + 8, b"\x11" * 40
        await ops.write(fh, offset, new)
        expected[offset : offset + len(new)] = new
        assert not any(s.prefix == (1,) for s in cache.stripes.known(""))
        assert await stream(ops, fh, data.nbytes) == bytes(expected)
        await ops.fsync(fh, False)
        await settle(cache)
        assert await stream(ops, fh, data.nbytes) == bytes(expected)
        await settle(cache)

    trio.run(main)
    stored = zarr.open_array(str(tmp_path))[...]
    assert stored.tobytes() == bytes(expected)


def test_a_stripe_assembled_while_a_write_lands_is_not_kept(tmp_path: Path) -> None:
    tiled_store(tmp_path)
    ops, cache = make_ops(tmp_path)
    fh = open_raw(ops)
    gate = threading.Event()
    loading = threading.Event()
    load = cache.loader.load

    def slow_load(*args):
        old = load(*args)
        loading.set()
        gate.wait(10)  # the old chunk, delivered after the write
        return old

    cache.loader.load = slow_load  # type: ignore[method-assign]
    node = ops.tree.resolve("array.raw")
    state = node.view.state  # type: ignore[union-attr]
    layout = state.stripe_layout()
    assert layout is not None
    stripe = layout.stripe_at(0)
    new = b"\x22" * 64

    async def main() -> bytes:
        cache.stripes.start(state.meta, layout, stripe, 1)
        while not loading.is_set():
            await trio.sleep(0.01)
        await ops.write(fh, 16, new)  # into chunk (0, 0), which the assembly is loading
        gate.set()
        await settle(cache)
        assert cache.stripes.cached("", stripe) is None, "the stripe kept the old bytes"
        return bytes(await ops.read(fh, 0, 256))

    got = trio.run(main)
    assert got[16:80] == new


def test_a_corrupt_chunk_fails_its_stripe_only(tmp_path: Path, caplog) -> None:
    data = tiled_store(tmp_path)
    (tmp_path / "2.1").write_bytes(b"not zlib at all")
    ops, cache = make_ops(tmp_path)
    fh = open_raw(ops)
    stripe_bytes = TILE_ROWS * COLUMNS * 4

    async def main() -> None:
        good = await stream(ops, fh, 2 * stripe_bytes)
        assert good == data.tobytes()[: 2 * stripe_bytes]
        with pytest.raises(Exception) as raised:
            await stream(ops, fh, 3 * stripe_bytes)
        assert getattr(raised.value, "errno", None) is not None
        del raised  # its traceback holds the reader's frames (pyfuse3 drops it)
        after = b""
        for offset in range(3 * stripe_bytes, data.nbytes, 1024):
            after += bytes(await ops.read(fh, offset, 1024))
        assert after == data.tobytes()[3 * stripe_bytes :]
        await settle(cache)

    gc.collect()
    gc.disable()  # what only the collector would free stays, and is seen
    try:
        trio.run(main)
        # The failed assembly (its buffer, its chunks) is gone with the reads.
        assert not [o for o in gc.get_objects() if isinstance(o, _Assembly)]
    finally:
        gc.enable()
    assert sum("2.1" in r.getMessage() for r in caplog.records) == 1


def test_a_cache_too_small_for_a_row_of_tiles_reads_without_stripes(tmp_path: Path) -> None:
    data = tiled_store(tmp_path)
    ops, cache = make_ops(tmp_path, cache_bytes=8 * 1024)  # a row of tiles is 3 KiB
    node = ops.tree.resolve("array.raw")
    assert node.view.state.stripe_layout() is None  # type: ignore[union-attr]
    assert read_through(ops, cache, data.nbytes) == data.tobytes()
    assert cache.counters.stripes_assembled == 0


def test_stripes_of_fortran_order_chunks(tmp_path: Path) -> None:
    data = np.arange(40 * 30, dtype="<i2").reshape(40, 30)
    z = zarr.create_array(
        store=str(tmp_path),
        shape=data.shape,
        chunks=(8, 30),
        dtype="<i2",
        zarr_format=2,
        order="F",
        compressors=None,
    )
    z[...] = data
    ops, cache = make_ops(tmp_path)
    assert read_through(ops, cache, data.nbytes, request=100) == data.tobytes()
    assert cache.counters.stripes_assembled > 0


@pytest.mark.parametrize(
    "error",
    [
        ChunkError("a/b", "0.1", "crc mismatch"),
        StoreError("reading k: refused", errno.EACCES),
        InvalidValueError("k: a symlink"),
        MetadataError("bad"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_errors_copy_whole(error: Exception) -> None:
    """Each reader of a failed stripe gets a copy of its error (see Stripes.get)."""
    error.logged = True  # type: ignore[attr-defined]
    copied = copy.copy(error)
    assert type(copied) is type(error) and str(copied) == str(error)
    assert copied.errno == error.errno  # type: ignore[attr-defined]
    assert copied.logged  # type: ignore[attr-defined]
    assert copied is not error and copied.__traceback__ is None


def test_stripes_after_the_array_shrinks_and_grows(tmp_path: Path) -> None:
    """Cached stripes never stand for bytes of another shape: after truncating to a
    row inside a chunk and growing back, the rows between read as fill value."""
    data = tiled_store(tmp_path)
    ops, cache = make_ops(tmp_path)
    state = ops.tree.resolve("array.raw").view.state  # type: ignore[union-attr]
    row = COLUMNS * 4
    assert read_through(ops, cache, data.nbytes) == data.tobytes()
    assert cache.counters.stripes_assembled
    state.truncate(61 * row)  # inside the last row of tiles
    expected = bytearray(data.tobytes()[: 61 * row])
    assert read_through(ops, cache, len(expected)) == bytes(expected)
    state.truncate(ROWS * row)  # back to the old shape: rows 61.. are fill (0)
    expected += bytes((ROWS - 61) * row)
    assert read_through(ops, cache, len(expected)) == bytes(expected)
