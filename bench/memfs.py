"""Minimal pyfuse3 filesystems served from memory: the ceilings of the benchmark.

- ``MemFS``: one read-only file ``data``; the fastest a single-threaded pyfuse3 +
  trio daemon can answer reads (the handler returns a slice of a bytes buffer),
  opened through the page cache, or with ``--direct-io`` as zarrfs opens array
  data for reading by default (one copy, straight into the reader's buffer; shared
  maps still allowed where the kernel and libfuse allow them). On exit it prints
  how many read requests it served.
- ``TreeFS``: DIRS directories of FILES empty files each, answered from
  precomputed tables; the fastest such a daemon can answer ``ls -R`` and ``stat``.

Each runs in the foreground until unmounted (``fusermount3 -u``); bench/mounting.py
starts them. This module imports nothing but pyfuse3 and trio, so that it mounts
as fast as such a daemon can.

    .venv/bin/python -m bench.memfs [--direct-io] SIZE_BYTES MOUNTPOINT
    .venv/bin/python -m bench.memfs --tree DIRS FILES MOUNTPOINT
"""

from __future__ import annotations

import errno
import os
import stat
import sys

import pyfuse3
import trio

FILE_NAME = "data"
FILE_INODE = pyfuse3.ROOT_INODE + 1


class MemFS(pyfuse3.Operations):
    def __init__(self, data: bytes, direct_io: bool = False) -> None:
        super().__init__()
        self.data = data
        self.direct_io = direct_io
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
        if self.direct_io:
            return pyfuse3.FileInfo(fh=inode, direct_io=True)
        return pyfuse3.FileInfo(fh=inode, keep_cache=True)  # as --kernel-cache opens

    async def read(self, fh, off, size):
        self.reads += 1
        return self.data[off : off + size]


class TreeFS(pyfuse3.Operations):
    """The root holds ``dirs`` directories ``d<i>``, each with ``files`` files ``f<j>``."""

    def __init__(self, dirs: int, files: int) -> None:
        super().__init__()
        self.children: dict[int, list[tuple[bytes, int]]] = {pyfuse3.ROOT_INODE: []}
        self.attrs: dict[int, pyfuse3.EntryAttributes] = {}
        self._add(pyfuse3.ROOT_INODE, directory=True)
        inode = pyfuse3.ROOT_INODE + 1
        for i in range(dirs):
            d = inode
            self._add(d, directory=True)
            self.children[pyfuse3.ROOT_INODE].append((f"d{i}".encode(), d))
            self.children[d] = []
            for j in range(files):
                self._add(d + 1 + j, directory=False)
                self.children[d].append((f"f{j}".encode(), d + 1 + j))
            inode += 1 + files

    def _add(self, inode: int, *, directory: bool) -> None:
        attr = pyfuse3.EntryAttributes()
        attr.st_ino = inode
        attr.entry_timeout = attr.attr_timeout = 60  # as zarrfs
        attr.st_mode = (stat.S_IFDIR | 0o555) if directory else (stat.S_IFREG | 0o444)
        attr.st_nlink = 2 if directory else 1
        attr.st_uid, attr.st_gid = os.getuid(), os.getgid()
        self.attrs[inode] = attr

    async def getattr(self, inode, ctx=None):
        return self.attrs[inode]

    async def lookup(self, parent_inode, name, ctx=None):
        for child, inode in self.children.get(parent_inode, ()):
            if child == name:
                return self.attrs[inode]
        raise pyfuse3.FUSEError(errno.ENOENT)

    async def opendir(self, inode, ctx):
        return inode

    async def readdir(self, fh, start_id, token):
        entries = self.children[fh]
        for position in range(start_id, len(entries)):
            name, inode = entries[position]
            if not pyfuse3.readdir_reply(token, name, self.attrs[inode], position + 1):
                break


def run(ops: pyfuse3.Operations, mountpoint: str, name: str) -> None:
    pyfuse3.init(ops, mountpoint, set(pyfuse3.default_options) | {f"fsname={name}", "ro"})
    try:
        trio.run(pyfuse3.main)
    finally:
        pyfuse3.close(unmount=True)


def serve(size: int, mountpoint: str, direct_io: bool = False) -> None:
    ops = MemFS(os.urandom(size), direct_io)
    run(ops, mountpoint, "memfs")
    print(f"memfs: served {ops.reads} read requests", flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--tree":
        run(TreeFS(int(sys.argv[2]), int(sys.argv[3])), sys.argv[4], "treefs")
    elif len(sys.argv) == 3:
        serve(int(sys.argv[1]), sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "--direct-io":
        serve(int(sys.argv[2]), sys.argv[3], direct_io=True)
    else:
        sys.exit(
            "usage: python -m bench.memfs [--direct-io] SIZE_BYTES MOUNTPOINT"
            " | python -m bench.memfs --tree DIRS FILES MOUNTPOINT"
        )
