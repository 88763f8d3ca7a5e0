"""Resizes racing the background writer, without a mount: a store whose staging or
commit of chosen keys waits on a gate the test opens, so a shrink, a grow, a write
or a flush lands exactly while a batch holds a unit (see docs/concurrency.md,
"A resize is a unit of work")."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio
import zarr

from tests.support.stores import CountingStore
from zarrfs.core.arrays import ArrayState
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.write.documents import Documents
from zarrfs.core.write.writeback import WriteBack
from zarrfs.errors import ZarrfsError
from zarrfs.formats.metadata.v2 import parse_array
from zarrfs.formats.metadata.v3 import parse_node
from zarrfs.formats.model import ArrayMeta

SHAPE, INNER, SHARD = (64, 48), (8, 12), (32, 24)  # 2 x 2 shards of 8 inner chunks
ROW = SHAPE[1] * 4


class GatedStore(CountingStore):
    """Staging or reading a key that ``gate_keys`` names waits until ``release()``;
    ``entered`` is set when the first such call has started."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.gate_keys: set[str] = set()
        self.entered = threading.Event()
        self._open = threading.Event()
        self.staged_keys: list[str] = []
        self.deleted_keys: list[str] = []
        self.scan_gate: threading.Event | None = None  # listings wait for it when set
        self.scanning = threading.Event()

    def stage(self, key: str, value: Any) -> Any:
        self.staged_keys.append(key)
        if key in self.gate_keys:
            self.entered.set()
            assert self._open.wait(30), "the test never opened the gate"
        return super().stage(key, value)

    def get_buffer(self, key: str, *, limit: int | None = None) -> Any:
        if key in self.gate_keys:
            self.entered.set()
            assert self._open.wait(30), "the test never opened the gate"
        return super().get_buffer(key, limit=limit)

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        if key in self.gate_keys:
            self.entered.set()
            assert self._open.wait(30), "the test never opened the gate"
        return super().get_range(key, start, length)

    def delete(self, key: str, *, durable: bool = True) -> None:
        self.deleted_keys.append(key)
        super().delete(key, durable=durable)

    def release(self) -> None:
        self._open.set()

    def scan(self, prefix: str) -> Any:
        if self.scan_gate is not None:
            self.scanning.set()
            assert self.scan_gate.wait(30), "the test never opened the listing's gate"
        return super().scan(prefix)


def sharded(root: Path, rows: int = SHAPE[0], value: int | None = None) -> np.ndarray:
    """A sharded array of ``rows`` rows holding ``arange`` (or ``value``), fill -1."""
    shape = (rows, SHAPE[1])
    z = zarr.create_array(
        store=str(root), shape=shape, dtype="<i4", chunks=INNER, shards=SHARD, fill_value=-1
    )
    if value is None:
        data = np.arange(np.prod(shape), dtype="<i4").reshape(shape)
    else:
        data = np.full(shape, value, "<i4")
    z[...] = data
    return data


def open_state(
    root: Path, *, sharded_array: bool, budget: int = 1 << 30
) -> tuple[ArrayState, GatedStore, WriteBack]:
    store = GatedStore(str(root))
    cache = ChunkCache(store, 1 << 24)
    wb = WriteBack(store, cache, budget=budget, interval=3600)
    if sharded_array:
        document = (root / "zarr.json").read_bytes()
        meta = parse_node("", document)
        documents = Documents({"zarr.json": document})
    else:
        document = (root / ".zarray").read_bytes()
        meta = parse_array("", document, None)
        documents = Documents({".zarray": document})
    assert isinstance(meta, ArrayMeta)
    return ArrayState(meta, documents, cache, wb), store, wb


def oracle(root: Path) -> np.ndarray:
    return np.asarray(zarr.open_array(str(root), mode="r")[...])


async def until(store: GatedStore) -> None:
    """Wait (without blocking trio) until a gated stage has started."""
    await trio.to_thread.run_sync(store.entered.wait, 10)
    assert store.entered.is_set()


async def in_background(
    nursery: trio.Nursery, function: Callable[[], Awaitable[Any]], errors: list[BaseException]
) -> None:
    async def run() -> None:
        try:
            await function()
        except BaseException as e:
            errors.append(e)

    nursery.start_soon(run)


def internal(errors: list[BaseException]) -> list[BaseException]:
    """Everything that is not one of zarrfs's own errors (those carry an errno)."""
    return [e for e in errors if not isinstance(e, ZarrfsError)]


def test_a_shard_held_by_a_batch_when_the_array_shrinks_past_it(tmp_path: Path) -> None:
    """The batch storing shard row 1 finishes after a truncate to 0 rows, and an
    fsync meanwhile waits for it: neither raises an internal error, and what the
    truncate removed stays removed."""
    sharded(tmp_path)
    state, store, wb = open_state(tmp_path, sharded_array=True)
    store.gate_keys = {"c/1/0"}
    new = np.full((32, SHAPE[1]), 7, "<i4")
    errors: list[BaseException] = []

    async def main() -> None:
        await state.write(32 * ROW, new.tobytes())
        async with trio.open_nursery() as nursery:
            await in_background(
                nursery, lambda: wb.batches.gather([(state, i) for i in state.dirty]), errors
            )
            await until(store)
            state.truncate(0)
            await in_background(nursery, lambda: wb.flush_array(state), errors)
            await trio.sleep(0.1)
            store.release()
        await wb.flush_array(state)
        assert await state.read(0, 1) == b""
        state.truncate(SHAPE[0] * ROW)
        await wb.flush_array(state)
        assert np.all(np.frombuffer(await state.read(0, SHAPE[0] * ROW), "<i4") == -1)

    trio.run(main)
    assert internal(errors) == []
    assert np.all(oracle(tmp_path) == -1)


def test_a_shard_stored_after_a_truncate_began_is_not_left_holding_old_rows(
    tmp_path: Path,
) -> None:
    """Rows appended and being stored when the array is truncated to 0 rows: the
    store of their shard commits after the truncate's flush started, and growing
    back must read fill value (never the old rows), through the state and in the
    store."""
    sharded(tmp_path, rows=32, value=1)
    state, store, wb = open_state(tmp_path, sharded_array=True)
    store.gate_keys = {"c/1/0"}
    errors: list[BaseException] = []

    async def main() -> None:
        await state.write(32 * ROW, np.full((32, SHAPE[1]), 7, "<i4").tobytes())
        async with trio.open_nursery() as nursery:
            await in_background(
                nursery, lambda: wb.batches.gather([(state, i) for i in state.dirty]), errors
            )
            await until(store)
            state.truncate(0)
            state.truncate(SHAPE[0] * ROW)
            await in_background(nursery, lambda: wb.flush_metadata(state), errors)
            await trio.sleep(0.2)  # the flush lists the store while the shard is staged
            store.release()
        await wb.flush_array(state)
        got = np.frombuffer(await state.read(0, SHAPE[0] * ROW), "<i4")
        assert np.all(got == -1), "a truncate's removed rows came back"

    trio.run(main)
    assert internal(errors) == []
    assert np.all(oracle(tmp_path) == -1)


def test_a_shard_written_while_a_resize_flush_waits_is_not_deleted(tmp_path: Path) -> None:
    """A flush of a shrink and grow waits for a shard another batch holds; meanwhile
    rows of a shard it found stale are written and stored. It must not delete
    that shard afterwards: the written rows survive, in the state and the store."""
    data = sharded(tmp_path)
    state, store, wb = open_state(tmp_path, sharded_array=True)
    store.gate_keys = {"c/0/0"}
    errors: list[BaseException] = []
    rows = np.full((8, SHAPE[1]), 5, "<i4")

    async def main() -> None:
        await state.write(0, data[:8].tobytes())  # shard (0, 0) and (0, 1) dirty
        async with trio.open_nursery() as nursery:
            await in_background(nursery, lambda: wb.batches.gather([(state, (0, 0))]), errors)
            await until(store)
            state.truncate(16 * ROW)  # shard row 1 and half of shard row 0 go
            state.truncate(SHAPE[0] * ROW)
            await in_background(nursery, lambda: wb.flush_metadata(state), errors)
            await trio.sleep(0.2)
            await state.write(40 * ROW, rows.tobytes())  # inside shard row 1
            await in_background(
                nursery,
                lambda: wb.batches.gather([(state, i) for i in state.dirty if i[0] == 5]),
                errors,
            )
            await trio.sleep(0.2)
            store.release()
        await wb.flush_array(state)
        got = np.frombuffer(await state.read(40 * ROW, 8 * ROW), "<i4")
        assert np.array_equal(got, rows.reshape(-1)), "written rows were lost"

    trio.run(main)
    assert internal(errors) == []
    want = np.full(SHAPE, -1, "<i4")
    want[:16] = data[:16]
    want[40:48] = 5
    assert np.array_equal(oracle(tmp_path), want)


@pytest.mark.parametrize("shrink_to", [0, 4, 10])
@pytest.mark.parametrize("sharded_array", [False, True])
def test_an_unaligned_write_racing_a_shrink_lands(
    tmp_path: Path, shrink_to: int, sharded_array: bool
) -> None:
    """A write that starts and ends inside elements waits for the stored chunks of
    its edge elements; another handle shrinks the array meanwhile. The write lands
    as if it came after the shrink (growing the array again), with no internal
    error, and everything else the shrink removed reads as fill."""
    if sharded_array:
        data = sharded(tmp_path)
        key = "c/1/0"
    else:
        data = np.arange(np.prod(SHAPE), dtype="<i4").reshape(SHAPE)
        z = zarr.create_array(
            store=str(tmp_path),
            shape=SHAPE,
            dtype="<i4",
            chunks=(8, SHAPE[1]),
            fill_value=-1,
            zarr_format=2,
        )
        z[...] = data
        key = "6.0"
    state, store, wb = open_state(tmp_path, sharded_array=sharded_array)
    store.gate_keys = {key}
    offset = 50 * ROW + 2  # inside element (50, 0), up to the end of row 52
    payload = b"\xab" * (3 * ROW - 2)
    errors: list[BaseException] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await in_background(nursery, lambda: state.write(offset, payload), errors)
            await until(store)
            state.truncate(shrink_to * ROW)
            await trio.sleep(0.05)
            store.release()
        assert errors == []
        await wb.flush_array(state)
        return await state.read(0, state.size)

    got = np.frombuffer(trio.run(main), np.uint8)
    raw = data.tobytes()
    want = bytearray(np.full(53 * SHAPE[1], -1, "<i4").tobytes())
    want[: shrink_to * ROW] = raw[: shrink_to * ROW]
    want[offset : offset + len(payload)] = payload
    # The edge element keeps the bytes the write did not cover: fill value, as the
    # shrink removed its row.
    assert state.size == 53 * ROW
    assert bytes(got) == bytes(want)
    assert internal(errors) == []


@pytest.mark.parametrize("sharded_array", [False, True])
def test_writers_refilling_the_cache_are_never_refused_by_a_healthy_store(
    tmp_path: Path, sharded_array: bool
) -> None:
    """Four writers through a write cache of a few chunks, as the FUSE layer calls
    them (admit, write, relieve): while one flushes to make room, the others fill
    it again. No store fails, so no write may be refused (ENOSPC); they wait."""
    if sharded_array:
        data = sharded(tmp_path)
    else:
        data = np.arange(np.prod(SHAPE), dtype="<i4").reshape(SHAPE)
        z = zarr.create_array(
            store=str(tmp_path), shape=SHAPE, dtype="<i4", chunks=INNER, zarr_format=2
        )
        z[...] = data
    state, _, wb = open_state(tmp_path, sharded_array=sharded_array, budget=3 * 8 * 12 * 4)
    refused: list[BaseException] = []
    rng = np.random.default_rng(0)
    plans = [rng.integers(0, SHAPE[0], 60) for _ in range(4)]

    async def writer(rows: np.ndarray, value: int) -> None:
        for row in rows:
            try:
                await wb.admit()
            except ZarrfsError as e:
                refused.append(e)
                continue
            data[row] = value
            await state.write(int(row) * ROW, data[row].tobytes())
            await wb.relieve()
            await trio.sleep(0)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for number, rows in enumerate(plans):
                nursery.start_soon(writer, rows, 100 + number)
        await wb.flush_array(state)

    trio.run(main)
    assert refused == []
    assert np.array_equal(oracle(tmp_path), data)


def test_a_bug_in_a_background_store_costs_that_batch_not_the_writer(tmp_path: Path) -> None:
    """An unexpected exception in a write-behind batch or a periodic flush is
    logged and counted; the loops go on, the chunks stay dirty, and a later flush
    stores them."""
    sharded(tmp_path)
    state, _, wb = open_state(tmp_path, sharded_array=True)
    wb.periodic.interval = 0.05
    real_gather = wb.batches.gather
    failures = 0

    async def buggy_gather(*args: Any, **kwargs: Any) -> None:
        nonlocal failures
        if failures < 2:
            failures += 1
            raise IndexError("a bug")
        await real_gather(*args, **kwargs)

    wb.batches.gather = buggy_gather  # type: ignore[method-assign]

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wb.run_write_behind)
            nursery.start_soon(wb.run_periodic)
            await state.write(0, np.full((32, SHAPE[1]), 3, "<i4").tobytes())
            wb.behind(state, (3, 0))
            with trio.fail_after(10):
                while state.chunks.busy:
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert failures == 2 and wb.cache.counters.errors == 2
    assert np.all(oracle(tmp_path)[:32] == 3)


def test_a_rewrite_of_a_shard_a_shrink_left_beyond_the_end_stores_nothing(
    tmp_path: Path,
) -> None:
    """A resize's flush chose a shard to rewrite and waited for it; meanwhile the
    array shrank past the whole shard. The rewrite stores nothing (the shard is
    now wholly stale, for the next resize's flush to delete) instead of failing."""
    sharded(tmp_path)
    state, store, wb = open_state(tmp_path, sharded_array=True)

    async def main() -> None:
        state.truncate(40 * ROW)  # shard row 1 keeps one live inner chunk row
        state.truncate(8 * ROW)  # ... until this, before the rewrite is taken
        await wb.batches.gather([], rewrite=[(state, (1, 0)), (state, (1, 1))])
        assert "c/1/0" not in store.staged_keys
        await wb.flush_array(state)

    trio.run(main)
    assert oracle(tmp_path).shape == (8, SHAPE[1])
    shards = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("c/*/*") if p.is_file())
    assert shards == ["c/0/0", "c/0/1"]


def test_a_second_shrink_to_the_same_size_during_a_resize_flush_keeps_its_marks(
    tmp_path: Path,
) -> None:
    """A resize's flush lists the store while rows written after the shrink it
    stores are held by a batch, and the array is shrunk to the same size again
    meanwhile (so its lowest size is unchanged). The batch commits those rows after
    the listing: the flush must not take the second shrink for settled, or the rows
    it removed would come back."""
    sharded(tmp_path, rows=32, value=1)
    state, store, wb = open_state(tmp_path, sharded_array=True)
    store.scan_gate = threading.Event()
    store.gate_keys = {"c/1/0"}
    errors: list[BaseException] = []

    async def main() -> None:
        state.truncate(16 * ROW)
        async with trio.open_nursery() as nursery:
            await in_background(nursery, lambda: wb.flush_metadata(state), errors)
            await trio.to_thread.run_sync(store.scanning.wait, 10)  # listing, held
            await state.write(16 * ROW, np.full((32, SHAPE[1]), 9, "<i4").tobytes())
            await in_background(
                nursery, lambda: wb.batches.gather([(state, i) for i in state.dirty]), errors
            )
            await until(store)  # the batch holds shard (1, 0)
            state.truncate(16 * ROW)  # the same size again: the rows go
            state.truncate(48 * ROW)  # and grow back: they must read as fill
            store.scan_gate.set()  # the flush lists without the batch's shard
            await trio.sleep(0.2)
            store.release()
        got = np.frombuffer(await state.read(16 * ROW, 32 * ROW), "<i4")
        assert np.all(got == -1), "rows a truncate removed came back"
        state.truncate(SHAPE[0] * ROW)
        await wb.flush_array(state)
        got = np.frombuffer(await state.read(16 * ROW, 48 * ROW), "<i4")
        assert np.all(got == -1), "rows a truncate removed came back"

    trio.run(main)
    assert internal(errors) == []
    assert np.all(oracle(tmp_path)[16:] == -1)


def test_a_shrink_between_taking_a_shard_and_storing_it(tmp_path: Path) -> None:
    """A batch takes a shard, and the array shrinks past it before the task that
    stores it has started: the shard is stored as the array was when it was
    taken (the resize's flush deletes it), never staged against the new grid."""
    data = sharded(tmp_path)
    state, _, wb = open_state(tmp_path, sharded_array=True)
    real_hand_over = wb.batches._hand_over

    def hand_over_then_shrink(state: ArrayState, unit: Any, members: Any) -> None:
        real_hand_over(state, unit, members)
        if unit == (1, 0):
            state.truncate(8 * ROW)

    wb.batches._hand_over = hand_over_then_shrink  # type: ignore[method-assign]

    async def main() -> None:
        await state.write(32 * ROW, np.full((32, SHAPE[1]), 4, "<i4").tobytes())
        await wb.batches.gather([(state, i) for i in state.dirty])
        await wb.flush_array(state)

    trio.run(main)
    assert np.array_equal(oracle(tmp_path), data[:8])
