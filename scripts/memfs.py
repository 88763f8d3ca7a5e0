"""A minimal pyfuse3 filesystem: one read-only file ``data`` served from memory.

The "memory-serving ceiling" of scripts/bench.py: the fastest a single-threaded
pyfuse3 + trio daemon can answer reads (the handler returns a slice of a bytes
buffer), to compare zarrfs's hot read path against. Runs in the foreground until
unmounted (``fusermount3 -u``); on exit it prints how many read requests it served.

    .venv/bin/python scripts/memfs.py SIZE_BYTES MOUNTPOINT
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyfuse3
import trio

FILE_NAME = "data"
FILE_INODE = pyfuse3.ROOT_INODE + 1


class MemFS(pyfuse3.Operations):
    def __init__(self, data: bytes) -> None:
        super().__init__()
        self.data = data
        self.reads = 0

    def _attributes(self, inode: int) -> pyfuse3.EntryAttributes:
        attr = pyfuse3.EntryAttributes()
        attr.st_ino = inode
        attr.entry_timeout = attr.attr_timeout = 300
        if inode == pyfuse3.ROOT_INODE:
            attr.st_mode, attr.st_nlink, attr.st_size = stat.S_IFDIR | 0o555, 2, 0
        else:
            attr.st_mode, attr.st_nlink, attr.st_size = stat.S_IFREG | 0o444, 1, len(self.data)
        attr.st_uid, attr.st_gid = os.getuid(), os.getgid()
        attr.st_blksize = 128 * 1024
        attr.st_blocks = -(-attr.st_size // 512)
        return attr

    async def getattr(self, inode, ctx=None):
        if inode not in (pyfuse3.ROOT_INODE, FILE_INODE):
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attributes(inode)

    async def lookup(self, parent_inode, name, ctx=None):
        if parent_inode != pyfuse3.ROOT_INODE or name != FILE_NAME.encode():
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attributes(FILE_INODE)

    async def opendir(self, inode, ctx):
        if inode != pyfuse3.ROOT_INODE:
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        return inode

    async def readdir(self, fh, start_id, token):
        if start_id == 0:
            pyfuse3.readdir_reply(token, FILE_NAME.encode(), self._attributes(FILE_INODE), 1)

    async def open(self, inode, flags, ctx):
        if inode != FILE_INODE:
            raise pyfuse3.FUSEError(errno.EISDIR)
        if flags & (os.O_WRONLY | os.O_RDWR):
            raise pyfuse3.FUSEError(errno.EROFS)
        return pyfuse3.FileInfo(fh=inode, keep_cache=True)  # as zarrfs opens for reading

    async def read(self, fh, off, size):
        self.reads += 1
        return self.data[off : off + size]


def serve(size: int, mountpoint: str) -> None:
    ops = MemFS(os.urandom(size))
    pyfuse3.init(ops, mountpoint, set(pyfuse3.default_options) | {"fsname=memfs", "ro"})
    try:
        trio.run(pyfuse3.main)
    finally:
        pyfuse3.close(unmount=True)
    print(f"memfs: served {ops.reads} read requests", flush=True)


@contextmanager
def memfs_mounted(size: int, log_dir: Path) -> Iterator[tuple[Path, Path]]:
    """Mount a MemFS serving ``size`` bytes; yields (file path, log file); always unmounts."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.mounting import unmount, wait_for_mount

    mountpoint = tempfile.mkdtemp(prefix="memfs-mnt-")
    log_file = Path(tempfile.mkstemp(prefix="memfs-log-", dir=log_dir)[1])
    with open(log_file, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, __file__, str(size), mountpoint],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_mount(mountpoint, process, log_file)
        yield Path(mountpoint) / FILE_NAME, log_file
    finally:
        unmount(mountpoint)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        unmount(mountpoint)
        os.rmdir(mountpoint)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.rstrip().splitlines()[-1].strip())
    serve(int(sys.argv[1]), sys.argv[2])
