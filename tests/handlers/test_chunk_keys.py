"""Chunk keys through the handlers, without a mount: keys a Zarr reader opens by name
(never listed) are found exactly as stored, in every layout; a value stored anew while
it is read fails the read; the nodes the kernel forgets are dropped and numbered apart
from the listed ones; a key that cannot be stored or is no plain value fails with an
errno."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
import zarr.storage

from tests.support.handlers import (
    close,
    fuse_errno,
    lookup_errno,
    lookup_path,
    open_file,
    read_key,
    run,
)
from tests.support.stores import run_promptly
from zarrfs.daemon.build import MountOptions, build_operations
from zarrfs.errors import NotFoundError, StoreError
from zarrfs.namespace import recent
from zarrfs.namespace.nodes import KeyDirNode, KeyFileNode


def small_store(root: Path) -> Path:
    zarr.open_group(str(root), mode="w", zarr_format=2)
    array = zarr.create_array(
        str(root / "a"), shape=(4, 4), chunks=(2, 4), dtype="<i4", compressors=None, zarr_format=2
    )
    array[...] = np.arange(16, dtype="<i4").reshape(4, 4)
    return root


def test_a_value_stored_anew_while_it_is_read_fails_the_read(tmp_path: Path) -> None:
    root = small_store(tmp_path / "s.zarr")
    ops = build_operations(str(root), MountOptions(flush_interval=3600))
    key = lookup_path(ops, "a/0.0")
    assert key.st_size == 32 and key.entry_timeout == key.attr_timeout == 0
    fh = run(ops.open, key.st_ino, os.O_RDONLY, None).fh
    assert bytes(run(ops.read, fh, 0, 16)) == np.arange(4, dtype="<i4").tobytes()
    assert lookup_path(ops, "a/0.0").st_ino == key.st_ino  # the same version: one inode
    writer = open_file(ops, "a/array.raw")
    run(ops.write, writer, 0, np.full(8, 9, dtype="<i4").tobytes())
    # written, not stored: the value the reader reads is still the one it opened
    assert bytes(run(ops.read, fh, 16, 8)) == np.arange(4, 6, dtype="<i4").tobytes()
    # another opener's lookup stores the chunk: a new version, another inode; the
    # first reader's next read fails rather than mixing the two
    again = lookup_path(ops, "a/0.0")
    assert again.st_ino != key.st_ino
    assert fuse_errno(ops.read, fh, 24, 8) == errno.EIO
    close(ops, writer)
    run(ops.release, fh)
    fh = run(ops.open, again.st_ino, os.O_RDONLY, None).fh
    assert bytes(run(ops.read, fh, 0, 64)) == np.full(8, 9, dtype="<i4").tobytes()
    run(ops.release, fh)


def test_a_lookup_stores_the_chunks_written_first(tmp_path: Path) -> None:
    root = small_store(tmp_path / "s.zarr")
    ops = build_operations(str(root), MountOptions(flush_interval=3600))
    writer = open_file(ops, "a/array.raw")
    run(ops.write, writer, 32, np.full(8, 5, dtype="<i4").tobytes())
    assert (root / "a" / "1.0").read_bytes() == np.arange(8, 16, dtype="<i4").tobytes()
    key = lookup_path(ops, "a/1.0")
    assert (root / "a" / "1.0").read_bytes() == np.full(8, 5, dtype="<i4").tobytes()
    fh = run(ops.open, key.st_ino, os.O_RDONLY, None).fh
    assert bytes(run(ops.read, fh, 0, 64)) == np.full(8, 5, dtype="<i4").tobytes()
    run(ops.release, fh)
    close(ops, writer)


def test_chunk_keys_the_kernel_forgets_are_dropped(tmp_path: Path) -> None:
    root = small_store(tmp_path / "s.zarr")
    ops = build_operations(str(root), MountOptions(read_only=True))
    array = lookup_path(ops, "a")
    first = lookup_path(ops, "a/1.0").st_ino
    assert lookup_path(ops, "a/1.0").st_ino == first  # one node while the kernel holds it
    run(ops.forget, [(first, 2)])
    with pytest.raises(NotFoundError):
        ops.inodes.node(first)
    assert not ops.attrs.held(first)
    assert lookup_path(ops, "a/1.0").st_ino != first
    run(ops.forget, [(array.st_ino, 1)])
    assert ops.inodes.node(array.st_ino) is not None  # listed nodes keep their number


def test_chunk_keys_are_numbered_apart_from_listed_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "s.zarr"
    group = zarr.open_group(str(root), mode="w", zarr_format=3)
    for i in range(6):
        array = group.create_array(
            f"a{i}", shape=(4, 4), chunks=(2, 4), dtype="<i4", compressors=None
        )
        array[...] = np.full((4, 4), i + 1, dtype="<i4")  # no fill value: stored
    zarr.consolidate_metadata(str(root))
    # Listed nodes are dropped and made again at once: their numbers are positions.
    monkeypatch.setattr(recent, "MAX_LOADED_NODES", 2)
    ops = build_operations(str(root), MountOptions(read_only=True))
    assert ops.tree.consolidated is not None
    directory = lookup_path(ops, "a0/c").st_ino
    key = lookup_path(ops, "a0/c/1/0").st_ino
    paths = [f"a{i}/{name}" for i in range(6) for name in ("array.raw", "info")]
    listed = {path: lookup_path(ops, path).st_ino for path in paths}
    assert len({directory, key, *listed.values()}) == 2 + len(listed)
    assert isinstance(ops.inodes.node(directory), KeyDirNode)
    assert isinstance(ops.inodes.node(key), KeyFileNode)
    assert ops.inodes.parent(key) is None
    for path, inode in listed.items():
        assert ops.inodes.node(inode).name == path.split("/")[1]
        assert ops.inodes.parent(inode).name == path.split("/")[0]  # type: ignore[union-attr]
    stored = (root / "a0" / "c" / "1" / "0").read_bytes()
    assert read_key(ops, "a0/c/1/0") == stored
    assert ops.inodes.lookup_count(key) == 2
    run(ops.forget, [(key, 2)])
    with pytest.raises(NotFoundError):
        ops.inodes.node(key)
    assert ops.inodes.node(directory).name == "c"  # still held by the kernel
    again = lookup_path(ops, "a0/c/1/0").st_ino
    assert again not in {key, directory, *listed.values()}
    assert read_key(ops, "a0/c/1/0") == stored
    for path, inode in listed.items():
        assert lookup_path(ops, path).st_ino == inode


LEGACY = ["v1-zarr-1.1.0/i4_2d_blosc_lz4", "v0-zarr-0.4.0/i4_2d_lz4_shuffle"]


@pytest.mark.parametrize("name", LEGACY)
def test_legacy_chunk_keys_are_found(corpus: Path, name: str) -> None:
    root = corpus / "data" / "generated" / name
    ops = build_operations(str(root), MountOptions(read_only=True))
    documents = {"meta", "attrs", "__zmeta__", "__zattr__"}
    keys = {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and p.name not in documents
    }
    assert len(keys) > 1
    for key, value in keys.items():
        assert read_key(ops, key) == value, key
    bad = ["..", ".", "0", "0.0.0", "00.0", "__zdata__/0.0", "0.0.blosc", "meta/0.0"]
    for key in bad:
        if name.startswith("v0"):
            key = key.replace("0.0.blosc", "__zdata__/0.0.blosc.x")
        assert lookup_errno(ops, key) in (errno.ENOENT, errno.ENOTDIR), key


def test_a_lookup_that_cannot_store_fails_with_the_stores_errno(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = small_store(tmp_path / "s.zarr")
    ops = build_operations(str(root), MountOptions(flush_interval=3600))
    writer = open_file(ops, "a/array.raw")
    run(ops.write, writer, 0, np.full(8, 3, dtype="<i4").tobytes())

    def full(staged: list[Any]) -> None:
        raise StoreError("storing: No space left on device", errno.ENOSPC)

    monkeypatch.setattr(ops.tree.store, "commit", full)
    assert lookup_errno(ops, "a/0.0") == errno.ENOSPC  # never the old bytes
    monkeypatch.undo()
    assert read_key(ops, "a/0.0") == np.full(8, 3, dtype="<i4").tobytes()
    close(ops, writer)


def test_a_key_that_is_no_plain_value_fails_with_eio(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = small_store(tmp_path / "s.zarr")
    secret = tmp_path / "secret"
    secret.write_bytes(b"outside the store")
    (root / "a" / "0.0").unlink()
    (root / "a" / "0.0").symlink_to(secret)
    (root / "a" / "1.0").unlink()
    os.mkfifo(root / "a" / "1.0")
    ops = build_operations(str(root), MountOptions(read_only=True))
    with caplog.at_level(logging.ERROR):
        for key in ("a/0.0", "a/1.0"):
            assert run_promptly(lambda key=key: lookup_errno(ops, key)) == errno.EIO
    assert len([r for r in caplog.records if r.levelno >= logging.ERROR]) == 2
