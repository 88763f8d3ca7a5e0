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
import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from zarrfs.errors import InvalidValueError, StoreError
from zarrfs.stores.base import (
    UNCHANGED,
    Fetched,
    Listing,
    Store,
    Version,
    check_ranges,
    resolve_range,
)
from zarrfs.stores.fileio import (
    CLOEXEC,
    DIRECTORY,
    fsync_directory,
    openat2,
    openat2_works,
    pread_exactly,
    read_exactly,
    start_writeback,
    sync_data,
)

# Temporary files are named ".<key name>.zarrfs-tmp-<random>" beside their target:
# hidden, never a valid chunk or metadata key, and removed by ``cleanup``.
TEMP_MARKER = ".zarrfs-tmp-"

# O_NONBLOCK: opening a FIFO must not wait for a writer (fstat then refuses it).
_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | CLOEXEC
_LSTAT = getattr(os, "O_PATH", os.O_RDONLY | os.O_NONBLOCK) | os.O_NOFOLLOW | CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | CLOEXEC

_MISSING = (errno.ENOENT, errno.ENOTDIR)
# A symlink on the path (openat2, O_NOFOLLOW) or a mount point crossed: not ours.
_FORBIDDEN = (errno.ELOOP, errno.EXDEV)

Resolver = Callable[[int, str, int], int]
T = TypeVar("T")


class DirectoryStore(Store):
    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        try:
            # The root itself may be reached through links: the user named it.
            self._root_fd = os.open(self.root, DIRECTORY)
        except OSError as e:
            raise StoreError(f"opening {self.root!r}: {e.strerror}", e.errno or errno.EIO) from e
        self._root_dev = os.fstat(self._root_fd).st_dev
        self._resolve: Resolver = openat2 if openat2_works(self._root_fd) else self._walk

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
                fd, parent = self._walk_one(fd, name, DIRECTORY), fd
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
            # ODIRECTORY|O_NOFOLLOW says ENOTDIR for a symlink too: which was it?
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
            return self._resolve(self._root_fd, path, DIRECTORY)
        except FileNotFoundError:
            if not create:
                raise
        fd = os.dup(self._root_fd)
        try:
            for name in path.split("/"):
                try:
                    child = self._resolve(fd, name, DIRECTORY)
                except FileNotFoundError:
                    # EEXIST: a concurrent stage made it and may not have synced it yet.
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, dir_fd=fd)
                    try:
                        fsync_directory(fd)
                    except OSError:
                        # Existing, it would never be synced again: make the next try anew.
                        with contextlib.suppress(OSError):
                            os.rmdir(name, dir_fd=fd)
                        raise
                    child = self._resolve(fd, name, DIRECTORY)
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

    def _open_value(self, key: str) -> tuple[int, os.stat_result] | None:
        """A descriptor and fstat of the regular file that is the value of ``key``
        (the caller closes it); ``None`` for a missing key or a directory. A symlink
        anywhere on the path, a mount point crossed, a FIFO, device or socket raise
        InvalidValueError."""
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
                os.close(fd)
                return None
            if not stat.S_ISREG(st.st_mode):
                raise InvalidValueError(f"reading {key!r}: {_kind(st.st_mode)}, not a regular file")
        except OSError as e:
            os.close(fd)
            raise _failure("reading", key, e) from e
        except BaseException:
            os.close(fd)
            raise
        return fd, st

    def get(self, key: str, *, limit: int | None = None) -> bytes | None:
        """The value of a regular file in the store; ``None`` for a missing key or a
        directory. A symlink anywhere on the path, a mount point crossed, a FIFO,
        device or socket, or more than ``limit`` bytes raise InvalidValueError."""
        opened = self._open_value(key)
        if opened is None:
            return None
        fd, st = opened
        try:
            return _read_value(key, fd, st, limit)
        finally:
            os.close(fd)

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        # Not through get_ranges: a subclass counting calls would count it twice.
        ranges = self._read_ranges(key, [(start, length)])
        return None if ranges is None else ranges[0]

    def get_ranges(self, key: str, ranges: list[tuple[int, int]]) -> list[bytes] | None:
        return self._read_ranges(key, ranges)

    def _read_ranges(self, key: str, ranges: list[tuple[int, int]]) -> list[bytes] | None:
        """One open resolved as ``get``'s, then one pread per range; a suffix range
        is placed by the size fstat gave at that open."""
        check_ranges(ranges)
        opened = self._open_value(key)
        if opened is None:
            return None
        fd, st = opened
        try:
            return _read_spans(key, fd, st, ranges)
        finally:
            os.close(fd)

    def size(self, key: str) -> int | None:
        opened = self._open_value(key)
        if opened is None:
            return None
        os.close(opened[0])
        return opened[1].st_size

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
            fd = self._resolve(self._root_fd, _relative(prefix), DIRECTORY)
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
        """Files below ``prefix``, never through a symlink or into another mount; our
        own temporary files are not keys. A symlink, FIFO or device at a key is a
        key too (size 0): reading it is an error, as through a mount, never a
        missing value."""
        try:
            top = self._resolve(self._root_fd, _relative(prefix), DIRECTORY)
        except (OSError, StoreError):
            return
        try:
            for relative, name, st, _ in self._walk_tree(top, regular_only=False):
                if TEMP_MARKER not in name:
                    yield relative + name, st.st_size if stat.S_ISREG(st.st_mode) else 0
        finally:
            os.close(top)

    def _walk_tree(
        self,
        top: int,
        wanted: Callable[[str], bool] | None = None,
        between: Callable[[], None] | None = None,
        *,
        regular_only: bool = True,
    ) -> Iterator[tuple[str, str, os.stat_result, int]]:
        """(directory relative to ``top`` with a trailing "/", name, lstat, descriptor
        of the directory) of every regular file on the root's filesystem (whose name
        is ``wanted``: the others are not even looked at), not following symlinks.
        The descriptor is valid until the next item; ``between`` is called after
        each directory."""
        walk = os.fwalk(".", dir_fd=top)
        try:
            for directory, dirs, files, dir_fd in walk:
                if between is not None and directory != ".":
                    between()
                relative = "" if directory == "." else directory[2:] + "/"
                # fwalk would descend into a mount point: only our own directories.
                dirs[:] = [d for d in dirs if self._own(d, dir_fd, stat.S_ISDIR)]
                if wanted is not None:
                    files = [name for name in files if wanted(name)]
                for name in files:
                    st = self._own(name, dir_fd, stat.S_ISREG if regular_only else _not_dir)
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

    def _write_temp(self, key: str, value: bytes | Sequence[bytes]) -> Staged:
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
                parts = [value] if isinstance(value, bytes | bytearray | memoryview) else value
                for part in parts:
                    view = memoryview(part)
                    while view:
                        view = view[os.write(fd, view) :]
                # Start writing it back now, so the batch's fdatasyncs find less to do.
                start_writeback(fd)
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

    def stage(self, key: str, value: bytes | Sequence[bytes]) -> Staged:
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
                sync_data(directories[item.directory], item.temp_name)
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
            fd = self._resolve(self._root_fd, directory, DIRECTORY)
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
                fsync_directory(fd)
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
            fd = self._resolve(self._root_fd, directory, DIRECTORY)
        except OSError as e:
            if missing_ok and e.errno in (*_MISSING, *_FORBIDDEN):
                return
            raise _failure("syncing", what, e) from e
        try:
            fsync_directory(fd)
        except OSError as e:
            raise _failure("syncing", what, e) from e
        finally:
            os.close(fd)

    def cleanup(self, older_than: float, between: Callable[[], None] | None = None) -> int:
        """Remove temporary files last modified before ``older_than`` (a time.time()).

        The walk runs while the mount already writes: its own temporary files are
        newer than the mount and must be left alone. It follows no symlink and
        enters no other mount, and removes only regular files named as ours; the
        other files are not even stat'ed. ``between`` is called after each
        directory (the mount paces the walk with it).
        """
        removed = 0
        for _, name, st, dir_fd in self._walk_tree(self._root_fd, _is_temp_name, between):
            if st.st_mtime < older_than:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=dir_fd)
                    removed += 1
        return removed

    # -- versions ----------------------------------------------------------------------

    def stat(self, key: str) -> Version | None:
        """The version of the file at ``key``: the fstat of the descriptor a read
        would open (modification time in nanoseconds, size and inode)."""
        opened = self._open_value(key)
        if opened is None:
            return None
        os.close(opened[0])
        return file_version(opened[1])

    def fetch(
        self, key: str, *, limit: int | None = None, unless: Version | None = None
    ) -> Fetched | None:
        """One open: its fstat is the version, compared with ``unless`` before
        anything is read (a file needs no conditional request)."""
        found = self._versioned(key, unless, lambda fd, st: _read_value(key, fd, st, limit))
        return found if found is None or found is UNCHANGED else Fetched(*found)

    def fetch_ranges(
        self, key: str, ranges: list[tuple[int, int]], *, unless: Version | None = None
    ) -> tuple[list[bytes], Version | None] | None:
        check_ranges(ranges)
        return self._versioned(key, unless, lambda fd, st: _read_spans(key, fd, st, ranges))

    def _versioned(
        self, key: str, unless: Version | None, read: Callable[[int, os.stat_result], T]
    ) -> tuple[T, Version] | None:
        """(``read`` of the opened file, its version); UNCHANGED where ``unless``
        names that version; None for a missing key."""
        opened = self._open_value(key)
        if opened is None:
            return None
        fd, st = opened
        try:
            version = file_version(st)
            if unless is not None and unless.tag == version.tag:
                return UNCHANGED  # type: ignore[no-any-return]
            return read(fd, st), version
        finally:
            os.close(fd)


def file_version(st: os.stat_result) -> Version:
    """A file's version: a rename over it (a new inode), a write (a new mtime) or a
    truncation (a new size) each changes the tag."""
    return Version(f"{st.st_mtime_ns}:{st.st_size}:{st.st_ino}", st.st_mtime, st.st_size)


def _read_value(key: str, fd: int, st: os.stat_result, limit: int | None) -> bytes:
    if limit is not None and st.st_size > limit:
        raise InvalidValueError(
            f"reading {key!r}: {st.st_size} bytes, more than the limit of {limit}"
        )
    try:
        return read_exactly(fd, st.st_size)
    except OSError as e:
        raise _failure("reading", key, e) from e


def _read_spans(
    key: str, fd: int, st: os.stat_result, ranges: list[tuple[int, int]]
) -> list[bytes]:
    """One pread per range; a suffix range is placed by the size of ``st``."""
    try:
        return [pread_exactly(fd, *resolve_range(s, n, st.st_size)) for s, n in ranges]
    except OSError as e:
        raise _failure("reading", key, e) from e


def _is_temp_name(name: str) -> bool:
    return name.startswith(".") and TEMP_MARKER in name


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


def _not_dir(mode: int) -> bool:
    return not stat.S_ISDIR(mode)
