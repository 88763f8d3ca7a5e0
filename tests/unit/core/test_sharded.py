"""Sharded Zarr v3 arrays without a mount: inner chunks read by byte ranges (never
the whole shard), shard indexes cached within the cache budget, writes that store
whole shards, and bad shards failing one read each."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.stores import CountingStore
from zarrfs.core.arrays import ArrayState
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.write.documents import Documents
from zarrfs.core.write.staging import stage_unit
from zarrfs.core.write.writeback import WriteBack
from zarrfs.errors import ChunkError
from zarrfs.formats.grid.shards import ENTRY_NBYTES, index_nbytes
from zarrfs.formats.metadata.v3 import parse_node
from zarrfs.formats.model import ArrayMeta
from zarrfs.stores.directory import DirectoryStore

SHAPE, INNER, SHARD = (64, 48), (8, 12), (32, 24)  # 4 shards of 8 inner chunks
INDEX = index_nbytes(8, True)


def make_array(root: Path, *, data: np.ndarray | None = None, **kwargs: Any) -> np.ndarray:
    options: dict[str, Any] = {"chunks": INNER, "shards": SHARD, "fill_value": -1}
    options.update(kwargs)
    z = zarr.create_array(store=str(root), shape=SHAPE, dtype="<i4", **options)
    if data is None:
        data = np.arange(np.prod(SHAPE), dtype="<i4").reshape(SHAPE)
    z[...] = data
    return data


def open_state(
    root: Path, *, cache_bytes: int = 1 << 24, writeback: bool = True
) -> tuple[ArrayState, CountingStore, WriteBack | None]:
    store = CountingStore(str(root))
    cache = ChunkCache(store, cache_bytes)
    wb = WriteBack(store, cache, budget=1 << 30, interval=3600) if writeback else None
    document = (root / "zarr.json").read_bytes()
    meta = parse_node("", document)
    assert isinstance(meta, ArrayMeta) and meta.shards is not None and meta.unsupported is None
    return ArrayState(meta, Documents({"zarr.json": document}), cache, wb), store, wb


def oracle(root: Path) -> np.ndarray:
    return np.asarray(zarr.open_array(str(root), mode="r")[...])


def element_offset(row: int, column: int) -> int:
    return (row * SHAPE[1] + column) * 4


def test_one_inner_chunk_is_read_by_its_index_and_its_own_bytes(tmp_path: Path) -> None:
    data = make_array(tmp_path, compressors=None)
    state, store, _ = open_state(tmp_path, writeback=False)
    shard_size = (tmp_path / "c" / "1" / "1").stat().st_size

    async def main() -> None:
        # one element of inner chunk (5, 2): shard (1, 1), inner (1, 0) there
        got = await state.read(element_offset(40, 24), 4)
        assert np.frombuffer(got, "<i4")[0] == data[40, 24]

    trio.run(main)
    assert store.gets["c/1/1"] == 0  # never the whole shard
    ranges = [r for r in store.ranges if r[0] == "c/1/1"]
    assert ranges[0] == ("c/1/1", shard_size - INDEX, INDEX)
    assert len(ranges) == 2 and ranges[1][2] == INNER[0] * INNER[1] * 4
    assert sum(length for _, _, length in ranges) < shard_size


def test_the_index_is_read_once_per_shard(tmp_path: Path) -> None:
    data = make_array(tmp_path)
    state, store, _ = open_state(tmp_path, writeback=False)

    async def main() -> None:
        for row in range(0, 32, 8):  # four inner chunks of shard (0, 0)
            got = await state.read(element_offset(row, 0), 4)
            assert np.frombuffer(got, "<i4")[0] == data[row, 0]

    trio.run(main)
    assert store.sizes["c/0/0"] == 1
    assert store.range_calls["c/0/0"] == 1 + 4


def test_shard_indexes_stay_within_the_cache_budget(tmp_path: Path) -> None:
    make_array(tmp_path)
    # room for one shard index and nothing else: indexes are evicted
    state, store, _ = open_state(tmp_path, cache_bytes=10 * ENTRY_NBYTES, writeback=False)

    async def main() -> None:
        for _ in range(2):
            await state.read(0, state.meta.nbytes)

    trio.run(main)
    assert state.cache.nbytes <= state.cache.max_bytes
    assert sum(store.sizes.values()) >= 4 + 3  # all but one read again after eviction


@pytest.mark.parametrize("location", ["start", "end"])
def test_missing_shards_and_inner_chunks_read_as_fill(tmp_path: Path, location: str) -> None:
    data = np.full(SHAPE, -1, "<i4")
    data[0:8, 0:12] = 5  # one inner chunk of shard (0, 0); the other shards absent
    make_array(tmp_path, data=data, shards={"shape": SHARD, "index_location": location})
    assert sorted(p.name for p in (tmp_path / "c" / "0").iterdir()) == ["0"]
    state, _, _ = open_state(tmp_path, writeback=False)

    async def main() -> bytes:
        return bytes(await state.read(0, state.meta.nbytes))

    assert trio.run(main) == data.tobytes()


def flush(state: ArrayState, wb: WriteBack) -> None:
    async def main() -> None:
        await wb.flush_array(state)

    trio.run(main)


def test_a_write_rewrites_its_shard_keeping_the_other_inner_chunks(tmp_path: Path) -> None:
    data = make_array(tmp_path)
    state, store, wb = open_state(tmp_path)
    assert wb is not None
    data[3, 30] = 12345

    async def main() -> None:
        await state.write(element_offset(3, 30), np.int32(12345).tobytes())
        await wb.flush_array(state)

    trio.run(main)
    assert np.array_equal(oracle(tmp_path), data)
    assert store.gets["c/0/1"] == 0  # kept inner chunks copied by ranges


def test_a_writer_of_whole_shards_never_reads_them(tmp_path: Path) -> None:
    make_array(tmp_path)
    state, store, wb = open_state(tmp_path)
    assert wb is not None
    new = -np.arange(np.prod(SHAPE), dtype="<i4").reshape(SHAPE) - 7

    async def main() -> None:
        await state.write(0, new.tobytes())
        await wb.flush_array(state)

    trio.run(main)
    assert np.array_equal(oracle(tmp_path), new)
    assert not store.ranges and not store.sizes and not store.gets


def test_fill_inner_chunks_are_left_out_and_empty_shards_deleted(tmp_path: Path) -> None:
    data = make_array(tmp_path)
    state, _, wb = open_state(tmp_path)
    assert wb is not None
    data[0:8, 0:12] = -1  # one inner chunk of shard (0, 0) becomes fill
    data[32:64, 24:48] = -1  # all of shard (1, 1)

    async def main() -> None:
        for row in range(64):
            await state.write(element_offset(row, 0), data[row].tobytes())
        await wb.flush_array(state)

    trio.run(main)
    assert not (tmp_path / "c" / "1" / "1").exists()
    assert np.array_equal(oracle(tmp_path), data)
    shard = (tmp_path / "c" / "0" / "0").read_bytes()
    index = np.frombuffer(shard[-INDEX:-4], "<u8").reshape(-1, 2)
    assert (index[0] == 2**64 - 1).all() and (index[1:] != 2**64 - 1).all()


def test_two_batches_holding_inner_chunks_of_one_shard_both_land(tmp_path: Path) -> None:
    """The later batch waits for the earlier: each rewrites the shard from the
    store as the other left it, so neither drops the other's inner chunk."""
    data = make_array(tmp_path)
    state, store, wb = open_state(tmp_path)
    assert wb is not None
    data[0, 0], data[9, 0] = 111, 222  # inner chunks (0, 0) and (1, 0) of shard (0, 0)
    order: list[str] = []
    real_stage = store.stage

    def slow_stage(key: str, value: bytes) -> Any:
        order.append(key)
        if len(order) == 1:
            import time

            time.sleep(0.3)  # the first batch is still staging when the second starts
        return real_stage(key, value)

    store.stage = slow_stage  # type: ignore[method-assign]

    async def main() -> None:
        await state.write(element_offset(0, 0), np.int32(111).tobytes())
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wb.batches.gather, [(state, (0, 0))])
            await trio.sleep(0.05)
            await state.write(element_offset(9, 0), np.int32(222).tobytes())
            nursery.start_soon(wb.batches.gather, [(state, (1, 0))])
        await wb.sync()

    trio.run(main)
    assert order == ["c/0/0", "c/0/0"]
    assert np.array_equal(oracle(tmp_path), data)


def test_reads_during_a_shard_rewrite_see_old_or_new_never_garbage(tmp_path: Path) -> None:
    data = make_array(tmp_path, compressors=None)
    state, _, wb = open_state(tmp_path)
    assert wb is not None

    async def main() -> None:
        async with trio.open_nursery() as nursery:

            async def writer() -> None:
                for value in range(20):
                    await state.write(element_offset(0, 0), np.int32(value).tobytes())
                    await wb.batches.gather([(state, (0, 0))])
                    await trio.sleep(0)

            async def reader() -> None:
                for _ in range(200):
                    state.cache.invalidate("")  # every read goes to the store
                    got = np.frombuffer(await state.read(element_offset(8, 0), 4), "<i4")
                    assert got[0] == data[8, 0]
                    await trio.sleep(0)

            nursery.start_soon(writer)
            nursery.start_soon(reader)

    trio.run(main)


def test_shrink_and_grow_forget_inner_chunks_of_a_kept_shard(tmp_path: Path) -> None:
    make_array(tmp_path)
    state, _, wb = open_state(tmp_path)
    assert wb is not None
    row = SHAPE[1] * 4

    async def main() -> None:
        state.truncate(16 * row)  # inside shard row 0: its inner rows 2 and 3 go
        await wb.flush_array(state)
        state.truncate(64 * row)
        await wb.flush_array(state)

    trio.run(main)
    want = np.full(SHAPE, -1, "<i4")
    want[:16] = np.arange(np.prod(SHAPE), dtype="<i4").reshape(SHAPE)[:16]
    assert np.array_equal(oracle(tmp_path), want)
    shards = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("c/*/*"))
    assert shards == ["c/0/0", "c/0/1"]


def corrupt(path: Path, how: str) -> None:
    shard = bytearray(path.read_bytes())
    if how == "crc":
        shard[-1] ^= 0xFF
    elif how == "short":
        shard = shard[: INDEX - 1]
    elif how == "past-end":
        entries = np.frombuffer(bytes(shard[-INDEX:-4]), "<u8").reshape(-1, 2).copy()
        entries[2] = (len(shard) + 100, 50)
        body = entries.tobytes()
        from zarrfs.formats.grid.shards import _crc32c

        shard[-INDEX:] = body + _crc32c(body).to_bytes(4, "little")
    elif how == "inner":
        shard[0:40] = b"\x00" * 40  # the first inner chunk's zstd frame
    path.write_bytes(bytes(shard))


@pytest.mark.parametrize("how", ["crc", "short", "past-end", "inner"])
def test_a_bad_shard_fails_its_reads_with_one_log_line(
    tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    data = make_array(tmp_path)
    corrupt(tmp_path / "c" / "0" / "0", how)
    state, _, _ = open_state(tmp_path, writeback=False)

    async def main() -> None:
        for _ in range(3):
            with pytest.raises(ChunkError) as info:
                await state.read(0, 4)
            text = str(info.value)
            assert "c/0/0" in text and "/" in text
        # the other shards still read
        got = await state.read(element_offset(40, 30), 4)
        assert np.frombuffer(got, "<i4")[0] == data[40, 30]

    with caplog.at_level(logging.ERROR):
        trio.run(main)
    lines = [r for r in caplog.records if "c/0/0" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    if how == "inner":
        assert "inner chunk (0, 0)" in lines[0].getMessage()


# -- property: a shard rewrite keeps exactly what it should ---------------------------


def _meta_for(root: Path) -> ArrayMeta:
    meta = parse_node("", (root / "zarr.json").read_bytes())
    assert isinstance(meta, ArrayMeta)
    return meta


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    stored=st.lists(st.booleans(), min_size=8, max_size=8),
    written=st.dictionaries(st.integers(0, 7), st.sampled_from(["fill", "data"]), max_size=8),
    dropped=st.sets(st.integers(0, 7)),
    location=st.sampled_from(["start", "end"]),
)
def test_stage_shard_merges_written_kept_and_dropped_inner_chunks(
    stored: list[bool], written: dict[int, str], dropped: set[int], location: str
) -> None:
    """Inner chunks written replace the stored ones (fill ones are left out),
    dropped ones go, the others are copied byte for byte; nothing else."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = np.full(SHAPE, -1, "<i4")
        grid = (SHARD[0] // INNER[0], SHARD[1] // INNER[1])
        boxes = [
            np.s_[r * INNER[0] : (r + 1) * INNER[0], c * INNER[1] : (c + 1) * INNER[1]]
            for r in range(grid[0])
            for c in range(grid[1])
        ]
        for position, present in enumerate(stored):
            if present:
                data[boxes[position]] = position + 1
        make_array(root, data=data, shards={"shape": SHARD, "index_location": location})
        meta = _meta_for(root)
        store = DirectoryStore(str(root))
        assert meta.shards is not None
        chunks = {}
        want = data.copy()
        for position, what in written.items():
            inner = meta.shards.geometry.inner_index((0, 0), position)
            value = -1 if what == "fill" else 100 + position
            chunks[inner] = np.full(INNER, value, "<i4")
            want[boxes[position]] = value
        for position in dropped - set(written):
            want[boxes[position]] = -1
        staged, index, _ = stage_unit(store, meta, (0, 0), chunks, dropped)
        if staged is not None:
            store.commit([staged])
        assert np.array_equal(oracle(root)[: SHARD[0], : SHARD[1]], want[: SHARD[0], : SHARD[1]])
        present = [bool((want[box] != -1).any()) for box in boxes]
        if not any(present):
            assert staged is None and index is None
            assert not (root / "c" / "0" / "0").exists()
        else:
            assert index is not None and list(index.present) == present
