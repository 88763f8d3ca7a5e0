"""Write-back to a remote store sends a flush's PUTs concurrently, at most as many
at once as the put pool has threads, and keeps every durability rule: a flush
returns after all of them, a failed PUT fails it and leaves that chunk dirty, the
metadata of a grow is stored after the chunks, a shard's rewrites of one shard never
overlap. The store is a stand-in whose PUTs take a fixed time
(tests/support/slow_puts.py). No mount."""

from __future__ import annotations

import errno
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import trio
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.batches import wait_for
from tests.support.slow_puts import open_v2, slow_store, v2_array, v3_array
from tests.support.stores import zlib_array
from zarrfs.core.pool import FETCH_THREADS, PUT_THREADS
from zarrfs.core.write.storing import Storing
from zarrfs.errors import StoreError
from zarrfs.stores.directory import DirectoryStore

COLUMNS, CHUNK_ROWS = 64, 4
CHUNK = CHUNK_ROWS * COLUMNS * 4  # 1 KiB
LATENCY = 0.2


def stored(root: Path) -> np.ndarray:
    return np.asarray(zarr.open_array(str(root), mode="r")[...])


def test_puts_in_flight_are_bounded_by_the_connections(tmp_path: Path) -> None:
    storing = Storing(DirectoryStore(str(tmp_path)), threads=2)
    assert storing.put_pool.threads == PUT_THREADS <= FETCH_THREADS
    assert not storing.each_unit, "a local store commits batches"


@pytest.mark.parametrize("threads", [4, 32])
def test_a_flush_sends_its_puts_at_once_up_to_the_bound(tmp_path: Path, threads: int) -> None:
    chunks = 24
    state, writeback, store, data = v2_array(
        tmp_path, chunks * CHUNK_ROWS, COLUMNS, CHUNK_ROWS, LATENCY, threads
    )
    new = data * 2 + 1

    async def main() -> float:
        await state.write(0, new.tobytes())
        started = time.monotonic()
        await writeback.flush_array(state)
        return time.monotonic() - started

    elapsed = trio.run(main)
    assert store.most_in_flight == min(chunks, threads), "the bound, reached"
    assert store.in_flight == 0, "the flush returned after every PUT"
    rounds = -(-chunks // threads)
    assert elapsed < chunks * LATENCY / 2, f"{elapsed:.2f} s: PUTs one at a time"
    assert elapsed >= rounds * LATENCY * 0.9
    assert not state.dirty
    np.testing.assert_array_equal(stored(tmp_path), new)


def test_a_failed_put_fails_the_flush_and_keeps_that_chunk_dirty(tmp_path: Path) -> None:
    chunks = 8
    state, writeback, store, data = v2_array(
        tmp_path, chunks * CHUNK_ROWS, COLUMNS, CHUNK_ROWS, 0.05, 8
    )
    new = data - 7
    store.failing = {"3.0"}

    async def main() -> None:
        await state.write(0, new.tobytes())
        with pytest.raises(StoreError) as info:
            await writeback.flush_array(state)
        assert info.value.errno == errno.EIO
        assert store.in_flight == 0, "the flush failed only after every PUT ended"
        assert set(state.dirty) == {(3, 0)}, "the others are stored, the failed one dirty"
        assert bytes(await state.read(0, new.nbytes)) == new.tobytes(), "nothing lost"
        assert writeback.failure is not None
        expected = new.copy()
        expected[12:16] = data[12:16]  # the old chunk 3, whole
        np.testing.assert_array_equal(stored(tmp_path), expected)
        store.failing = set()
        await writeback.flush_array(state)  # the retry stores it
        assert not state.dirty
        assert writeback.failure is None

    trio.run(main)
    np.testing.assert_array_equal(stored(tmp_path), new)
    assert store.puts["3.0"] == 1 and all(store.puts[f"{i}.0"] == 1 for i in range(chunks))


def test_a_grows_metadata_is_stored_after_every_chunk(tmp_path: Path) -> None:
    chunks = 6
    state, writeback, store, data = v2_array(
        tmp_path, chunks * CHUNK_ROWS, COLUMNS, CHUNK_ROWS, 0.1, 8
    )
    more = np.full((3 * CHUNK_ROWS, COLUMNS), 5, dtype="<f4")

    async def main() -> None:
        await state.write(data.nbytes, more.tobytes())  # 3 new chunks: a new shape
        await state.write(0, (data[:CHUNK_ROWS] + 1).tobytes())
        await writeback.flush_array(state)

    trio.run(main)
    puts = [i for i, (what, key) in enumerate(store.events) if what == "put"]
    (zarray,) = [i for i, (what, key) in enumerate(store.events) if key == ".zarray"]
    assert len(puts) == 4 and max(puts) < zarray, store.events
    expected = np.concatenate([data, more])
    expected[:CHUNK_ROWS] += 1
    np.testing.assert_array_equal(stored(tmp_path), expected)


def test_a_shrinks_deletions_go_at_once_after_its_metadata(tmp_path: Path) -> None:
    chunks = 16
    state, writeback, store, data = v2_array(
        tmp_path, chunks * CHUNK_ROWS, COLUMNS, CHUNK_ROWS, 0.2, 8
    )

    async def main() -> float:
        state.truncate(CHUNK_ROWS * COLUMNS * 4)  # one chunk left
        started = time.monotonic()
        await writeback.flush_array(state)
        return time.monotonic() - started

    elapsed = trio.run(main)
    deletes = [i for i, (what, _) in enumerate(store.events) if what == "delete"]
    (zarray,) = [i for i, (_, key) in enumerate(store.events) if key == ".zarray"]
    assert len(deletes) == chunks - 1 and min(deletes) > zarray, store.events
    assert store.most_in_flight == 8
    assert elapsed < chunks * 0.2 / 2
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["0.0"]
    np.testing.assert_array_equal(stored(tmp_path), data[:CHUNK_ROWS])


def test_a_flush_of_every_array_puts_all_their_chunks_at_once(tmp_path: Path) -> None:
    """.zarrfs/flush and unmount: six arrays of two chunks each, twelve PUTs at once."""
    names = [f"a{i}" for i in range(6)]
    originals = {
        name: zlib_array(tmp_path / name, 2 * CHUNK_ROWS, COLUMNS, CHUNK_ROWS) for name in names
    }
    store, writeback = slow_store(tmp_path, 0.2, 32)
    states = {name: open_v2(store, writeback, name) for name in names}

    async def main() -> float:
        for name, state in states.items():
            await state.write(0, (originals[name] + 1).tobytes())
        started = time.monotonic()
        await writeback.flush_all()
        return time.monotonic() - started

    elapsed = trio.run(main)
    assert store.most_in_flight == 12
    assert elapsed < 12 * 0.2 / 2
    for name in names:
        np.testing.assert_array_equal(stored(tmp_path / name), originals[name] + 1)


class GatedSync(DirectoryStore):
    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.gate = threading.Event()
        self.synced: list[list[str]] = []

    def sync(self, keys: list[str]) -> None:
        assert self.gate.wait(10)
        self.synced.append(keys)


def test_a_sync_returns_only_once_a_sync_under_way_made_its_keys_durable(
    tmp_path: Path,
) -> None:
    """Two flushes at once: the first's sync took the second's keys too; the second
    must not return (an fsync, a close) before those keys are durable."""
    store = GatedSync(str(tmp_path))
    storing = Storing(store, threads=2)
    done: list[str] = []

    async def sync(name: str) -> None:
        await storing.sync()
        done.append(name)

    async def main() -> None:
        storing.replaced("a/0.0")
        storing.replaced("b/0.0")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sync, "first")
            await trio.sleep(0.05)
            nursery.start_soon(sync, "second")
            await trio.sleep(0.2)
            assert done == [], "returned while its keys were still being synced"
            store.gate.set()

    trio.run(main)
    assert sorted(done) == ["first", "second"]
    assert store.synced == [["a/0.0", "b/0.0"]]


def test_shards_are_put_at_once_and_each_shard_by_one_batch_at_a_time(tmp_path: Path) -> None:
    """Two flushes of different inner chunks of the same shards: the second waits for
    the first's PUT of each shard and rebuilds it from what it stored."""
    shape, inner, shard = (64, 48), (8, 12), (32, 24)  # 4 shards of 8 inner chunks
    data = np.arange(64 * 48, dtype="<i4").reshape(shape)
    z = zarr.create_array(
        store=str(tmp_path), shape=shape, chunks=inner, shards=shard, dtype="<i4", fill_value=-1
    )
    z[...] = data
    state, writeback, store = v3_array(tmp_path, 0.2, 8)
    new = data + 1000
    row = 48 * 4

    async def main() -> None:
        # Inner chunk row 0 (shards (0, 0), (0, 1)) and 4 (shards (1, 0), (1, 1)).
        await state.write(0, new[0:8].tobytes())
        await state.write(32 * row, new[32:40].tobytes())
        first = [(state, i) for i in state.dirty]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writeback.batches.gather, first)
            await wait_for(lambda: store.in_flight == 4, "the four shards not put at once")
            # Inner chunk rows 1 and 5, of the same four shards, while they are put.
            await state.write(8 * row, new[8:16].tobytes())
            await state.write(40 * row, new[40:48].tobytes())
            nursery.start_soon(writeback.flush_array, state)

    trio.run(main)
    assert store.most_in_flight == 4
    assert store.most_per_key == 1, "one shard's PUTs never overlap"
    assert all(count == 2 for count in store.puts.values()) and len(store.puts) == 4
    expected = data.copy()
    for rows in (slice(0, 16), slice(32, 48)):
        expected[rows] = new[rows]
    np.testing.assert_array_equal(stored(tmp_path), expected)


def test_write_behind_and_the_periodic_flush_put_at_once(tmp_path: Path) -> None:
    chunks = 16
    state, writeback, store, data = v2_array(
        tmp_path, chunks * CHUNK_ROWS, COLUMNS, CHUNK_ROWS, 0.2, 8
    )
    writeback.periodic.interval = 0.05
    new = data + 3
    raw = new.tobytes()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writeback.run_write_behind)
            for offset in range(0, 8 * CHUNK, 512):  # a stream: stored behind it
                await state.write(offset, raw[offset : offset + 512])
            await wait_for(lambda: len(store.puts) >= 7, "write-behind stored too little")
            behind = store.most_in_flight
            store.most_in_flight = 0
            for index in range(8, chunks):  # random writes: the periodic flush's
                await state.write(index * CHUNK, raw[index * CHUNK : (index + 1) * CHUNK])
            nursery.start_soon(writeback.run_periodic)
            await wait_for(lambda: not state.dirty and not state.frozen, "not flushed")
            nursery.cancel_scope.cancel()
        assert behind > 1, "write-behind put one chunk at a time"
        assert store.most_in_flight > 1, "the periodic flush put one chunk at a time"

    trio.run(main)
    np.testing.assert_array_equal(stored(tmp_path), new)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    written=st.sets(st.integers(0, 11), min_size=1),
    failing=st.sets(st.integers(0, 11)),
    threads=st.integers(1, 6),
    flushes=st.integers(1, 3),
)
def test_any_flush_stores_all_but_the_failed_puts(
    written: set[int], failing: set[int], threads: int, flushes: int
) -> None:
    """Chunks written, some PUTs failing, one to three flushes at once: never more
    PUTs in flight than the bound; each flush fails if a chunk it stores fails; the
    failed chunks stay dirty and read back as written; every other is stored."""
    chunks = 12
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        state, writeback, store, data = v2_array(
            root, chunks * CHUNK_ROWS, COLUMNS, CHUNK_ROWS, 0.01, threads
        )
        new = data * -1
        store.failing = {f"{i}.0" for i in failing}
        results: list[BaseException | None] = []

        async def flush() -> None:
            try:
                await writeback.flush_array(state)
                results.append(None)
            except StoreError as e:
                results.append(e)

        async def main() -> None:
            for i in sorted(written):
                await state.write(i * CHUNK, new[i * CHUNK_ROWS : (i + 1) * CHUNK_ROWS].tobytes())
            async with trio.open_nursery() as nursery:
                for _ in range(flushes):
                    nursery.start_soon(flush)
            failed = written & failing
            assert {i for i, _ in state.dirty} == failed
            assert all(r is not None for r in results) == bool(failed)
            assert bytes(await state.read(0, data.nbytes)) == expected.tobytes()

        expected = data.copy()
        for i in written:
            rows = slice(i * CHUNK_ROWS, (i + 1) * CHUNK_ROWS)
            expected[rows] = new[rows]
        trio.run(main)
        assert store.most_in_flight <= threads
        assert store.most_per_key <= 1
        on_disk = expected.copy()
        for i in written & failing:
            rows = slice(i * CHUNK_ROWS, (i + 1) * CHUNK_ROWS)
            on_disk[rows] = data[rows]
        np.testing.assert_array_equal(stored(root), on_disk)
