"""The parts of the decoded-chunk cache, each on its own (core/read): typed keys,
the LRU, spare buffers, loads in flight, shard indexes, and the cache that
composes them."""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio
import zarr

from tests.support.stores import zlib_array
from zarrfs.core.counters import Counters
from zarrfs.core.pool import BACKGROUND, URGENT, LoadPools
from zarrfs.core.read import flights
from zarrfs.core.read.buffers import SpareBuffers
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.read.flights import Loads
from zarrfs.core.read.indexes import ShardIndexes
from zarrfs.core.read.lru import (
    MISSING_COST,
    CacheKey,
    ChunkKey,
    DecodedLru,
    ShardIndexKey,
    StripeKey,
    cost,
)
from zarrfs.errors import ChunkError
from zarrfs.formats.metadata.v2 import parse_array
from zarrfs.formats.metadata.v3 import parse_node
from zarrfs.formats.model import ArrayMeta
from zarrfs.stores.directory import DirectoryStore

ROWS, COLUMNS, CHUNK_ROWS = 16, 8, 4  # four chunks of 128 bytes


def plain_array(root: Path) -> tuple[ArrayMeta, np.ndarray]:
    """A v2 float32 array in four zlib chunks (decoded into the cache's buffers)."""
    data = zlib_array(root, ROWS, COLUMNS, CHUNK_ROWS)
    return parse_array("", (root / ".zarray").read_bytes(), None), data


def sharded_array(root: Path) -> tuple[ArrayMeta, np.ndarray]:
    """A v3 int32 array of 16 elements: two shards of two inner chunks."""
    data = np.arange(16, dtype="<i4")
    z = zarr.create_array(store=str(root), shape=(16,), chunks=(4,), shards=(8,), dtype="<i4")
    z[...] = data
    meta = parse_node("", (root / "zarr.json").read_bytes())
    assert isinstance(meta, ArrayMeta) and meta.shards is not None
    return meta, data


Kept = list[tuple[CacheKey, Any, Any, bool]]


def loads_for(root: Path, lru: DecodedLru | None = None) -> tuple[Loads, Kept, Counters]:
    """Loads of the store at ``root``; what they keep is listed (and cached in ``lru``)."""
    counters = Counters()
    kept: Kept = []

    def keep(key: CacheKey, value: Any, buffer: Any, background: bool) -> None:
        kept.append((key, value, buffer, background))
        if lru is not None:
            lru.insert(key, value)

    pools = LoadPools.create(remote=False, threads=2)
    loads = Loads(DirectoryStore(str(root)), pools, SpareBuffers(counters), counters, keep)
    return loads, kept, counters


async def settle(loads: Loads) -> None:
    for _ in range(500):
        if loads.idle:
            return
        await trio.sleep(0.01)
    raise AssertionError("loads did not finish")


# -- keys -------------------------------------------------------------------------------


def test_keys_of_each_kind_never_meet() -> None:
    chunk, index, stripe = ChunkKey(("a", (0, 1))), ShardIndexKey("a", (0, 1)), StripeKey("a", 0, 1)
    entries: dict[CacheKey, str] = {chunk: "chunk", index: "index", stripe: "stripe"}
    assert len(entries) == 3 and chunk != index and index != stripe
    assert entries[ChunkKey(("a", (0, 1)))] == "chunk"
    assert entries[ShardIndexKey("a", (0, 1))] == "index"
    assert entries[StripeKey("a", 0, 1)] == "stripe"
    assert StripeKey("a", 0, 2) not in entries, "a stripe is its extent, not its start"
    assert (chunk.path, chunk.index) == ("a", (0, 1))


# -- the LRU ----------------------------------------------------------------------------


def test_the_lru_evicts_the_least_recently_used_within_its_budget() -> None:
    left: list[CacheKey] = []
    lru = DecodedLru(300, left.append)
    a, b, c = (ChunkKey(("", (i,))) for i in range(3))
    lru.insert(a, np.zeros(100, np.uint8))
    lru.insert(b, np.zeros(100, np.uint8))
    assert lru.use(a)[0]  # a is now the most recent
    assert lru.peek(b)[0]  # a look that is no use: b stays the least recent
    lru.insert(c, np.zeros(150, np.uint8))
    assert left == [b] and a in lru and c in lru and b not in lru
    assert lru.nbytes == 250
    assert lru.use(b) == (False, None)


def test_the_lru_counts_what_it_holds() -> None:
    lru = DecodedLru(1000, lambda key: None)
    key = ChunkKey(("", (0,)))
    lru.insert(key, None)  # not stored: remembered at a nominal cost
    assert lru.nbytes == MISSING_COST == cost(None)
    lru.insert(key, np.zeros(200, np.uint8))  # in place of the old entry
    assert lru.nbytes == 200
    lru.insert(ChunkKey(("", (1,))), np.zeros(1001, np.uint8))  # larger than the budget
    assert ChunkKey(("", (1,))) not in lru and lru.nbytes == 200
    lru.drop(key)
    lru.drop(key)  # (nothing left to drop)
    assert lru.nbytes == 0


def test_the_lru_lets_go_of_a_value_before_it_says_so() -> None:
    value = np.zeros(100, np.uint8)
    gone = weakref.ref(value)
    seen: list[bool] = []
    lru = DecodedLru(150, lambda key: seen.append(gone() is None))
    lru.insert(ChunkKey(("", (0,))), value)
    del value
    lru.insert(ChunkKey(("", (1,))), np.zeros(100, np.uint8))  # evicts the first
    assert seen == [True]


def test_the_lru_lists_an_arrays_keys_by_kind() -> None:
    lru = DecodedLru(10_000, lambda key: None)
    keys = [ChunkKey(("a", (0,))), ShardIndexKey("a", (0,)), StripeKey("a", 0, 8)]
    keys.append(ChunkKey(("b", (0,))))
    for key in keys:
        lru.insert(key, np.zeros(8, np.uint8))
    assert lru.keys_of("a", ChunkKey, ShardIndexKey) == keys[:2]
    assert lru.keys_of("a", StripeKey) == [keys[2]]


# -- spare buffers ----------------------------------------------------------------------


def test_a_buffer_is_kept_only_when_nothing_else_holds_it() -> None:
    counters = Counters()
    buffers = SpareBuffers(counters)
    key = ChunkKey(("", (0,)))
    held = np.empty(64, np.uint8)
    buffers.back(key, held)
    buffers.give_back(key)
    assert buffers.take(64) is None and counters.buffers_recycled == 0
    buffers.back(key, np.empty(64, np.uint8))
    buffers.give_back(key)
    assert counters.buffers_recycled == 1
    assert buffers.take(64) is not None and buffers.take(64) is None
    buffers.give_back(key)  # (nothing backs it any more)
    assert counters.buffers_recycled == 1


def test_spare_buffers_are_bounded_in_bytes() -> None:
    buffers = SpareBuffers(Counters(), most_bytes=32)
    assert buffers.add(np.empty(8, np.uint8)) and buffers.add(np.empty(8, np.uint8))
    assert not buffers.add(np.empty(24, np.uint8))
    assert buffers.add(np.empty(16, np.uint8)) and buffers.nbytes == 32
    assert not buffers.add(np.empty(1, np.uint8))
    assert buffers.take(32) is None
    assert buffers.take(8) is not None and buffers.nbytes == 24
    assert buffers.add(np.empty(8, np.uint8))


def test_an_offered_chunk_is_reused_only_once_nothing_refers_to_its_memory() -> None:
    counters = Counters()
    buffers = SpareBuffers(counters)
    chunk = np.empty(64, np.uint8).view("<f4").reshape(4, 4, order="F")
    reading = memoryview(chunk.reshape(-1, order="A").view(np.uint8))[8:16]  # a read's slice
    buffers.offer(chunk)
    del chunk
    assert buffers.take(64) is None, "memory a read still refers to was handed out"
    del reading
    taken = buffers.take(64)
    assert taken is not None and taken.nbytes == 64 and counters.buffers_recycled == 1
    assert buffers.take(64) is None


@pytest.mark.parametrize(
    "chunk",
    [
        np.empty((4, 4), "<f4"),  # its own memory: no buffer of ours
        np.empty(128, np.uint8)[:64].view("<f4"),  # part of a larger buffer
        np.frombuffer(bytes(64), "<f4"),  # a request's bytes
    ],
)
def test_only_whole_buffers_of_ours_are_taken_back(chunk: np.ndarray) -> None:
    buffers = SpareBuffers(Counters())
    buffers.offer(chunk)
    del chunk
    assert buffers.take(64) is None and buffers.offered_nbytes == 0


def test_offered_buffers_are_bounded_in_bytes() -> None:
    buffers = SpareBuffers(Counters(), most_bytes=64)
    held = [np.empty(32, np.uint8).view("<f4") for _ in range(3)]
    for chunk in held:
        buffers.offer(chunk)
    assert buffers.offered_nbytes == 64


# -- loads in flight --------------------------------------------------------------------


def test_one_load_per_chunk_however_many_wait(tmp_path: Path) -> None:
    meta, data = plain_array(tmp_path)
    loads, kept, counters = loads_for(tmp_path)
    key = ChunkKey(("", (1, 0)))

    async def main() -> list[Any]:
        flight = loads.start_chunk(meta, (1, 0), URGENT)
        assert loads.flight(key) is flight and loads.known(key) and not loads.idle
        got: list[Any] = []

        async def wait() -> None:
            got.append(await loads.wait(flight))

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(wait)
        return got

    got = trio.run(main)
    assert len(got) == 3 and all(chunk is got[0] for chunk in got)
    assert got[0].tobytes() == data[CHUNK_ROWS : 2 * CHUNK_ROWS].tobytes()
    assert counters.chunks_loaded == 1 and counters.chunks_decoded == 1
    assert [entry[0] for entry in kept] == [key]
    assert kept[0][2] is not None, "decoded into a buffer of the cache's"
    assert loads.idle and not loads.known(key)


def test_a_load_a_write_superseded_reaches_its_waiter_not_the_cache(tmp_path: Path) -> None:
    meta, data = plain_array(tmp_path)
    loads, kept, _ = loads_for(tmp_path)

    async def main() -> Any:
        flight = loads.start_chunk(meta, (0, 0), URGENT)
        loads.forget(ChunkKey(("", (0, 0))))
        return await loads.wait(flight)

    assert trio.run(main).tobytes() == data[:CHUNK_ROWS].tobytes()
    assert kept == []


def test_a_stale_load_is_asked_again_and_not_kept(tmp_path: Path) -> None:
    meta, _ = plain_array(tmp_path)
    loads, kept, _ = loads_for(tmp_path)

    async def main() -> None:
        flight = loads.start_chunk(meta, (0, 0), URGENT)
        loads.supersede(lambda key: key == ChunkKey(("", (0, 0))))
        assert flight.stale and loads.flight(ChunkKey(("", (0, 0)))) is None
        assert await loads.wait(flight) is None
        await settle(loads)

    trio.run(main)
    assert kept == []


def test_a_chunk_read_ahead_and_passed_is_not_kept(tmp_path: Path) -> None:
    meta, _ = plain_array(tmp_path)
    loads, kept, counters = loads_for(tmp_path)

    async def main() -> None:
        flight = loads.start_chunk(meta, (2, 0), BACKGROUND, prefetched=True)
        assert loads.prefetching == 1 and flight.background
        loads.pass_by(ChunkKey(("", (2, 0))))
        assert await loads.wait(flight) is not None
        await settle(loads)

    trio.run(main)
    assert kept == [] and loads.prefetching == 0
    assert counters.read_ahead_loads == counters.chunks_loaded == 1


def test_a_bad_chunk_is_remembered_for_a_while(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    meta, _ = plain_array(tmp_path)
    (tmp_path / "3.0").write_bytes(b"not zlib")
    loads, kept, counters = loads_for(tmp_path)
    key = ChunkKey(("", (3, 0)))

    async def fail() -> ChunkError:
        with pytest.raises(ChunkError) as caught:
            await loads.wait(loads.start_chunk(meta, (3, 0), URGENT))
        return caught.value

    first = trio.run(fail)
    assert loads.failing(key) and counters.decode_failures == 1 and kept == []
    with pytest.raises(ChunkError) as again:
        loads.check_failure(key)
    assert again.value is not first and again.value.logged, "a fresh error, logged once"

    monkeypatch.setattr(flights, "FAILURE_TTL", 0.0)
    trio.run(fail)
    loads.check_failure(key)  # expired: the next read tries again
    assert not loads.failing(key) and counters.decode_failures == 2


# -- shard indexes ----------------------------------------------------------------------


def shard_parts(root: Path) -> tuple[ArrayMeta, DecodedLru, Loads, ShardIndexes, Kept]:
    meta, _ = sharded_array(root)
    lru = DecodedLru(1 << 20, lambda key: None)
    loads, kept, _ = loads_for(root, lru)
    return meta, lru, loads, ShardIndexes(lru, loads), kept


def test_an_inner_chunk_is_found_by_its_shards_index_loaded_once(tmp_path: Path) -> None:
    meta, lru, _, indexes, kept = shard_parts(tmp_path)

    async def main() -> None:
        first = await indexes.where(meta, (1,), URGENT)
        assert first is not None and first[0] == "c/0" and first[2] > 0
        assert ShardIndexKey("", (0,)) in lru
        assert await indexes.where(meta, (0,), URGENT) != first
        assert indexes.where_at_hand(meta, (1,)) == (True, first)

    trio.run(main)
    assert [entry[0] for entry in kept] == [ShardIndexKey("", (0,))]


def test_where_at_hand_loads_the_index_in_the_background(tmp_path: Path) -> None:
    meta, lru, loads, indexes, _ = shard_parts(tmp_path)

    async def main() -> None:
        assert indexes.where_at_hand(meta, (2,)) == (False, None)
        flight = loads.flight(ShardIndexKey("", (1,)))
        assert flight is not None and flight.background
        await settle(loads)
        assert ShardIndexKey("", (1,)) in lru
        known, where = indexes.where_at_hand(meta, (2,))
        assert known and where is not None and where[0] == "c/1"

    trio.run(main)


def test_reads_of_a_shard_being_replaced_wait_for_its_new_index(tmp_path: Path) -> None:
    meta, lru, _, indexes, _ = shard_parts(tmp_path)

    async def main() -> None:
        assert await indexes.where(meta, (1,), URGENT) is not None
        indexes.begin_replace(meta, (0,))
        assert ShardIndexKey("", (0,)) not in lru
        found: list[Any] = []

        async def read() -> None:
            found.append(await indexes.where(meta, (1,), URGENT))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await trio.sleep(0.05)
            assert found == [], "read while the shard was replaced"
            indexes.end_replace("", (0,), None)  # the shard was deleted
        assert found == [None]
        assert lru.peek(ShardIndexKey("", (0,))) == (True, None)

    trio.run(main)


def test_loads_under_way_in_a_replaced_shard_go_stale(tmp_path: Path) -> None:
    meta, _, loads, indexes, _ = shard_parts(tmp_path)

    async def main() -> None:
        places = [await indexes.where(meta, (i,), URGENT) for i in (1, 2)]
        inner = loads.start_chunk(meta, (1,), URGENT, places[0])
        other = loads.start_chunk(meta, (2,), URGENT, places[1])
        indexes.begin_replace(meta, (0,))  # (no await since: both loads are under way)
        assert inner.stale and not other.stale
        indexes.end_replace("", (0,), object())  # unknown: read again when needed
        await settle(loads)

    trio.run(main)


# -- the cache that composes them -------------------------------------------------------


def test_chunks_and_shard_indexes_share_one_budget(tmp_path: Path) -> None:
    meta, data = sharded_array(tmp_path)
    cache = ChunkCache(DirectoryStore(str(tmp_path)), 1 << 20, threads=1)

    async def main() -> None:
        chunk = await cache.get(meta, (1,))
        assert chunk is not None and chunk.tobytes() == data[4:8].tobytes()
        _, index = cache.lru.peek(ShardIndexKey("", (0,)))
        assert cache.has("", (1,)) and index is not None
        assert cache.nbytes == chunk.nbytes + cost(index)
        cache.invalidate("")
        assert cache.nbytes == 0 and not cache.has("", (1,))

    trio.run(main)
    assert (cache.counters.cache_misses, cache.counters.chunks_loaded) == (1, 1)


def test_a_stream_gives_back_what_it_read_ahead(tmp_path: Path) -> None:
    meta, data = plain_array(tmp_path)
    cache = ChunkCache(DirectoryStore(str(tmp_path)), 1 << 20, threads=1)

    async def main() -> None:
        assert not cache.prefetch(meta, (1, 0)), "read-ahead is off until the mount says"
        cache.read_ahead = True
        assert cache.prefetch(meta, (1, 0))
        assert cache.loader.prefetching == 1
        await settle(cache.loader)
        cached, chunk = cache.ready("", (1, 0))
        assert cached and chunk is not None
        assert chunk.tobytes() == data[CHUNK_ROWS : 2 * CHUNK_ROWS].tobytes()
        del chunk
        cache.release(meta, (1, 0))  # the stream went past it
        assert not cache.has("", (1, 0))

    trio.run(main)
    counters = cache.counters
    assert (counters.read_ahead_loads, counters.chunks_loaded, counters.cache_hits) == (1, 1, 1)
    assert counters.buffers_recycled == 1
    assert cache.buffers.take(meta.chunk_nbytes) is not None


def test_a_chunk_put_after_a_write_is_what_reads_see(tmp_path: Path) -> None:
    meta, _ = plain_array(tmp_path)
    cache = ChunkCache(DirectoryStore(str(tmp_path)), 1 << 20, threads=1)
    new = np.full((CHUNK_ROWS, COLUMNS), 7.0, dtype="<f4")

    async def main() -> None:
        await cache.get(meta, (0, 0))
        cache.put("", (0, 0), new)
        assert await cache.get(meta, (0, 0)) is new
        cache.put("", (0, 0), None)  # deleted: reads as fill
        assert await cache.get(meta, (0, 0)) is None

    trio.run(main)
    assert cache.counters.chunks_loaded == 1
