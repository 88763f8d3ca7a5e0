"""The control directory ``.zarrfs/`` (views/control.py): ``stats`` and ``flush``,
through the Operations handlers, without a kernel; tests/mount/writes/test_control_mount.py
runs ``cat .zarrfs/stats`` and ``echo 1 > .zarrfs/flush`` on real mounts.
"""

from __future__ import annotations

import errno
import json
import logging
import os
from pathlib import Path
from typing import Any

import pyfuse3
import pytest
import trio
import zarr

from tests.support.control import (
    CHUNK_BYTES,
    CHUNKS,
    SHAPE,
    SIZE,
    STATS_KEYS,
    create,
    group_store,
    values,
)
from tests.support.handlers import ROOT, close, fuse_errno, open_dir, open_file, run
from tests.support.handlers import lookup_path as lookup
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.daemon.build import MountOptions, build_operations
from zarrfs.errors import ReadOnlyError, StoreError
from zarrfs.fuse.operations import Operations
from zarrfs.namespace.tree import Tree
from zarrfs.stores.directory import DirectoryStore
from zarrfs.views.control import FlushView, StatsView


def listing(ops: Operations, inode: int) -> list[str]:
    fh = run(open_dir, ops, inode)
    try:
        return [os.fsdecode(name) for name, _ in ops.dirs.get(fh)]
    finally:
        run(ops.releasedir, fh)


def read_all(ops: Operations, path: str) -> bytes:
    fh = open_file(ops, path, os.O_RDONLY)
    try:
        return bytes(run(ops.read, fh, 0, 1 << 20))
    finally:
        run(ops.release, fh)


def stats(ops: Operations) -> dict[str, Any]:
    return json.loads(read_all(ops, ".zarrfs/stats"))


def flush(ops: Operations) -> int:
    """``echo 1 > .zarrfs/flush``."""
    fh = open_file(ops, ".zarrfs/flush", os.O_WRONLY | os.O_TRUNC)
    try:
        return run(ops.write, fh, 0, b"1\n")
    finally:
        close(ops, fh)


def flush_errno(ops: Operations) -> int:
    with pytest.raises(pyfuse3.FUSEError) as info:
        flush(ops)
    return info.value.errno


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return group_store(tmp_path / "s.zarr")


@pytest.fixture
def ops(store: Path) -> Operations:
    return build_operations(str(store), MountOptions(flush_interval=3600))


def test_the_control_directory_is_listed_at_the_root(ops: Operations, store: Path) -> None:
    assert listing(ops, ROOT) == [".zarrfs", ".zattrs", ".zgroup", "a", "b", "group.nc"]
    control = lookup(ops, ".zarrfs")
    assert control.st_mode & 0o170777 == 0o040555
    assert listing(ops, control.st_ino) == ["flush", "refresh", "stats"]
    stats_attr, flush_attr = lookup(ops, ".zarrfs/stats"), lookup(ops, ".zarrfs/flush")
    assert (stats_attr.st_size, flush_attr.st_size) == (0, 0)
    assert stats_attr.st_mode & 0o777 == 0o444 and flush_attr.st_mode & 0o777 == 0o644
    for attr in (stats_attr, flush_attr):  # fresh on every read: the kernel keeps nothing
        info = run(ops.open, attr.st_ino, os.O_RDONLY, None)
        assert info.direct_io
        run(ops.release, info.fh)
    assert run(ops.listxattr, control.st_ino, None) == []  # no Zarr group
    assert read_all(ops, ".zarrfs/flush") == b""
    # Only mounts show it: a tree built for a tool (zarrfs tree, tests) does not.
    directory = DirectoryStore(str(store))
    tree = Tree(directory, ChunkCache(directory, 1 << 20))
    assert list(tree.entries(tree.root)) == [".zattrs", ".zgroup", "a", "b", "group.nc"]


def test_stats_is_json_with_every_counter(ops: Operations, store: Path) -> None:
    first = stats(ops)
    assert set(first) == STATS_KEYS
    assert first["store"] == str(store) and first["read_only"] is False
    assert first["last_store_error"] is None
    texts = ("store", "read_only", "last_store_error", "store_failing")
    numbers = {k: v for k, v in first.items() if k not in texts}
    assert all(isinstance(v, int | float) and v >= 0 for v in numbers.values()), numbers
    assert first["cache_size"] == MountOptions().cache_size
    assert first["write_cache_size"] == MountOptions().write_cache_size


def test_counters_follow_reads(ops: Operations, store: Path) -> None:
    before = stats(ops)
    assert read_all(ops, "a/array.raw") == values(1).tobytes()
    after = stats(ops)
    assert after["bytes_read"] - before["bytes_read"] == SIZE
    assert after["chunks_decoded"] - before["chunks_decoded"] == SHAPE[0] // CHUNKS[0]
    assert after["cache_misses"] - before["cache_misses"] == SHAPE[0] // CHUNKS[0]
    assert after["cache_hits"] == before["cache_hits"]
    assert after["cache_bytes"] == SIZE  # the four decoded chunks

    # The same bytes again: answered from the decoded chunks.
    assert read_all(ops, "a/array.raw") == values(1).tobytes()
    again = stats(ops)
    assert again["bytes_read"] - after["bytes_read"] == SIZE
    assert again["cache_hits"] - after["cache_hits"] == SHAPE[0] // CHUNKS[0]
    assert again["cache_misses"] == after["cache_misses"]
    assert again["chunks_decoded"] == after["chunks_decoded"]

    npy = read_all(ops, "a/array.npy")  # header and data both count
    assert stats(ops)["bytes_read"] - again["bytes_read"] == len(npy)
    assert read_all(ops, "a/.zarray")  # metadata documents are no array bytes
    assert stats(ops)["bytes_read"] - again["bytes_read"] == len(npy)


def test_flush_stores_every_dirty_chunk_of_every_array(ops: Operations, store: Path) -> None:
    patch = b"\xee" * 100
    stored = {name: (store / name / "1.0").read_bytes() for name in ("a", "b")}
    handles = []
    for name in ("a", "b"):  # handles kept open: their close would store the chunks
        fh = open_file(ops, f"{name}/array.raw")
        run(ops.write, fh, CHUNK_BYTES + 10, patch)
        handles.append(fh)
    dirty = stats(ops)
    assert dirty["dirty_chunks"] == 2 and dirty["dirty_bytes"] > 0
    assert all((store / n / "1.0").read_bytes() == stored[n] for n in stored), "stored early"

    assert flush(ops) == 2
    for name, old in stored.items():
        new = (store / name / "1.0").read_bytes()
        assert new == old[:10] + patch + old[110:], name
    after = stats(ops)
    assert (after["dirty_chunks"], after["dirty_bytes"], after["chunks_being_stored"]) == (0, 0, 0)
    assert after["chunks_encoded"] - dirty["chunks_encoded"] == 2
    assert after["bytes_stored"] - dirty["bytes_stored"] == 2 * CHUNK_BYTES
    assert after["errors"] == 0 and after["store_failures"] == 0

    # A chunk written back to its fill value is deleted, and counted.
    for fh in handles:
        run(ops.write, fh, 0, bytes(CHUNK_BYTES))
    flush(ops)
    assert not (store / "a" / "0.0").exists() and not (store / "b" / "0.0").exists()
    assert stats(ops)["chunks_deleted"] - after["chunks_deleted"] == 2
    for fh in handles:
        close(ops, fh)


def test_a_failing_flush_returns_the_store_error(
    ops: Operations, store: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    directory = ops.tree.store
    commit = directory.commit

    def full_for_a(staged: list[Any]) -> None:
        if any(value.key.startswith("a/") for value in staged):
            raise StoreError("storing: No space left on device", errno.ENOSPC)
        commit(staged)

    handles = []
    for name in ("a", "b"):
        fh = open_file(ops, f"{name}/array.raw")
        run(ops.write, fh, 5, b"\x01\x02\x03")
        handles.append(fh)
    monkeypatch.setattr(directory, "commit", full_for_a)
    with caplog.at_level(logging.ERROR):
        assert flush_errno(ops) == errno.ENOSPC
    failed = stats(ops)
    assert failed["errors"] == 1 and failed["store_failures"] == 1
    assert "No space left on device" in failed["last_store_error"]
    assert failed["store_failing"] is False, "b's chunk was stored after a's failed"
    assert failed["dirty_chunks"] == 1, "nothing is lost: a's chunk stays dirty"
    # every array is tried: b's chunk is stored although a's failed first
    assert (store / "b" / "0.0").read_bytes()[5:8] == b"\x01\x02\x03"
    assert (store / "a" / "0.0").read_bytes()[5:8] != b"\x01\x02\x03"

    monkeypatch.undo()
    assert flush(ops) == 2
    assert (store / "a" / "0.0").read_bytes()[5:8] == b"\x01\x02\x03"
    done = stats(ops)
    assert done["dirty_chunks"] == 0 and done["errors"] == 1
    assert done["last_store_error"] == failed["last_store_error"], "kept: it says what failed"
    for fh in handles:
        close(ops, fh)


def test_flush_tries_at_once_even_while_a_full_write_cache_backs_off(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Writes past --write-cache-size are refused while stores fail and back off;
    # an explicit flush is no write of data: it tries the store at once.
    ops = build_operations(str(store), MountOptions(write_cache_size=CHUNK_BYTES))
    directory = ops.tree.store

    def full(staged: list[Any]) -> None:
        raise StoreError("storing: No space left on device", errno.ENOSPC)

    monkeypatch.setattr(directory, "commit", full)
    fh = open_file(ops, "a/array.raw")
    run(ops.write, fh, 0, b"\x07" * (2 * CHUNK_BYTES))  # over the budget: stores, fails
    assert fuse_errno(ops.write, fh, 0, b"\x08") == errno.ENOSPC  # refused: backing off
    assert stats(ops)["store_failing"] is True
    monkeypatch.undo()
    assert flush(ops) == 2
    assert (store / "a" / "1.0").read_bytes() == b"\x07" * CHUNK_BYTES
    assert stats(ops)["dirty_chunks"] == 0 and stats(ops)["store_failing"] is False
    close(ops, fh)


def test_a_shrink_counts_the_chunks_it_deletes_and_the_document_it_writes(
    ops: Operations, store: Path
) -> None:
    fh = open_file(ops, "a/array.raw", os.O_WRONLY | os.O_TRUNC)
    close(ops, fh)  # the shrink is stored
    assert not any((store / "a" / f"{row}.0").exists() for row in range(4))
    shrunk = stats(ops)
    assert shrunk["chunks_deleted"] == SHAPE[0] // CHUNKS[0]
    assert shrunk["bytes_stored"] == len((store / "a" / ".zarray").read_bytes())
    assert shrunk["chunks_encoded"] == 0


def test_a_pending_partial_row_fails_the_flush_with_einval(ops: Operations, store: Path) -> None:
    # Appending a row and a half: the whole row is stored, the half row is pending.
    fh = open_file(ops, "a/array.raw")
    run(ops.write, fh, SIZE, b"\x05" * (SHAPE[1] + SHAPE[1] // 2))
    assert flush_errno(ops) == errno.EINVAL
    assert json.loads((store / "a" / ".zarray").read_text())["shape"][0] == SHAPE[0] + 1
    assert (store / "a" / "4.0").read_bytes()[: SHAPE[1]] == b"\x05" * SHAPE[1]
    assert stats(ops)["errors"] == 0, "EINVAL is the caller's, not a failure"
    run(ops.write, fh, SIZE + SHAPE[1] + SHAPE[1] // 2, b"\x06" * (SHAPE[1] // 2))
    assert flush(ops) == 2
    close(ops, fh)


def test_read_only_mounts_show_flush_but_refuse_writing_it(store: Path) -> None:
    ops = build_operations(str(store), MountOptions(read_only=True))
    assert listing(ops, lookup(ops, ".zarrfs").st_ino) == ["flush", "refresh", "stats"]
    attr = lookup(ops, ".zarrfs/flush")
    assert attr.st_mode & 0o777 == 0o444
    for flags in (os.O_WRONLY, os.O_WRONLY | os.O_TRUNC, os.O_RDWR):
        assert fuse_errno(ops.open, attr.st_ino, flags, None) == errno.EROFS
    assert read_all(ops, ".zarrfs/flush") == b""
    snapshot = stats(ops)
    assert snapshot["read_only"] is True and snapshot["dirty_chunks"] == 0
    with pytest.raises(ReadOnlyError):
        run(FlushView(None).write, 0, b"1")


def test_a_store_node_named_like_the_control_directory_is_hidden(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = group_store(tmp_path / "s.zarr")
    zarr.open_group(str(root / ".zarrfs"), mode="w", zarr_format=2)
    create(root / ".zarrfs" / "x", values(3))
    ops = build_operations(str(root), MountOptions(read_only=True))
    with caplog.at_level(logging.WARNING):
        assert listing(ops, ROOT) == [".zarrfs", ".zattrs", ".zgroup", "a", "b", "group.nc"]
    lines = [r for r in caplog.records if ".zarrfs" in r.getMessage()]
    assert len(lines) == 1 and "hiding" in lines[0].getMessage()
    assert listing(ops, lookup(ops, ".zarrfs").st_ino) == ["flush", "refresh", "stats"]


def test_an_array_at_the_root_still_shows_the_control_directory(tmp_path: Path) -> None:
    create(tmp_path / "a.zarr", values(4))
    ops = build_operations(str(tmp_path / "a.zarr"), MountOptions(read_only=True))
    names = listing(ops, ROOT)
    assert ".zarrfs" in names and "array.raw" in names and ".zarray" in names
    assert read_all(ops, "array.raw") == values(4).tobytes()
    assert stats(ops)["bytes_read"] == SIZE


def test_failures_are_counted_refusals_are_not(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (store / "a" / "2.0").write_bytes(b"short")  # not the chunk's size: corrupt
    ops = build_operations(str(store), MountOptions(read_only=True))
    fh = open_file(ops, "a/array.raw", os.O_RDONLY)
    offset = 2 * CHUNK_BYTES
    for _ in range(2):
        assert fuse_errno(ops.read, fh, offset, 10) == errno.EIO
    assert fuse_errno(ops.lookup, ROOT, b"missing") == errno.ENOENT
    assert fuse_errno(ops.setattr, ROOT, None, None, None, None) == errno.EROFS
    counted = stats(ops)
    assert counted["errors"] == 2, "each EIO returned"
    assert counted["decode_failures"] == 1, "the chunk was found bad once (then remembered)"
    assert counted["store_failures"] == 0

    def broken(key: str, *, limit: int | None = None) -> bytes:
        raise StoreError(f"reading {key!r}: Input/output error", errno.EIO)

    monkeypatch.setattr(ops.tree.store, "get_buffer", broken)
    assert fuse_errno(ops.read, fh, 0, 10) == errno.EIO
    failed = stats(ops)
    assert failed["errors"] == 3 and failed["decode_failures"] == 1
    assert failed["store_failures"] == 1 and "'a/0.0'" in failed["last_store_error"]
    run(ops.release, fh)


def test_a_reader_of_a_whole_text_never_gets_the_tail_of_a_newer_one() -> None:
    counter = {"n": 1}

    def render() -> dict[str, Any]:
        counter["n"] *= 1000  # each text longer than the one before
        return {"n": counter["n"]}

    view = StatsView(render)

    async def check() -> None:
        first = await view.read(0, 4096)  # reader A: the whole text at once
        second = await view.read(0, 4096)  # reader B: made afresh, longer
        assert len(second) > len(first) and json.loads(second)["n"] > json.loads(first)["n"]
        assert await view.read(len(first), 4096) == b""  # A's end of file
        assert await view.read(len(second), 4096) == b""
        # A reader taking it in pieces gets one text (the newest) whole.
        third = await view.read(0, 5)
        rest = await view.read(5, 4096)
        assert json.loads(third + rest)["n"] == counter["n"]

    trio.run(check)
