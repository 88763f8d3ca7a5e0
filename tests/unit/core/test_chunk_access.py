"""Which chunks a read touches, and the chunk cache (zarrfs.core.read.chunks).

Like zarr-python's ``test_accessed_chunks``: a store that counts ``get`` per key
proves that reading a byte range of ``array.raw`` fetches exactly the chunks that
overlap the range, each exactly once.
"""

from __future__ import annotations

import json
import math
import warnings
from collections import Counter

import numpy as np
import pytest
import trio
import zarr

from tests.support.stores import CountingStore
from zarrfs.core.arrays import ArrayState
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.read.reading import read_array_bytes
from zarrfs.core.sizes import parse_size
from zarrfs.formats.metadata.v2 import parse_array
from zarrfs.formats.model import ArrayMeta
from zarrfs.views.raw import RawView


def _create(root, name, shape, chunks, dtype, fill, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        group = zarr.open_group(str(root), mode="a", zarr_format=2)
        return group.create_array(
            name, shape=shape, chunks=chunks, dtype=dtype, fill_value=fill, **kwargs
        )


def _oracle(root, name) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return zarr.open_array(str(root / name), mode="r")[...]


def _meta(root, name) -> ArrayMeta:
    return parse_array(name, (root / name / ".zarray").read_bytes(), None)


def _overlapping_chunks(meta: ArrayMeta, offset: int, size: int) -> set[tuple[int, ...]]:
    """Brute force: the chunk of every element whose bytes intersect the range."""
    end = min(offset + size, meta.nbytes)
    if offset >= end:
        return set()
    first, stop = offset // meta.itemsize, -(-end // meta.itemsize)
    if not meta.shape:
        return {()}
    coords = np.unravel_index(np.arange(first, stop), meta.shape)
    return set(zip(*((c // k).tolist() for c, k in zip(coords, meta.chunks))))


def _read(cache: ChunkCache, meta: ArrayMeta, offset: int, size: int) -> bytes:
    return trio.run(read_array_bytes, cache, meta, offset, size)


@pytest.fixture
def cube(tmp_path):
    """A 3-D array with overhanging edge chunks and a sparse set of stored chunks."""
    root = tmp_path / "c.zarr"
    arr = _create(root, "cube", (9, 10, 7), (4, 3, 5), "<i4", -1, compressors=None)
    rng = np.random.default_rng(11)
    arr[1:8, 2:9, :] = rng.integers(-(2**31), 2**31, size=(7, 7, 7), dtype=np.int64)
    arr[0, 0, 0] = 5
    return root


def _expected_counts(meta: ArrayMeta, indices) -> Counter[str]:
    return Counter(meta.chunk_keys(index)[0] for index in indices)


def _random_ranges(total: int, count: int, seed: int) -> list[tuple[int, int]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        offset = int(rng.integers(0, total + 4))
        if i % 3 == 0:
            size = int(rng.integers(0, 12))  # within an element or two
        elif i % 3 == 1:
            size = int(rng.integers(0, 300))  # a few rows
        else:
            size = int(rng.integers(0, total + 10))  # anything up to the whole array
        out.append((offset, size))
    return [*out, (0, total), (total - 1, 1), (0, 1), (total, 5)]


def test_reads_fetch_exactly_the_overlapping_chunks_once(cube):
    meta = _meta(cube, "cube")
    assert len(meta.chunk_keys((0, 0, 0))) == 1  # dimension_separator recorded
    reference = _oracle(cube, "cube").tobytes()
    assert len(reference) == meta.nbytes
    stored = {p.name for p in (cube / "cube").iterdir() if not p.name.startswith(".")}
    assert 0 < len(stored) < meta.n_chunks  # some chunks are missing

    for offset, size in _random_ranges(meta.nbytes, 150, seed=1):
        store = CountingStore(str(cube))
        cache = ChunkCache(store, 1 << 20)
        data = _read(cache, meta, offset, size)
        assert data == reference[offset : offset + size], (offset, size)
        expected = _overlapping_chunks(meta, offset, size)
        assert store.gets == _expected_counts(meta, expected), (offset, size)
        assert cache.counters.chunks_loaded == len(expected)


def test_second_read_of_the_same_range_hits_the_cache(cube):
    meta = _meta(cube, "cube")
    reference = _oracle(cube, "cube").tobytes()
    for offset, size in _random_ranges(meta.nbytes, 30, seed=2):
        store = CountingStore(str(cube))
        cache = ChunkCache(store, 1 << 20)
        first = _read(cache, meta, offset, size)
        gets, loads = sum(store.gets.values()), cache.counters.chunks_loaded
        second = _read(cache, meta, offset, size)
        assert first == second == reference[offset : offset + size]
        assert sum(store.gets.values()) == gets
        assert cache.counters.chunks_loaded == loads
        # and any sub-range of it too
        inner = _read(cache, meta, offset + size // 3, size // 3)
        assert inner == reference[offset + size // 3 : offset + 2 * (size // 3)]
        assert sum(store.gets.values()) == gets


def test_missing_chunks_are_remembered(cube):
    meta = _meta(cube, "cube")
    store = CountingStore(str(cube))
    cache = ChunkCache(store, 1 << 20)
    # chunk (2, 3, 1) covers [8:9, 9:10, 5:7], which was never written
    index = (2, 3, 1)
    assert not (cube / "cube" / "2.3.1").exists()
    offset = (8 * 70 + 9 * 7 + 5) * 4
    assert _read(cache, meta, offset, 8) == np.array([-1, -1], "<i4").tobytes()
    assert store.gets == Counter({"cube/2.3.1": 1})
    assert trio.run(cache.get, meta, index) is None
    assert _read(cache, meta, offset, 8) == np.array([-1, -1], "<i4").tobytes()
    assert store.gets == Counter({"cube/2.3.1": 1})


@pytest.mark.parametrize(
    ("name", "shape", "chunks"), [("line", (10,), (3,)), ("plane", (5, 6), (2, 4))]
)
@pytest.mark.parametrize("layout", ["flat", "nested"])
def test_legacy_arrays_without_separator_probe_each_key_once(tmp_path, layout, name, shape, chunks):
    """No ``dimension_separator`` (zarr-python < 2.8): "." is tried, then "/".

    Every key is still fetched at most once per read, missing chunks included.
    """
    root = tmp_path / "legacy.zarr"
    separator = "." if layout == "flat" else "/"
    arr = _create(
        root,
        name,
        shape,
        chunks,
        "<u2",
        9,
        chunk_key_encoding={"name": "v2", "separator": separator},
    )
    arr[: shape[0] // 2] = 1
    reference = _oracle(root, name).tobytes()  # before the separator is dropped
    assert reference.count(b"\x01\x00") and reference.count(b"\x09\x00")
    doc = json.loads((root / name / ".zarray").read_bytes())
    del doc["dimension_separator"]
    (root / name / ".zarray").write_text(json.dumps(doc))

    meta = _meta(root, name)
    for offset, size in _random_ranges(meta.nbytes, 40, seed=3):
        store = CountingStore(str(root))
        cache = ChunkCache(store, 1 << 20)
        assert _read(cache, meta, offset, size) == reference[offset : offset + size]
        expected = _overlapping_chunks(meta, offset, size)
        assert cache.counters.chunks_loaded == len(expected)
        probed = {k for index in expected for k in meta.chunk_keys(index)}
        assert set(store.gets) <= probed
        assert {k for index in expected for k in meta.chunk_keys(index)[:1]} <= set(store.gets)
        assert all(n == 1 for n in store.gets.values()), (offset, size, store.gets)


# ---------------------------------------------------------------- single flight


def test_concurrent_gets_of_one_chunk_load_it_once(cube):
    meta = _meta(cube, "cube")
    store = CountingStore(str(cube), delay=0.05)
    cache = ChunkCache(store, 1 << 20)
    results = []

    async def get():
        results.append(await cache.get(meta, (0, 0, 0)))

    async def main():
        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(get)

    trio.run(main)
    assert store.gets == Counter({"cube/0.0.0": 1})
    assert cache.counters.chunks_loaded == 1
    assert len(results) == 8
    assert all(r is results[0] for r in results)
    expected = _oracle(cube, "cube")[0:4, 0:3, 0:5]
    np.testing.assert_array_equal(results[0], expected)
    assert not results[0].flags.writeable


def test_concurrent_overlapping_reads_decode_each_chunk_once(cube):
    meta = _meta(cube, "cube")
    reference = _oracle(cube, "cube").tobytes()
    store = CountingStore(str(cube), delay=0.02)
    cache = ChunkCache(store, 1 << 20)
    ranges = [(0, 700), (300, 900), (100, 50), (0, meta.nbytes)]
    out: dict[int, bytes] = {}

    async def read(i, offset, size):
        out[i] = await read_array_bytes(cache, meta, offset, size)

    async def main():
        async with trio.open_nursery() as nursery:
            for i, (offset, size) in enumerate(ranges):
                nursery.start_soon(read, i, offset, size)

    trio.run(main)
    for i, (offset, size) in enumerate(ranges):
        assert out[i] == reference[offset : offset + size]
    assert store.gets == _expected_counts(meta, _overlapping_chunks(meta, 0, meta.nbytes))
    assert cache.counters.chunks_loaded == meta.n_chunks


def test_waiter_survives_the_loading_task_being_cancelled(cube):
    meta = _meta(cube, "cube")
    store = CountingStore(str(cube), delay=0.1)
    cache = ChunkCache(store, 1 << 20)
    got = []

    async def first():
        with trio.move_on_after(0.02):
            await cache.get(meta, (0, 0, 0))

    async def second():
        await trio.sleep(0.01)
        got.append(await cache.get(meta, (0, 0, 0)))

    async def main():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(first)
            nursery.start_soon(second)

    trio.run(main)
    np.testing.assert_array_equal(got[0], _oracle(cube, "cube")[0:4, 0:3, 0:5])
    assert 1 <= store.gets["cube/0.0.0"] <= 2


# ---------------------------------------------------------------- LRU by bytes


@pytest.fixture
def dense(tmp_path):
    root = tmp_path / "d.zarr"
    arr = _create(root, "dense", (8, 8), (2, 8), "<f8", 0.0)  # 4 chunks of 128 bytes
    arr[...] = np.arange(64.0).reshape(8, 8)
    return root


def _get(cache, meta, *indices):
    async def main():
        return [await cache.get(meta, index) for index in indices]

    return trio.run(main)


def test_cache_evicts_least_recently_used_within_max_bytes(dense):
    meta = _meta(dense, "dense")
    assert meta.chunk_nbytes == 128
    store = CountingStore(str(dense))
    cache = ChunkCache(store, 300)  # room for two chunks
    key = {i: f"dense/{i}.0" for i in range(4)}

    _get(cache, meta, (0, 0), (1, 0))
    assert cache.nbytes == 256
    _get(cache, meta, (0, 0))  # hit; (1, 0) is now least recently used
    assert store.gets == Counter({key[0]: 1, key[1]: 1})
    _get(cache, meta, (2, 0))  # evicts (1, 0)
    assert cache.nbytes == 256 <= cache.max_bytes
    _get(cache, meta, (0, 0), (2, 0))  # both still cached
    assert store.gets == Counter({key[0]: 1, key[1]: 1, key[2]: 1})
    _get(cache, meta, (1, 0))  # reloaded; evicts (0, 0)
    assert store.gets[key[1]] == 2
    _get(cache, meta, (2, 0))
    assert store.gets[key[2]] == 1
    _get(cache, meta, (0, 0))
    assert store.gets[key[0]] == 2
    assert cache.nbytes == 256


def test_cache_bytes_never_exceed_max_during_random_reads(dense):
    meta = _meta(dense, "dense")
    reference = _oracle(dense, "dense").tobytes()
    for max_bytes in (0, 100, 128, 300, 520, 10**6):
        store = CountingStore(str(dense))
        cache = ChunkCache(store, max_bytes)
        for offset, size in _random_ranges(meta.nbytes, 40, seed=max_bytes):
            assert _read(cache, meta, offset, size) == reference[offset : offset + size]
            assert cache.nbytes <= max_bytes
        if max_bytes >= meta.nbytes:
            # everything fits: each chunk loaded once
            assert cache.counters.chunks_loaded == meta.n_chunks


def test_chunk_larger_than_the_cache_is_not_kept(dense):
    meta = _meta(dense, "dense")
    store = CountingStore(str(dense))
    cache = ChunkCache(store, 100)
    for _ in range(3):
        _get(cache, meta, (3, 0))
    assert store.gets == Counter({"dense/3.0": 3})
    assert cache.nbytes == 0


# ---------------------------------------------------------------- fill values


def test_missing_chunks_read_as_fill_value(tmp_path):
    root = tmp_path / "f.zarr"
    arr = _create(root, "big", (6, 5), (4, 2), ">i4", 42)
    arr[0:2, 0:2] = 7
    meta = _meta(root, "big")
    cache = ChunkCache(CountingStore(str(root)), 1 << 20)
    data = np.frombuffer(_read(cache, meta, 0, meta.nbytes), ">i4").reshape(6, 5)
    expected = np.full((6, 5), 42, ">i4")
    expected[0:2, 0:2] = 7
    np.testing.assert_array_equal(data, expected)
    assert data.tobytes() == _oracle(root, "big").tobytes()


@pytest.mark.parametrize(
    ("dtype", "fill", "element"),
    [
        ("<f8", "NaN", b"\x00\x00\x00\x00\x00\x00\xf8\x7f"),
        (">f4", "-Infinity", b"\xff\x80\x00\x00"),
        ("<f8", -0.0, b"\x00" * 7 + b"\x80"),
        ("|S3", "YWJj", b"abc"),
        ([["r", "|u1"], ["g", "<u2"]], "AQID", b"\x01\x02\x03"),
        ("<i2", None, b"\x00\x00"),  # null reads as zero bytes
        ("<U2", None, bytes(8)),
    ],
    ids=str,
)
def test_fill_value_is_copied_bytewise(tmp_path, dtype, fill, element):
    root = tmp_path / "g.zarr"
    (root / "a").mkdir(parents=True)
    doc = {
        "zarr_format": 2,
        "shape": [3, 4],
        "chunks": [2, 3],
        "dtype": dtype,
        "fill_value": fill,
        "order": "C",
        "compressor": None,
        "filters": None,
        "dimension_separator": ".",
    }
    (root / "a" / ".zarray").write_text(json.dumps(doc))
    meta = _meta(root, "a")
    store = CountingStore(str(root))
    cache = ChunkCache(store, 1 << 20)
    assert _read(cache, meta, 0, 10**6) == element * 12
    assert _read(cache, meta, 1, 2 * len(element)) == (element * 3)[1 : 1 + 2 * len(element)]
    assert len(store.gets) == 4 and set(store.gets.values()) == {1}


def test_raw_view_size_and_reads(cube):
    meta = _meta(cube, "cube")
    reference = _oracle(cube, "cube").tobytes()
    view = RawView(ArrayState(meta, {}, ChunkCache(CountingStore(str(cube)), 1 << 20)))
    assert view.size == meta.nbytes == 9 * 10 * 7 * 4
    assert trio.run(view.read, 0, view.size + 100) == reference
    assert trio.run(view.read, view.size, 10) == b""
    assert trio.run(view.read, view.size - 3, 10) == reference[-3:]


def test_zero_dimensional_and_empty_arrays(tmp_path):
    root = tmp_path / "z.zarr"
    z = _create(root, "scalar", (), (), "<f8", 1.5)
    z[...] = 2.5
    _create(root, "empty", (0, 3), (2, 2), "<f8", 1.5)
    store = CountingStore(str(root))
    cache = ChunkCache(store, 1 << 20)
    meta = _meta(root, "scalar")
    assert _read(cache, meta, 0, 8) == np.float64(2.5).tobytes()
    assert _read(cache, meta, 2, 100) == np.float64(2.5).tobytes()[2:]
    assert store.gets == Counter({"scalar/0": 1})
    empty = _meta(root, "empty")
    assert _read(cache, empty, 0, 100) == b""
    assert store.gets == Counter({"scalar/0": 1})


# ---------------------------------------------------------------- parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("4096", 4096),
        ("512M", 512 * 2**20),
        ("512m", 512 * 2**20),
        ("1G", 2**30),
        ("2T", 2 * 2**40),
        ("64K", 64 * 2**10),
        (" 64k ", 64 * 2**10),
        ("1.5K", 1536),
        ("0.5G", 2**29),
        ("10MB", 10 * 2**20),
        ("10MiB", 10 * 2**20),
        ("100B", 100),
    ],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", " ", "abc", "-1M", "-5", "1X", "M", "KB", "inf", "1e400"])
def test_parse_size_rejects_invalid_sizes_with_value_error(text):
    with pytest.raises(ValueError):
        parse_size(text)


def test_chunk_overlap_helper_agrees_with_a_hand_count():
    # guard the brute-force oracle itself: (9, 10, 7) in (4, 3, 5) chunks
    meta = parse_array(
        "x",
        json.dumps(
            {
                "zarr_format": 2,
                "shape": [9, 10, 7],
                "chunks": [4, 3, 5],
                "dtype": "<i4",
                "fill_value": 0,
                "order": "C",
                "compressor": None,
                "filters": None,
            }
        ).encode(),
        None,
    )
    assert _overlapping_chunks(meta, 0, 4) == {(0, 0, 0)}
    assert _overlapping_chunks(meta, 5 * 4, 4) == {(0, 0, 1)}
    assert _overlapping_chunks(meta, 3, 2) == {(0, 0, 0)}  # bytes 3..4 = elements 0 and 1
    assert _overlapping_chunks(meta, 0, 7 * 4) == {(0, 0, 0), (0, 0, 1)}
    assert len(_overlapping_chunks(meta, 0, meta.nbytes)) == math.prod((3, 4, 2))
    assert _overlapping_chunks(meta, meta.nbytes, 4) == set()
