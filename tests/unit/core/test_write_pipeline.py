"""Batches in a pipeline: the next batch stages while the previous one commits, in
order; write-behind's memory is bounded and not cached. No mount."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio

from tests.support.batches import CHUNK, FlakyStore, make, stored, stream_behind, wait_for
from zarrfs.core.write import behind as behind_module
from zarrfs.errors import StoreError


class GatedStore(FlakyStore):
    """Commits wait for ``gate``; records the keys staged, in order."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.gate = threading.Event()
        self.gate.set()
        self.staged_keys: list[str] = []
        self.committing = threading.Event()

    def stage(self, key: str, value: bytes) -> Any:
        self.staged_keys.append(key)
        return super().stage(key, value)

    def commit(self, staged: list[Any]) -> None:
        self.committing.set()
        assert self.gate.wait(10), "gate never opened"
        super().commit(staged)


def gated(tmp_path: Path) -> tuple[Any, Any, GatedStore, np.ndarray]:
    state, writeback, flaky, data = make(tmp_path)
    store = GatedStore(flaky.root)
    writeback.storing.store = store
    state.cache.loader.store = store
    return state, writeback, store, data


async def wait_thread_event(event: threading.Event) -> None:
    assert await trio.to_thread.run_sync(event.wait, 10)


def test_the_next_batch_stages_while_one_commits_and_commits_after_it(
    tmp_path: Path,
) -> None:
    state, writeback, store, data = gated(tmp_path)
    new = data + 100
    newest = data + 200

    async def main() -> None:
        await state.write(0, new[:8].tobytes())  # chunks 0 and 1
        store.gate.clear()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writeback.batches.gather, [(state, (0, 0)), (state, (1, 0))])
            await wait_thread_event(store.committing)
            # The first batch is committing; chunks 2 and 3 stage meanwhile.
            await state.write(8 * data.shape[1] * 4, new[8:16].tobytes())
            second = [(state, (2, 0)), (state, (3, 0))]
            nursery.start_soon(writeback.batches.gather, second)
            await wait_for(lambda: len(store.staged_keys) == 4, "no staging during a commit")
            # Chunk 0 again: it must wait until the first batch has stored the older one.
            await state.write(0, newest[:4].tobytes())
            nursery.start_soon(writeback.batches.gather, [(state, (0, 0))])
            await trio.sleep(0.2)
            assert sorted(store.staged_keys) == ["0.0", "1.0", "2.0", "3.0"]
            assert store.commits == []
            store.gate.set()
        assert store.commits == [2, 2, 1], "commits kept the order batches staged in"
        assert store.staged_keys[-1] == "0.0"

    trio.run(main)
    expected = new.copy()
    expected[:4] = newest[:4]
    expected[16:] = data[16:]
    np.testing.assert_array_equal(stored(tmp_path), expected)


def test_fsync_waits_for_a_chunk_an_earlier_batch_holds_and_fails(tmp_path: Path) -> None:
    """The earlier (write-behind) batch fails and gives the chunk back: the fsync that
    started meanwhile must store it, not return with it dirty."""
    state, writeback, store, data = gated(tmp_path)
    new = data - 5

    async def main() -> None:
        await state.write(0, new[:4].tobytes())
        store.gate.clear()
        store.failing = True
        failures: list[BaseException] = []

        async def behind() -> None:
            try:
                await writeback.batches.gather([(state, (0, 0))])
            except StoreError as e:
                failures.append(e)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(behind)
            await wait_thread_event(store.committing)
            assert not state.dirty, "the chunk is held by the first batch"
            nursery.start_soon(writeback.flush_array, state)
            await trio.sleep(0.1)
            store.failing = False  # checked when the gate opens: the first batch fails
            store.gate.set()
        assert failures, "the first batch should have failed"
        assert not state.dirty

    store_failing_once(store)
    trio.run(main)
    np.testing.assert_array_equal(stored(tmp_path)[:4], new[:4])


def store_failing_once(store: GatedStore) -> None:
    """Make the gated commit fail when it was called while ``failing`` was set."""
    real = GatedStore.commit

    def commit(staged: list[Any]) -> None:
        failing = store.failing
        store.committing.set()
        assert store.gate.wait(10)
        if failing:
            for item in staged:
                Path(item.temp).unlink()
            raise StoreError("fdatasync: input/output error", 5)
        real(store, staged)

    store.commit = commit  # type: ignore[method-assign]


def test_write_behind_chunks_are_not_kept_in_the_chunk_cache(tmp_path: Path) -> None:
    state, writeback, store, data = make(tmp_path)
    new = data * 3

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writeback.run_write_behind)
            await stream_behind(state, store, new.tobytes())
            for index in ((0, 0), (1, 0), (2, 0)):
                assert not state.cache.has(state.meta.path, index)
            nursery.cancel_scope.cancel()
        assert bytes(await state.read(0, 12 * CHUNK // 4)) == new[:12].tobytes()

    trio.run(main)


def test_chunks_stored_behind_a_stream_lend_their_memory_to_the_next(tmp_path: Path) -> None:
    """A streaming writer's chunks are made in memory that stored chunks gave back
    (not fresh pages, which fault on the thread answering requests), and what is
    stored and read back is what was written."""
    state, writeback, store, data = make(tmp_path)
    new = data * 5
    raw = new.tobytes()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writeback.run_write_behind)
            for offset in range(0, len(raw), 512):
                await state.write(offset, raw[offset : offset + 512])
                await trio.sleep(0)  # let write-behind store what is finished
            await wait_for(lambda: sum(store.commits) >= 7, "write-behind stored too little")
            await writeback.flush_all()
            nursery.cancel_scope.cancel()
        assert bytes(await state.read(0, len(raw))) == raw

    trio.run(main)
    assert state.cache.counters.buffers_recycled > 0, "every chunk was made in fresh memory"
    np.testing.assert_array_equal(stored(tmp_path), new)


@pytest.mark.parametrize("bound", ["limit", "write-cache-size"])
def test_a_streaming_writer_waits_when_too_far_ahead_of_the_encoders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bound: str
) -> None:
    state, writeback, store, data = gated(tmp_path)
    if bound == "limit":
        monkeypatch.setattr(behind_module, "BEHIND_LIMIT", CHUNK)
    else:
        writeback.ledger.budget = CHUNK  # a small write cache bounds it too
    writeback.storing.pool.threads = 1  # the limit is then max(one chunk, two chunks)
    raw = (data + 1).tobytes()

    async def main() -> None:
        store.gate.clear()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writeback.run_write_behind)
            for c in range(3):
                await state.write(c * CHUNK, raw[c * CHUNK : (c + 1) * CHUNK])
                await trio.sleep(0.05)  # let write-behind take what is queued
            await state.write(3 * CHUNK, raw[3 * CHUNK : 4 * CHUNK])
            with trio.move_on_after(0.3) as waited:
                await writeback.relieve()
            assert waited.cancelled_caught, "the writer ran on with the encoders stuck"
            store.gate.set()
            with trio.fail_after(10):
                await writeback.relieve()
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_batches_sharing_chunks_in_opposite_orders_do_not_wait_for_each_other(
    tmp_path: Path,
) -> None:
    """Two batches (say write-behind and an fsync) share a whole chunk and a partly
    written one, listed in opposite orders. The first batch is slow to merge the
    partial chunk with the stored one; the second finds it loaded and goes ahead.
    Neither may hold one chunk while waiting for the other batch's."""
    state, writeback, _, data = gated(tmp_path)
    cache_get = state.cache.get
    calls = 0

    async def slow_first_merge(meta: Any, index: Any, **kwargs: Any) -> Any:
        nonlocal calls
        chunk = await cache_get(meta, index, **kwargs)
        calls += 1
        if calls == 1:
            await trio.sleep(0.3)  # the first batch's merge resumes late
        return chunk

    state.cache.get = slow_first_merge  # type: ignore[method-assign]
    whole = (data[:4] + 1).tobytes()  # chunk 0, all of it
    part = (data[4:5] + 2).tobytes()  # the first row of chunk 1

    async def main() -> None:
        await state.write(0, whole)
        await state.write(CHUNK, part)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writeback.batches.gather, [(state, (0, 0)), (state, (1, 0))])
            await trio.sleep(0.1)
            nursery.start_soon(writeback.batches.gather, [(state, (1, 0)), (state, (0, 0))])
        assert not state.dirty

    # Batches are shielded from cancellation, so a deadlock is caught from outside.
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            trio.run(main)
            outcome.append(None)
        except BaseException as e:
            outcome.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(20)
    assert outcome, "the two batches wait for each other"
    if outcome[0] is not None:
        raise outcome[0]
    expected = data.copy()
    expected[:4] += 1
    expected[4:5] += 2
    np.testing.assert_array_equal(stored(tmp_path), expected)
