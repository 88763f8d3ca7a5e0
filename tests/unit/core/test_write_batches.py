"""Chunks stored in batches (stage, commit, sync) and write-behind, without a mount."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio

from tests.support.batches import CHUNK, CHUNK_ROWS, COLUMNS, ROWS, make, stored, stream_behind
from zarrfs.errors import StoreError
from zarrfs.stores.directory import TEMP_MARKER, DirectoryStore


def test_one_commit_per_flush(tmp_path: Path) -> None:
    state, writeback, store, data = make(tmp_path)
    new = -data

    async def main() -> None:
        await state.write(0, new.tobytes())
        await writeback.flush_array(state)

    trio.run(main)
    assert store.commits == [ROWS // CHUNK_ROWS], "all chunks in one batch"
    np.testing.assert_array_equal(stored(tmp_path), new)
    assert not list(tmp_path.glob(f"*{TEMP_MARKER}*"))


def test_a_failed_commit_keeps_every_chunk_of_the_batch(tmp_path: Path) -> None:
    state, writeback, store, data = make(tmp_path)
    new = data + 1000

    async def main() -> None:
        await state.write(0, new.tobytes())
        store.failing = True
        with pytest.raises(StoreError) as info:
            await writeback.flush_array(state)
        assert info.value.errno == errno.EIO
        assert len(state.dirty) == ROWS // CHUNK_ROWS, "nothing lost"
        assert bytes(await state.read(0, data.nbytes)) == new.tobytes()
        np.testing.assert_array_equal(stored(tmp_path), data)  # the old version, whole
        store.failing = False
        await writeback.flush_array(state)
        assert not state.dirty

    trio.run(main)
    np.testing.assert_array_equal(stored(tmp_path), new)
    assert not list(tmp_path.glob(f"*{TEMP_MARKER}*"))


def test_write_behind_stores_finished_chunks_of_a_stream(tmp_path: Path) -> None:
    state, writeback, store, data = make(tmp_path)
    new = data * 2

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writeback.run_write_behind)
            # Every chunk the stream finished is stored without an fsync.
            await stream_behind(state, store, new.tobytes())
            assert not state.dirty
            on_disk = stored(tmp_path)
            np.testing.assert_array_equal(on_disk[:12], new[:12])
            np.testing.assert_array_equal(on_disk[12:], data[12:])
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_random_writes_are_not_stored_behind(tmp_path: Path) -> None:
    state, writeback, store, _ = make(tmp_path)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writeback.run_write_behind)
            for chunk in (5, 2, 7, 0):  # each write ends a chunk, none continues another
                end = (chunk + 1) * CHUNK
                await state.write(end - 256, bytes(256))
            await trio.sleep(0.3)
            assert store.commits == []
            assert len(state.dirty) == 4
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_a_whole_chunk_write_is_adopted_and_copied_on_write(tmp_path: Path) -> None:
    state, writeback, _, data = make(tmp_path)
    request = (data[4:8] * 3).tobytes()  # exactly chunk 1, as pyfuse3 hands it over
    expected = data.copy()
    expected[4:8] = data[4:8] * 3
    patch = np.full(10, -7.0, dtype="<f4")

    async def main() -> None:
        await state.write(CHUNK, request)
        adopted = state.dirty[(1, 0)].data
        assert not adopted.flags.writeable, "the request's bytes were not adopted"
        await state.write(CHUNK + 40, patch.tobytes())  # copy on write, then patch
        assert state.dirty[(1, 0)].data is not adopted
        assert request == (data[4:8] * 3).tobytes(), "the request's bytes changed"
        await writeback.flush_array(state)

    trio.run(main)
    expected.reshape(-1)[4 * COLUMNS + 10 : 4 * COLUMNS + 20] = patch
    np.testing.assert_array_equal(stored(tmp_path), expected)


def test_commit_syncs_each_staged_file_before_any_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Durability is per file (fdatasync of the staged temp file), all before the first
    rename: a crash can leave old chunks, never a renamed chunk whose bytes are not down.
    Nothing else of the filesystem is synced (no syncfs/sync of other users' data)."""
    store = DirectoryStore(str(tmp_path))
    staged = [store.stage(f"g/{i}.0", bytes([i]) * 1000) for i in range(4)]
    events: list[tuple[str, str]] = []
    real_fdatasync, real_replace = os.fdatasync, os.replace

    def fdatasync(fd: int) -> None:
        events.append(("fdatasync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fdatasync(fd)

    def replace(
        src: str, dst: str, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None
    ) -> None:
        where = "" if src_dir_fd is None else os.readlink(f"/proc/self/fd/{src_dir_fd}")
        events.append(("replace", os.path.join(where, src)))
        real_replace(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    def forbidden(*args: Any) -> None:
        raise AssertionError("the whole filesystem must not be synced")

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "sync", forbidden)
    store.commit(staged)
    temps = [s.temp for s in staged]
    assert events == [("fdatasync", t) for t in temps] + [("replace", t) for t in temps]
    for i in range(4):
        assert (tmp_path / "g" / f"{i}.0").read_bytes() == bytes([i]) * 1000
    assert not list((tmp_path / "g").glob(f"*{TEMP_MARKER}*"))
