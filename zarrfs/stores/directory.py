"""A store backed by a local directory: one file per key.

Nothing outside the root is ever read, written or deleted. Every key is resolved
beneath a descriptor of the root opened once, without following a symbolic link
and without crossing a mount point: one ``openat2(2)`` with ``RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV``, or, where the
kernel or a seccomp filter lacks it, a walk of ``O_NOFOLLOW`` opens one component
at a time that compares each directory's device with the root's (that walk cannot
see a bind mount of the root's own filesystem; ``openat2`` can). A symlink is never
a key nor a prefix, and only regular files are read.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import secrets
import stat
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from zarrfs.errors import InvalidValueError, StoreError
from zarrfs.stores.base import Listing, Store

# Temporary files are named ".<key name>.zarrfs-tmp-<random>" beside their target:
# hidden, never a valid chunk or metadata key, and removed by ``cleanup``.
TEMP_MARKER = ".zarrfs-tmp-"

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# O_NONBLOCK: opening a FIFO must not wait for a writer (fstat then refuses it).
_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | _CLOEXEC
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC  # O_RDONLY: fsync and scandir need it
_LSTAT = getattr(os, "O_PATH", os.O_RDONLY | os.O_NONBLOCK) | os.O_NOFOLLOW | _CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC

_MISSING = (errno.ENOENT, errno.ENOTDIR)
# A symlink on the path (openat2, O_NOFOLLOW) or a mount point crossed: not ours.
_FORBIDDEN = (errno.ELOOP, errno.EXDEV)

Resolver = Callable[[int, str, int], int]


class DirectoryStore(Store):
    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        try:
            # The root itself may be reached through links: the user named it.
            self._root_fd = os.open(self.root, _DIRECTORY)
        except OSError as e:
            raise StoreError(f"opening {self.root!r}: {e.strerror}", e.errno or errno.EIO) from e
        self._root_dev = os.fstat(self._root_fd).st_dev
        self._resolve: Resolver = _openat2 if _openat2_works(self._root_fd) else self._walk

    def describe(self) -> str:
        return self.root

    def close(self) -> None:
        fd, self._root_fd = getattr(self, "_root_fd", -1), -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        with contextlib.suppress(OSError):
            self.close()

    # -- resolving keys --------------------------------------------------------------

    def _walk(self, dir_fd: int, path: str, flags: int) -> int:
        """openat2's guarantees one component at a time (no RESOLVE_* in the kernel)."""
        *directories, last = path.split("/")
        fd = dir_fd
        try:
            for name in directories:
                fd, parent = self._walk_one(fd, name, _DIRECTORY), fd
                if parent != dir_fd:
                    os.close(parent)
            return self._walk_one(fd, last, flags)
        finally:
            if fd != dir_fd:
                os.close(fd)

    def _walk_one(self, dir_fd: int, name: str, flags: int) -> int:
        try:
            fd = os.open(name, flags | os.O_NOFOLLOW, dir_fd=dir_fd)
        except NotADirectoryError:
            # O_DIRECTORY|O_NOFOLLOW says ENOTDIR for a symlink too: which was it?
            if stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name) from None
            raise
        try:
            st = os.fstat(fd)
            if stat.S_ISLNK(st.st_mode):  # O_PATH|O_NOFOLLOW opens the link itself
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name)
            if st.st_dev != self._root_dev:
                raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), name)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _directory(self, path: str, *, create: bool = False) -> int:
        """A descriptor of the store directory ``path``; with ``create``, missing
        directories are made one at a time, each made durable in its parent at once
        (a value renamed into a directory is only as durable as the directory)."""
        try:
            return self._resolve(self._root_fd, path, _DIRECTORY)
        except FileNotFoundError:
            if not create:
                raise
        fd = os.dup(self._root_fd)
        try:
            for name in path.split("/"):
                try:
                    child = self._resolve(fd, name, _DIRECTORY)
                except FileNotFoundError:
                    # EEXIST: a concurrent stage made it and may not have synced it yet.
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, dir_fd=fd)
                    try:
                        _fsync_directory(fd)
                    except OSError:
                        # Existing, it would never be synced again: make the next try anew.
                        with contextlib.suppress(OSError):
                            os.rmdir(name, dir_fd=fd)
                        raise
                    child = self._resolve(fd, name, _DIRECTORY)
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _lstat(self, key: str) -> os.stat_result | None:
        """The key's own status (a symlink's, not its target's); None if unreachable."""
        try:
            fd = self._resolve(self._root_fd, _relative(key), _LSTAT)
        except (OSError, StoreError):
            return None
        try:
            return os.fstat(fd)
        except OSError:
            return None
        finally:
            os.close(fd)

    # -- reading -----------------------------------------------------------------------

    def get(self, key: str, *, limit: int | None = None) -> bytes | None:
        """The value of a regular file in the store; ``None`` for a missing key or a
        directory. A symlink anywhere on the path, a mount point crossed, a FIFO,
        device or socket, or more than ``limit`` bytes raise InvalidValueError."""
        try:
            fd = self._resolve(self._root_fd, _relative(key), _READ)
        except OSError as e:
            if e.errno in _MISSING:
                return None
            raise _failure("reading", key, e, InvalidValueError) from e
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                # A prefix, not a value: a group's child array may be named like a
                # metadata key ("meta", "attrs") that the tree probes for.
                return None
            if not stat.S_ISREG(st.st_mode):
                raise InvalidValueError(f"reading {key!r}: {_kind(st.st_mode)}, not a regular file")
            if limit is not None and st.st_size > limit:
                raise InvalidValueError(
                    f"reading {key!r}: {st.st_size} bytes, more than the limit of {limit}"
                )
            return _read_exactly(fd, st.st_size)
        except OSError as e:
            raise _failure("reading", key, e) from e
        finally:
            os.close(fd)

    def contains(self, key: str) -> bool:
        st = self._lstat(key)
        return st is not None and stat.S_ISREG(st.st_mode)

    def mtime(self, key: str) -> float | None:
        st = self._lstat(key)
        return None if st is None or stat.S_ISLNK(st.st_mode) else st.st_mtime

    def list_dir(self, prefix: str) -> Listing:
        """Regular files are keys, directories on the root's filesystem prefixes;
        symlinks, mount points and everything else are neither."""
        try:
            fd = self._resolve(self._root_fd, _relative(prefix), _DIRECTORY)
        except OSError as e:
            if e.errno in _MISSING:
                return Listing((), ())
            raise _failure("listing", prefix, e, InvalidValueError) from e
        keys: list[str] = []
        prefixes: list[str] = []
        try:
            with os.scandir(fd) as it:
                for entry in it:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            if entry.stat(follow_symlinks=False).st_dev == self._root_dev:
                                prefixes.append(entry.name)
                        elif entry.is_file(follow_symlinks=False):
                            keys.append(entry.name)
                    except OSError:
                        continue
        except OSError as e:
            raise _failure("listing", prefix, e) from e
        finally:
            os.close(fd)
        return Listing(tuple(sorted(keys)), tuple(sorted(prefixes)))

    def scan(self, prefix: str) -> Iterator[tuple[str, int]]:
        """Regular files below ``prefix``, never through a symlink or into another
        mount; our own temporary files are not keys."""
        try:
            top = self._resolve(self._root_fd, _relative(prefix), _DIRECTORY)
        except (OSError, StoreError):
            return
        try:
            for relative, name, st, _ in self._walk_tree(top):
                if TEMP_MARKER not in name:
                    yield relative + name, st.st_size
        finally:
            os.close(top)

    def _walk_tree(self, top: int) -> Iterator[tuple[str, str, os.stat_result, int]]:
        """(directory relative to ``top`` with a trailing "/", name, lstat, descriptor
        of the directory) of every regular file on the root's filesystem, not
        following symlinks. The descriptor is valid until the next item."""
        walk = os.fwalk(".", dir_fd=top)
        try:
            for directory, dirs, files, dir_fd in walk:
                relative = "" if directory == "." else directory[2:] + "/"
                # fwalk would descend into a mount point: only our own directories.
                dirs[:] = [d for d in dirs if self._own(d, dir_fd, stat.S_ISDIR)]
                for name in files:
                    st = self._own(name, dir_fd, stat.S_ISREG)
                    if st is not None:
                        yield relative, name, st, dir_fd
        finally:
            walk.close()

    def _own(self, name: str, dir_fd: int, kind: Callable[[int], bool]) -> os.stat_result | None:
        """lstat of ``name`` if it is of ``kind`` and on the root's filesystem."""
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            return None
        return st if kind(st.st_mode) and st.st_dev == self._root_dev else None

    def statvfs(self) -> tuple[int, int, int] | None:
        try:
            st = os.statvfs(self._root_fd)
        except OSError:
            return None
        return st.f_frsize, st.f_blocks, st.f_bavail

    # -- writing -----------------------------------------------------------------------

    def _write_temp(self, key: str, value: bytes) -> Staged:
        """The value in a new temporary file beside its key (not yet synced)."""
        directory, name = _split(key)
        try:
            dir_fd = self._directory(directory, create=True)
        except OSError as e:
            raise _failure("writing", key, e) from e
        temp = f".{name}{TEMP_MARKER}{secrets.token_hex(4)}"
        try:
            fd = os.open(temp, _CREATE, 0o644, dir_fd=dir_fd)
            try:
                view = memoryview(value)
                while view:
                    view = view[os.write(fd, view) :]
                # Start writing it back now, so the batch's fdatasyncs find less to do.
                _start_writeback(fd)
            finally:
                os.close(fd)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=dir_fd)
            raise _failure("writing", key, e) from e
        finally:
            os.close(dir_fd)
        where = self.root if directory == "." else os.path.join(self.root, directory)
        return Staged(key, directory, temp, name, os.path.join(where, temp))

    def set(self, key: str, value: bytes, *, durable: bool = True) -> None:
        """Temporary file in the same directory, fsync, rename over, fsync the directory."""
        staged = self._write_temp(key, value)
        self.commit([staged])  # the bytes and size, before the rename makes them visible
        if durable:
            self._sync_directory(staged.directory, key, missing_ok=False)

    def stage(self, key: str, value: bytes) -> Staged:
        return self._write_temp(key, value)

    def commit(self, staged: list[Staged]) -> None:
        """Every staged file made durable, then the renames; a crash before a
        rename leaves the old value and a temporary file that the next mount
        removes. Directories are resolved again: a stage holds no descriptor."""
        directories: dict[str, int] = {}
        done = 0
        key = staged[0].key if staged else ""
        try:
            for item in staged:
                key = item.key
                if item.directory not in directories:
                    directories[item.directory] = self._directory(item.directory)
                _sync_data(directories[item.directory], item.temp_name)
            for item in staged:
                key = item.key
                fd = directories[item.directory]
                # Over a symlink this replaces the link, which is in the store.
                os.replace(item.temp_name, item.name, src_dir_fd=fd, dst_dir_fd=fd)
                done += 1
        except OSError as e:
            for item in staged[done:]:
                if item.directory in directories:  # else unreachable: cleanup's job
                    with contextlib.suppress(OSError):
                        os.unlink(item.temp_name, dir_fd=directories[item.directory])
            raise _failure("writing", key, e) from e
        finally:
            for fd in directories.values():
                os.close(fd)

    def delete(self, key: str, *, durable: bool = True) -> None:
        """Unlinks the key itself (a symlink key: the link, never its target)."""
        directory, name = _split(key)
        try:
            fd = self._resolve(self._root_fd, directory, _DIRECTORY)
        except OSError as e:
            if e.errno in _MISSING:
                return
            raise _failure("deleting", key, e) from e
        try:
            try:
                os.unlink(name, dir_fd=fd)
            except OSError as e:
                if e.errno in (*_MISSING, errno.EISDIR):
                    return
                raise
            if durable:
                _fsync_directory(fd)
        except OSError as e:
            raise _failure("deleting", key, e) from e
        finally:
            os.close(fd)

    def sync(self, keys: list[str]) -> None:
        """One fsync per directory that the keys live in (renames and unlinks).

        A directory that is missing, a symlink or another mount is skipped: stage
        and delete refuse such paths, so nothing of ours changed there."""
        for directory in sorted({_split(key)[0] for key in keys}):
            self._sync_directory(directory, directory, missing_ok=True)

    def _sync_directory(self, directory: str, what: str, *, missing_ok: bool) -> None:
        try:
            fd = self._resolve(self._root_fd, directory, _DIRECTORY)
        except OSError as e:
            if missing_ok and e.errno in (*_MISSING, *_FORBIDDEN):
                return
            raise _failure("syncing", what, e) from e
        try:
            _fsync_directory(fd)
        except OSError as e:
            raise _failure("syncing", what, e) from e
        finally:
            os.close(fd)

    def cleanup(self, older_than: float) -> int:
        """Remove temporary files last modified before ``older_than`` (a time.time()).

        The walk runs while the mount already writes: its own temporary files are
        newer than the mount and must be left alone. It follows no symlink and
        enters no other mount, and removes only regular files named as ours.
        """
        removed = 0
        for _, name, st, dir_fd in self._walk_tree(self._root_fd):
            if name.startswith(".") and TEMP_MARKER in name and st.st_mtime < older_than:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=dir_fd)
                    removed += 1
        return removed


@dataclass(frozen=True)
class Staged:
    key: str
    directory: str  # relative to the root, "." for the root itself
    temp_name: str  # written, not yet synced
    name: str  # what the commit renames it to
    temp: str  # the temporary file's full path, for messages and tests


def _relative(key: str) -> str:
    """``key`` as a path relative to the root ("." for the root); no component
    may be "." or "..", so a resolved key can only go down."""
    parts = [p for p in key.split("/") if p]
    if "." in parts or ".." in parts or "\0" in key:
        raise StoreError(f"invalid key {key!r}", errno.EINVAL)
    return "/".join(parts) or "."


def _split(key: str) -> tuple[str, str]:
    """(directory relative to the root, name) of a key that names a file."""
    relative = _relative(key)
    if relative == ".":
        raise StoreError(f"invalid key {key!r}", errno.EINVAL)
    directory, _, name = relative.rpartition("/")
    return directory or ".", name


def _failure(action: str, key: str, e: OSError, kind: type[StoreError] = StoreError) -> StoreError:
    if e.errno == errno.ELOOP:
        return kind(f"{action} {key!r}: a symbolic link on its path (links are not followed)")
    if e.errno == errno.EXDEV:
        return kind(f"{action} {key!r}: its path crosses a mount point")
    return StoreError(f"{action} {key!r}: {e.strerror}", e.errno or errno.EIO)


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), f"of type {stat.S_IFMT(mode):o}")


_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFLNK: "a symbolic link",
}


def _read_exactly(fd: int, size: int) -> bytes:
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


def _libc(name: str) -> Callable[..., int] | None:
    try:
        return getattr(ctypes.CDLL(None, use_errno=True), name)  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


_SYNC_FILE_RANGE = _libc("sync_file_range")
_SYNC_FILE_RANGE_WRITE = 2


def _start_writeback(fd: int) -> None:
    """Ask the kernel to start writing ``fd``'s dirty pages, without waiting."""
    if _SYNC_FILE_RANGE is not None:
        _SYNC_FILE_RANGE(fd, ctypes.c_int64(0), ctypes.c_int64(0), _SYNC_FILE_RANGE_WRITE)


def _sync_data(dir_fd: int, name: str) -> None:
    """Make the bytes of a staged file durable.

    Each file started writing back when it was staged, so this mostly waits for
    I/O already under way. (A ``syncfs`` per batch was tried: it also wrote back
    every other dirty file of the filesystem, which cost a second per GiB the
    user had written elsewhere.)"""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | _CLOEXEC, dir_fd=dir_fd)
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


def _fsync_directory(fd: int) -> None:
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


def _openat2(dir_fd: int, path: str, flags: int) -> int:
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


def _openat2_works(root_fd: int) -> bool:
    """Whether openat2 with our RESOLVE flags is there: not before Linux 5.6, and
    some seccomp filters answer EPERM or ENOSYS for it."""
    if _SYSCALL is None:
        return False
    try:
        os.close(_openat2(root_fd, ".", _DIRECTORY))
    except OSError:
        return False
    return True
