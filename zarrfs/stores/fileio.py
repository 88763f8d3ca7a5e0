"""Low-level file calls of the directory store: openat2(2) through ctypes, exact
reads, early write-back and the syncs that make a commit durable."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import sys
from collections.abc import Callable

CLOEXEC = getattr(os, "O_CLOEXEC", 0)
DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | CLOEXEC  # O_RDONLY: fsync and scandir need it


def read_exactly(fd: int, size: int) -> bytes:
    """``size`` bytes at most: a file that grows while read is not read past them."""
    if size == 0:
        return b""
    data = os.read(fd, size)
    if len(data) == size or not data:
        return data
    parts = [data]
    left = size - len(data)
    while left:
        more = os.read(fd, left)
        if not more:
            break  # it shrank: what is there (the decoder judges it)
        parts.append(more)
        left -= len(more)
    return b"".join(parts)


def pread_exactly(fd: int, offset: int, count: int) -> bytes:
    """``count`` bytes at ``offset``, fewer only where the file ends (it may have
    shrunk since its fstat; a file that grew is not read past ``count``)."""
    if count == 0:
        return b""
    data = os.pread(fd, count, offset)
    if len(data) == count or not data:
        return data
    parts = [data]
    done = len(data)
    while done < count:
        more = os.pread(fd, count - done, offset + done)
        if not more:
            break
        parts.append(more)
        done += len(more)
    return b"".join(parts)


def _libc(name: str) -> Callable[..., int] | None:
    try:
        return getattr(ctypes.CDLL(None, use_errno=True), name)  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


_SYNC_FILE_RANGE = _libc("sync_file_range")
_SYNC_FILE_RANGE_WRITE = 2


def start_writeback(fd: int) -> None:
    """Ask the kernel to start writing ``fd``'s dirty pages, without waiting."""
    if _SYNC_FILE_RANGE is not None:
        _SYNC_FILE_RANGE(fd, ctypes.c_int64(0), ctypes.c_int64(0), _SYNC_FILE_RANGE_WRITE)


def sync_data(dir_fd: int, name: str) -> None:
    """Make the bytes of a staged file durable.

    Each file started writing back when it was staged, so this mostly waits for
    I/O already under way. (A ``syncfs`` per batch was tried: it also wrote back
    every other dirty file of the filesystem, which cost a second per GiB the
    user had written elsewhere.)"""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | CLOEXEC, dir_fd=dir_fd)
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


def fsync_directory(fd: int) -> None:
    """Make a rename, unlink or mkdir durable; a filesystem that cannot fsync
    directories is fine."""
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise


# -- openat2(2) ----------------------------------------------------------------------

_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "arm64": 437}.get(platform.machine())
_RESOLVE = 0x01 | 0x02 | 0x04 | 0x08  # NO_XDEV | NO_MAGICLINKS | NO_SYMLINKS | BENEATH


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _syscall() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux") or _SYS_OPENAT2 is None:
        return None
    try:
        # A CDLL of our own: argtypes set here must not change anyone else's syscall.
        function = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_long
    # syscall(2) is variadic; on x86_64 and aarch64 Linux integer and pointer
    # arguments pass as for a fixed signature.
    long, char_p, void_p = ctypes.c_long, ctypes.c_char_p, ctypes.c_void_p
    function.argtypes = [long, long, char_p, void_p, ctypes.c_size_t]
    return function  # type: ignore[no-any-return]


_SYSCALL = _syscall()
_HOW_SIZE = ctypes.sizeof(_OpenHow)
_HOWS: dict[int, _OpenHow] = {}  # per open flags; the kernel only reads them


def openat2(dir_fd: int, path: str, flags: int) -> int:
    """openat(2) beneath ``dir_fd``: ELOOP for a symlink anywhere on ``path``,
    EXDEV for a mount point crossed. ctypes releases the GIL for the call."""
    how = _HOWS.get(flags)
    if how is None:
        how = _HOWS.setdefault(flags, _OpenHow(flags, 0, _RESOLVE))
    fd = _SYSCALL(_SYS_OPENAT2, dir_fd, os.fsencode(path), ctypes.byref(how), _HOW_SIZE)  # type: ignore[misc]
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return fd


def openat2_works(root_fd: int) -> bool:
    """Whether openat2 with our RESOLVE flags is there: not before Linux 5.6, and
    some seccomp filters answer EPERM or ENOSYS for it."""
    if _SYSCALL is None:
        return False
    try:
        os.close(openat2(root_fd, ".", DIRECTORY))
    except OSError:
        return False
    return True
