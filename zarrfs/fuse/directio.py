"""Whether this mount can serve reads with one copy and still be mapped.

A file opened with FUSE's ``direct_io`` is read straight into the reader's buffer:
one copy of each byte, where the page cache costs two (into the cache, then out of
it) and the cache's own upkeep, on the cores that decode. Without the kernel flag
FUSE_DIRECT_IO_ALLOW_MMAP, though, the kernel refuses to map such a file shared
(ENODEV), and ``np.load(mmap_mode="r")`` or a C program's ``mmap`` would fail. The
flag needs a kernel of 6.6 or later and a libfuse that asks for it (scripts/
build_libfuse.sh builds one; Debian 12's cannot). Nothing tells the daemon what
INIT agreed, so it asks the kernel: a shared mapping of one of its own files that
is always opened with ``direct_io`` (``.zarrfs/stats``) either works or fails with
ENODEV. Called from a thread while the mount is served (the open is answered by
this daemon).
"""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os

log = logging.getLogger(__name__)

_MAP_FAILED = ctypes.c_void_p(-1).value


def _libc() -> ctypes.CDLL:
    # The process's own symbols, libc's among them: ctypes.util.find_library would run
    # ldconfig in a child, which inherits the probe's fd of this very mount and, on
    # closing it, waits for this daemon to answer its FLUSH (a hang under a tracer).
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


def shared_mmap_allowed(path: str) -> bool:
    """Whether ``path`` (a file this mount opens with ``direct_io``) can be mapped
    MAP_SHARED. Python's ``mmap`` module is not used: it refuses a mapping longer
    than the file before the kernel is asked."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        log.info("direct reads: cannot open %s to probe them (%s)", path, e.strerror)
        return False
    try:
        libc = _libc()
        address = libc.mmap(None, mmap.PAGESIZE, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address in (None, _MAP_FAILED):
            code = ctypes.get_errno()
            if code != errno.ENODEV:
                log.info("direct reads: probing a shared mapping failed: %s", os.strerror(code))
            return False
        libc.munmap(address, mmap.PAGESIZE)
        return True
    finally:
        os.close(fd)
