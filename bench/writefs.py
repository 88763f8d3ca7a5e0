"""A minimal writable pyfuse3 filesystem served from memory: the ceiling of the write
sections.

One file ``data`` of SIZE bytes, opened with direct I/O as zarrfs opens a file for
writing; a write copies the request into a buffer, ``fsync`` does nothing. It is the
fastest a single-threaded pyfuse3 + trio daemon can take the same writes (the same
requests: ``dd bs=1M`` or 4 KiB pwrites). On exit it prints how many write requests
it took. Imports nothing but pyfuse3 and trio (and bench.memfs's attributes).

    .venv/bin/python -m bench.writefs SIZE_BYTES MOUNTPOINT
"""

from __future__ import annotations

import errno
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyfuse3
import trio

from bench.memfs import FILE_INODE, FILE_NAME, MemFS


class WriteFS(MemFS):
    def __init__(self, size: int) -> None:
        super().__init__(b"")
        self.buffer = bytearray(size)
        self.writes = 0

    def _attributes(self, inode: int) -> pyfuse3.EntryAttributes:
        attr = super()._attributes(inode)
        if inode == FILE_INODE:
            attr.st_mode, attr.st_size = stat.S_IFREG | 0o644, len(self.buffer)
            attr.st_blocks = -(-attr.st_size // 512)
        return attr

    async def open(self, inode, flags, ctx):
        if inode != FILE_INODE:
            raise pyfuse3.FUSEError(errno.EISDIR)
        return pyfuse3.FileInfo(fh=inode, direct_io=True)  # as zarrfs opens for writing

    async def read(self, fh, off, size):
        return bytes(self.buffer[off : off + size])

    async def write(self, fh, off, buf):
        self.writes += 1
        end = min(off + len(buf), len(self.buffer))
        self.buffer[off:end] = buf[: end - off]
        return len(buf)

    async def flush(self, fh):
        pass

    async def fsync(self, fh, datasync):
        pass

    async def release(self, fh):
        pass

    async def setattr(self, inode, attr, fields, fh, ctx):
        return self._attributes(inode)


def serve(size: int, mountpoint: str) -> None:
    ops = WriteFS(size)
    pyfuse3.init(ops, mountpoint, set(pyfuse3.default_options) | {"fsname=writefs"})
    try:
        trio.run(pyfuse3.main)
    finally:
        pyfuse3.close(unmount=True)
    print(f"writefs: took {ops.writes} write requests", flush=True)


@contextmanager
def writefs_mounted(size: int, log_dir: Path) -> Iterator[tuple[Path, int]]:
    """This filesystem serving ``size`` bytes: yields (file path, daemon pid)."""
    from bench.mounting import _daemon  # bench.mounting imports memfs, not this module

    command = [sys.executable, "-m", "bench.writefs", str(size)]
    with _daemon(command, "writefs", log_dir) as m:
        yield m.path / FILE_NAME, m.process.pid


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m bench.writefs SIZE_BYTES MOUNTPOINT")
    serve(int(sys.argv[1]), sys.argv[2])
