"""The parts of write-back (core/write/), each on its own, without a mount."""

from __future__ import annotations

import errno
import json
import logging
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import trio
import trio.testing

from tests.support.stores import v2_zarray
from zarrfs.core.arrays import ArrayState
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.write import ratelimit
from zarrfs.core.write.admission import Admission
from zarrfs.core.write.behind import WriteBehind
from zarrfs.core.write.chunkstate import Dirty
from zarrfs.core.write.documents import Documents
from zarrfs.core.write.ledger import Ledger
from zarrfs.core.write.periodic import PeriodicFlush
from zarrfs.core.write.ratelimit import RETRY_FIRST, RETRY_MAX, Backoff, RateLimitedLog
from zarrfs.core.write.storing import Storing
from zarrfs.core.write.writeback import WriteBack
from zarrfs.errors import StoreError
from zarrfs.formats.metadata.v2 import parse_array
from zarrfs.stores.directory import DirectoryStore


def dirty(nbytes: int, *, partial: bool = False, since: float = 0.0) -> Dirty:
    data = np.zeros(nbytes, np.uint8)
    return Dirty(data, np.zeros(nbytes, bool) if partial else None, since)


def array(held: tuple[Any, ...] = ()) -> Any:
    """What the ledger asks of an array state: the units a batch holds."""
    return SimpleNamespace(chunks=SimpleNamespace(held=lambda: list(held)))


def backoff() -> Backoff:
    return Backoff(RateLimitedLog(logging.getLogger("test")))


class Gathered:
    """Stands for ``Batches``: records what it is asked to store, and stores it
    (the chunks leave the ledger) unless ``error`` is set."""

    def __init__(self, ledger: Ledger, error: StoreError | None = None) -> None:
        self.ledger = ledger
        self.error = error
        self.calls: list[list[Any]] = []

    async def gather(self, jobs: Any, units: Any = (), *, keep: bool = True, rewrite: Any = ()):
        jobs = list(jobs)
        self.calls.append(jobs)
        if self.error is not None:
            raise self.error
        for state, index in jobs:
            self.ledger.dropped(state, index)


# -- Documents ----------------------------------------------------------------------------


def test_documents_are_a_read_only_mapping_replaced_by_name() -> None:
    root = Documents({".zgroup": b"{}", ".zmetadata": b"old"})
    node = Documents({".zarray": b"a"}, root)
    assert dict(node) == {".zarray": b"a"} and node.root is root and root.root is None
    node.replace(".zarray", b"b")
    assert node[".zarray"] == b"b" and len(node) == 1
    with pytest.raises(KeyError):
        node.replace(".zattrs", b"{}")  # the node's files were listed without it
    with pytest.raises(TypeError):
        node[".zarray"] = b"c"  # type: ignore[index]


def test_documents_are_their_own_copy() -> None:
    given = {".zarray": b"a"}
    node = Documents(given)
    given[".zarray"] = b"changed"
    assert node[".zarray"] == b"a"


# -- Ledger -------------------------------------------------------------------------------


def test_the_ledger_counts_each_chunk_once_at_its_latest_cost() -> None:
    ledger, state = Ledger(budget=1000), array()
    ledger.track(state, (0,), dirty(100))
    ledger.track(state, (0,), dirty(100, partial=True))  # replaced: data and mask
    ledger.track(state, (1,), dirty(50))
    assert ledger.dirty_bytes == 250
    ledger.dropped(state, (0,))
    ledger.dropped(state, (0,))  # twice: nothing more
    assert ledger.dirty_bytes == 50 and not ledger.over_budget()


def test_the_oldest_chunks_bring_the_cache_down_to_half_the_budget() -> None:
    ledger, state = Ledger(budget=300), array()
    for i in range(5):
        ledger.track(state, (i,), dirty(100))
    assert ledger.over_budget()
    assert ledger.oldest() == [(state, (0,)), (state, (1,)), (state, (2,)), (state, (3,))]


def test_the_ledger_knows_what_is_old_and_which_arrays_hold_anything() -> None:
    ledger = Ledger(budget=1 << 20)
    written, resized, holding, done = array(), array(), array(held=((0,),)), array()
    ledger.track(written, (0,), dirty(10, since=1.0))
    ledger.track(written, (1,), dirty(10, since=5.0))
    assert ledger.dirty_before(2.0) == [(written, (0,))]
    ledger.resized(resized)
    first = ledger.resized_before(time.monotonic())
    ledger.resized(resized)  # since when is kept from the first
    assert first == [resized] and ledger.resized_before(0.0) == []
    ledger.holding(holding)
    ledger.holding(done)  # holds nothing any more: forgotten
    assert {id(s) for s in ledger.states()} == {id(written), id(resized), id(holding)}
    ledger.resize_taken(resized)
    assert {id(s) for s in ledger.states()} == {id(written), id(holding)}


# -- Backoff and the failure log ------------------------------------------------------------


def test_the_backoff_doubles_up_to_its_maximum_and_a_store_ends_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr(ratelimit.time, "monotonic", lambda: now[0])
    off = backoff()
    assert not off.backing_off() and off.failure is None
    failure = StoreError("full", errno.ENOSPC)
    delays = []
    for _ in range(9):
        off.failed(failure)
        start = now[0]
        while off.backing_off():
            now[0] += 0.25
        delays.append(now[0] - start)
    assert delays[0] == RETRY_FIRST and delays[1] == 2 * RETRY_FIRST
    assert delays[-1] == RETRY_MAX and off.failure is failure
    off.stored()
    assert off.failure is None and not off.backing_off()
    off.failed(failure)
    assert off.backing_off()
    now[0] += RETRY_FIRST
    assert not off.backing_off(), "the first delay again after a store succeeded"


def test_the_failure_log_keeps_one_line_per_interval(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    now = [1000.0]
    monkeypatch.setattr(ratelimit.time, "monotonic", lambda: now[0])
    log = RateLimitedLog(logging.getLogger("test.ratelimit"), interval=10)
    with caplog.at_level(logging.WARNING, "test.ratelimit"):
        assert log(logging.WARNING, "failed %d", 1)
        now[0] += 9
        assert not log(logging.WARNING, "failed %d", 2)
        now[0] += 1
        assert log(logging.WARNING, "failed %d", 3)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["failed 1", "failed 3 (1 more like it in the last 10s not logged)"]


# -- Storing ------------------------------------------------------------------------------


class SyncStore(DirectoryStore):
    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.synced: list[list[str]] = []
        self.commits: list[list[Any]] = []
        self.failing = False

    def sync(self, keys: list[str]) -> None:
        if self.failing:
            raise StoreError("fsync: input/output error", errno.EIO)
        self.synced.append(list(keys))

    def commit(self, staged: list[Any]) -> None:
        self.commits.append(staged)
        super().commit(staged)


def test_keys_not_synced_are_kept_for_the_next_sync(tmp_path: Path) -> None:
    store = SyncStore(str(tmp_path))
    storing = Storing(store, threads=2)

    async def main() -> None:
        storing.replaced("a/0.0")
        storing.replaced("a/1.0")
        storing.replaced("a/0.0")
        store.failing = True
        with pytest.raises(StoreError):
            await storing.sync()
        store.failing = False
        await storing.sync()
        await storing.sync()  # nothing left: no call

    trio.run(main)
    assert store.synced == [["a/0.0", "a/1.0"]]


def test_a_batch_with_nothing_staged_commits_nothing(tmp_path: Path) -> None:
    store = SyncStore(str(tmp_path))
    storing = Storing(store, threads=2)
    trio.run(storing.commit, [])
    assert store.commits == []


# -- write-behind, admission, the periodic flush -----------------------------------------


def behind_parts(budget: int) -> tuple[Ledger, Gathered, WriteBehind, Any]:
    ledger = Ledger(budget)
    batches = Gathered(ledger)
    encoders = SimpleNamespace(threads=1)
    counters = SimpleNamespace(errors=0)
    behind = WriteBehind(ledger, encoders, batches, backoff(), counters)  # type: ignore[arg-type]
    return ledger, batches, behind, counters


def test_write_behind_stores_each_queued_chunk_once_in_background_batches() -> None:
    _, batches, behind, _ = behind_parts(budget=1 << 20)
    state = SimpleNamespace(meta=SimpleNamespace(chunk_nbytes=64))

    async def main() -> None:
        behind.queue(state, (0,))
        behind.queue(state, (0,))
        behind.queue(state, (1,))
        assert not behind.too_far_behind(), "nothing is held back before it runs"
        async with trio.open_nursery() as nursery:
            nursery.start_soon(behind.run)
            with trio.fail_after(5):
                while not batches.calls:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert batches.calls == [[(state, (0,)), (state, (1,))]]


def test_a_writer_too_far_ahead_of_write_behind_waits() -> None:
    ledger = Ledger(100)  # the budget is smaller than the limit
    gate = trio.Event()

    class Slow(Gathered):
        async def gather(self, jobs: Any, units: Any = (), **kwargs: Any) -> None:
            await gate.wait()
            await super().gather(jobs, units, **kwargs)

    encoders = SimpleNamespace(threads=1)  # two batches in flight at most
    behind = WriteBehind(ledger, encoders, Slow(ledger), backoff(), SimpleNamespace(errors=0))  # type: ignore[arg-type]
    state = SimpleNamespace(meta=SimpleNamespace(chunk_nbytes=30))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(behind.run)
            for i in range(3):  # two batches take them and wait for the gate
                behind.queue(state, (i,))
                await trio.testing.wait_all_tasks_blocked()
            assert not behind.too_far_behind()  # 90 bytes: within max(100, 2 * 1 * 30)
            behind.queue(state, (3,))  # no slot for a third batch: queued
            assert behind.too_far_behind()
            with trio.move_on_after(0.2) as waited:
                await behind.wait()
            assert waited.cancelled_caught
            gate.set()
            with trio.fail_after(5):
                await behind.wait()
            nursery.cancel_scope.cancel()

    trio.run(main)


def admission(
    budget: int, error: StoreError | None = None
) -> tuple[Ledger, Gathered, Backoff, Admission]:
    ledger = Ledger(budget)
    batches = Gathered(ledger, error)
    off = backoff()
    _, _, behind, _ = behind_parts(budget)
    return ledger, batches, off, Admission(ledger, off, behind, batches)  # type: ignore[arg-type]


def test_admission_flushes_the_oldest_while_the_cache_is_full() -> None:
    ledger, batches, _, admit = admission(budget=250)  # down to 125 bytes
    state = array()
    for i in range(4):
        ledger.track(state, (i,), dirty(100))
    trio.run(admit.admit)
    assert batches.calls == [[(state, (0,)), (state, (1,)), (state, (2,))]]
    assert ledger.dirty_bytes == 100


def test_admission_refuses_with_the_stores_errno_only_while_backing_off() -> None:
    ledger, batches, off, admit = admission(budget=50)
    ledger.track(array(), (0,), dirty(100))
    off.failed(StoreError("no space left", errno.ENOSPC))
    with pytest.raises(StoreError) as refused:
        trio.run(admit.admit)
    assert refused.value.errno == errno.ENOSPC and batches.calls == []
    off.stored()
    trio.run(admit.admit)
    assert ledger.dirty_bytes == 0


def test_relief_past_the_budget_keeps_a_failure_for_later() -> None:
    failure = StoreError("input/output error", errno.EIO)
    ledger, batches, off, admit = admission(budget=50, error=failure)
    ledger.track(array(), (0,), dirty(100))
    trio.run(admit.relieve)  # logged, not raised: fsync or close reports it
    assert len(batches.calls) == 1
    off.failed(failure)
    trio.run(admit.relieve)  # backing off: not tried again
    assert len(batches.calls) == 1


def test_the_periodic_flush_stores_what_is_older_than_the_interval() -> None:
    ledger = Ledger(1 << 20)
    batches = Gathered(ledger)
    flushed: list[Any] = []

    async def flush(state: Any) -> None:
        flushed.append(state)
        ledger.resize_taken(state)

    resizes = SimpleNamespace(flush=flush)
    counters = SimpleNamespace(errors=0)
    periodic = PeriodicFlush(0.05, ledger, batches, resizes, backoff(), counters)  # type: ignore[arg-type]
    old, young = array(), array()
    old.dirty = {}
    ledger.track(old, (0,), dirty(10, since=time.monotonic()))
    ledger.resized(old)
    ledger.track(young, (0,), dirty(10, since=time.monotonic() + 3600))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(periodic.run)
            with trio.fail_after(5):
                while not flushed:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert batches.calls[0] == [(old, (0,))] and flushed == [old]
    assert ledger.states() == [young]


# -- the facade and a resize's documents ----------------------------------------------------


def consolidated_group(root: Path) -> dict[str, bytes]:
    """A v2 group with consolidated metadata naming its array ``a`` (8 rows)."""
    zarray = v2_zarray([8, 4], [2, 4])
    docs = {".zgroup": {"zarr_format": 2}, "a/.zarray": zarray}
    written = {
        ".zgroup": json.dumps(docs[".zgroup"]).encode(),
        "a/.zarray": json.dumps(zarray).encode(),
        ".zmetadata": json.dumps({"metadata": docs, "zarr_consolidated_format": 1}).encode(),
    }
    for key, value in written.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(value)
    return written


def test_a_resize_replaces_the_arrays_document_and_the_consolidated_entry(
    tmp_path: Path,
) -> None:
    written = consolidated_group(tmp_path)
    store = DirectoryStore(str(tmp_path))
    cache = ChunkCache(store, 1 << 20)
    wb = WriteBack(store, cache, budget=1 << 30, interval=3600)
    root = Documents({k: written[k] for k in (".zgroup", ".zmetadata")})
    docs = Documents({".zarray": written["a/.zarray"]}, root)
    state = ArrayState(parse_array("a", written["a/.zarray"], None), docs, cache, wb)

    async def main() -> None:
        await state.write(0, np.arange(32, dtype="<i4").tobytes())
        state.truncate(3 * 4 * 4)  # 3 rows
        assert wb.states() == [state] and wb.dirty_bytes > 0
        await wb.flush_array(state)

    trio.run(main)
    assert json.loads(docs[".zarray"])["shape"] == [3, 4]
    shown = json.loads(root[".zmetadata"])["metadata"]["a/.zarray"]
    assert shown["shape"] == [3, 4]
    assert (tmp_path / "a/.zarray").read_bytes() == docs[".zarray"]
    assert (tmp_path / ".zmetadata").read_bytes() == root[".zmetadata"]
    assert wb.states() == [] and wb.dirty_bytes == 0 and wb.failure is None
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [".zarray", "0.0", "1.0"]
