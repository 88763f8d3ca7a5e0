"""The pyfuse3 Operations object, called directly: no kernel, no mount."""

from __future__ import annotations

import errno
import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pyfuse3
import pytest
import zarr

from tests.support.handlers import ROOT, fuse_errno, lookup_path, open_dir, run
from zarrfs.daemon.build import MountOptions, build_operations
from zarrfs.errors import ChunkError
from zarrfs.fuse import operations as operations_module
from zarrfs.fuse.operations import PID_XATTR, OpenFile, Operations
from zarrfs.namespace.nodes import FileNode
from zarrfs.views.base import View


@pytest.fixture
def ops(example_store: Path) -> Operations:
    return build_operations(str(example_store), MountOptions(read_only=True))


def test_lookup_and_getattr(ops: Operations) -> None:
    attr = lookup_path(ops, "foo/bar/array.raw")
    assert attr.st_size == 100 * 60 * 4
    assert attr.st_mode & 0o777 == 0o444
    again = run(ops.getattr, attr.st_ino)
    assert again.st_ino == attr.st_ino and again.st_size == attr.st_size
    directory = lookup_path(ops, "foo/bar")
    assert directory.st_mode & 0o170000 == 0o040000


def test_inode_numbers_are_stable(ops: Operations) -> None:
    first = lookup_path(ops, "weather/temperature/array.npy").st_ino
    run(ops.forget, [(first, 1)])
    assert lookup_path(ops, "weather/temperature/array.npy").st_ino == first
    assert ops.inodes.lookup_count(first) == 1


def test_lookup_errors(ops: Operations) -> None:
    assert fuse_errno(ops.lookup, ROOT, b"nope") == errno.ENOENT
    raw = lookup_path(ops, "foo/bar/array.raw")
    assert fuse_errno(ops.lookup, raw.st_ino, b"x") == errno.ENOTDIR
    assert fuse_errno(ops.getattr, 987654) == errno.ENOENT


def test_open_read_release(ops: Operations, example_store: Path) -> None:
    attr = lookup_path(ops, "weather/temperature/array.raw")
    info = run(ops.open, attr.st_ino, os.O_RDONLY, None)
    assert info.keep_cache
    ref = np.ascontiguousarray(zarr.open_array(example_store / "weather/temperature")[...])
    data = run(ops.read, info.fh, 1001, 3333)
    assert data == ref.tobytes()[1001:4334]
    assert run(ops.read, info.fh, attr.st_size - 3, 100) == ref.tobytes()[-3:]
    assert run(ops.read, info.fh, attr.st_size + 10, 100) == b""
    run(ops.release, info.fh)
    assert fuse_errno(ops.read, info.fh, 0, 10) == errno.ENOENT


@pytest.mark.parametrize(
    "flags", [os.O_WRONLY, os.O_RDWR, os.O_RDONLY | os.O_TRUNC, os.O_WRONLY | os.O_APPEND]
)
def test_open_for_writing_is_erofs(ops: Operations, flags: int) -> None:
    attr = lookup_path(ops, "foo/bar/array.raw")
    assert fuse_errno(ops.open, attr.st_ino, flags, None) == errno.EROFS


def test_open_directory_is_eisdir(ops: Operations) -> None:
    attr = lookup_path(ops, "foo")
    assert fuse_errno(ops.open, attr.st_ino, os.O_RDONLY, None) == errno.EISDIR


def test_readdir_sorted_and_resumable(ops: Operations, monkeypatch: pytest.MonkeyPatch) -> None:
    replies: list[tuple[str, int]] = []
    budget = {"left": 2}

    def reply(token: object, name: bytes, attr: pyfuse3.EntryAttributes, next_id: int) -> bool:
        if budget["left"] == 0:
            return False
        budget["left"] -= 1
        replies.append((name.decode(), next_id))
        return True

    monkeypatch.setattr(operations_module.pyfuse3, "readdir_reply", reply)
    weather = lookup_path(ops, "weather")
    fh = run(open_dir, ops, weather.st_ino)
    run(ops.readdir, fh, 0, None)
    assert [n for n, _ in replies] == [".zattrs", ".zgroup"]
    budget["left"] = 100
    run(ops.readdir, fh, replies[-1][1], None)
    names = [n for n, _ in replies]
    assert names == [
        ".zattrs",
        ".zgroup",
        "group.nc",
        "mask",
        "scalar",
        "station_names",
        "temperature",
    ]
    run(ops.releasedir, fh)


def _fields(attr: pyfuse3.EntryAttributes) -> tuple[object, ...]:
    names = ("st_ino", "generation", "entry_timeout", "attr_timeout", "st_mode", "st_nlink")
    names += ("st_uid", "st_gid", "st_size", "st_blocks", "st_blksize")
    names += ("st_atime_ns", "st_mtime_ns", "st_ctime_ns")
    return tuple(getattr(attr, name) for name in names)


@pytest.mark.parametrize("read_only", [True, False], ids=["ro", "rw"])
def test_readdir_gives_what_lookup_gives_and_keeps_no_attributes(
    example_store: Path, monkeypatch: pytest.MonkeyPatch, read_only: bool
) -> None:
    """Every field, on a read-only mount and on a read-write one (writable files,
    documents the kernel keeps no attributes of)."""
    ops = build_operations(str(example_store), MountOptions(read_only=read_only))
    listed: dict[str, tuple[object, ...]] = {}

    def reply(token: object, name: bytes, attr: pyfuse3.EntryAttributes, next_id: int) -> bool:
        # Copied now, as pyfuse3 copies them into the reply: the object may be reused.
        listed[name.decode()] = _fields(attr)
        return True

    monkeypatch.setattr(operations_module.pyfuse3, "readdir_reply", reply)
    temperature = lookup_path(ops, "weather/temperature")
    fh = run(open_dir, ops, temperature.st_ino)
    run(ops.readdir, fh, 0, None)
    run(ops.releasedir, fh)
    assert {"array.raw", "array.npy", ".zarray", "info"} <= listed.keys()
    directory = ops.tree.resolve("weather/temperature")
    files = [n for n in ops.tree.entries(directory).values() if isinstance(n, FileNode)]
    assert files and all(node.attributes is None for node in files)
    modes = {given[4] for given in listed.values()}
    assert len(modes) == (1 if read_only else 2), modes  # array files writable on rw
    for name, given in listed.items():
        attr = run(ops.lookup, temperature.st_ino, name.encode(), None)
        assert given == _fields(attr), name
    # Listed again once looked up: the same.
    again = dict(listed)
    fh = run(open_dir, ops, temperature.st_ino)
    run(ops.readdir, fh, 0, None)
    run(ops.releasedir, fh)
    assert listed == again


def test_statfs_and_xattrs(ops: Operations) -> None:
    data = run(ops.statfs, None)
    assert data.f_bsize > 0 and data.f_namemax == 255
    assert run(ops.getxattr, ROOT, PID_XATTR, None) == str(os.getpid()).encode()
    assert fuse_errno(ops.getxattr, ROOT, b"user.other", None) == pyfuse3.ENOATTR
    assert b"user.zarr.format" in run(ops.listxattr, ROOT, None)


def test_setattr_is_erofs(ops: Operations) -> None:
    attr = lookup_path(ops, "foo/bar/array.raw")
    assert fuse_errno(ops.setattr, attr.st_ino, None, None, None, None) == errno.EROFS


class _Exploding(View):
    def __init__(self, error: BaseException) -> None:
        self.error = error

    @property
    def size(self) -> int:
        return 10

    async def read(self, offset: int, size: int) -> bytes:
        raise self.error


def test_unexpected_exception_becomes_eio(
    ops: Operations, caplog: pytest.LogCaptureFixture
) -> None:
    fh = ops.files.add(OpenFile(FileNode("boom", _Exploding(KeyError("surprise")), 0.0), 999))
    with caplog.at_level(logging.ERROR):
        assert fuse_errno(ops.read, fh, 0, 10) == errno.EIO
    assert "internal error in read" in caplog.text and "KeyError" in caplog.text
    # the Operations object is still usable afterwards
    assert lookup_path(ops, "foo/bar/array.raw").st_size == 24000


def test_known_error_carries_its_errno(ops: Operations, caplog: pytest.LogCaptureFixture) -> None:
    fh = ops.files.add(
        OpenFile(FileNode("bad", _Exploding(ChunkError("a", "a/0", "corrupt")), 0.0), 998)
    )
    with caplog.at_level(logging.ERROR):
        assert fuse_errno(ops.read, fh, 0, 10) == errno.EIO
    assert "chunk 'a/0'" in caplog.text
    fh = ops.files.add(OpenFile(FileNode("perm", _Exploding(PermissionError(13, "x")), 0.0), 997))
    assert fuse_errno(ops.read, fh, 0, 10) == errno.EACCES


def test_corrupt_chunk_is_eio_and_logged_once(
    example_store: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = tmp_path / "s.zarr"
    shutil.copytree(example_store, store)
    (store / "foo/bar/0.0").write_bytes(b"garbage" * 10)
    ops = build_operations(str(store), MountOptions(read_only=True))
    attr = lookup_path(ops, "foo/bar/array.raw")
    fh = run(ops.open, attr.st_ino, os.O_RDONLY, None).fh
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            assert fuse_errno(ops.read, fh, 0, 16) == errno.EIO
    lines = [r for r in caplog.records if "foo/bar/0.0" in r.getMessage()]
    assert len(lines) == 1 and "array 'foo/bar'" in lines[0].getMessage()
    # row 40 lies in chunk (1, 0): still readable
    ref = np.ascontiguousarray(zarr.open_array(example_store / "foo/bar")[...]).tobytes()
    assert run(ops.read, fh, 40 * 60 * 4, 64) == ref[40 * 240 : 40 * 240 + 64]
