"""A store backed by a local directory: one file per key."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from zarrfs.errors import StoreError
from zarrfs.stores.base import Listing, Store

_MISSING = (errno.ENOENT, errno.ENOTDIR, errno.EISDIR)

# Temporary files are named ".<key name>.zarrfs-tmp-<random>" beside their target:
# hidden, never a valid chunk or metadata key, and removed by ``cleanup``.
TEMP_MARKER = ".zarrfs-tmp-"
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL


class DirectoryStore(Store):
    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)

    def describe(self) -> str:
        return self.root

    def _path(self, key: str) -> str:
        parts = [p for p in key.split("/") if p]
        if any(p in (".", "..") for p in parts):
            raise StoreError(f"invalid key {key!r}", errno.EINVAL)
        return os.path.join(self.root, *parts)

    def get(self, key: str) -> bytes | None:
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except OSError as e:
            if e.errno in _MISSING:
                return None
            raise StoreError(f"reading {key!r}: {e.strerror}", e.errno or errno.EIO) from e

    def contains(self, key: str) -> bool:
        return os.path.isfile(self._path(key))

    def list_dir(self, prefix: str) -> Listing:
        keys: list[str] = []
        prefixes: list[str] = []
        try:
            with os.scandir(self._path(prefix)) as it:
                for entry in it:
                    try:
                        if entry.is_dir():
                            prefixes.append(entry.name)
                        elif entry.is_file():
                            keys.append(entry.name)
                    except OSError:
                        continue
        except OSError as e:
            if e.errno in _MISSING:
                return Listing((), ())
            raise StoreError(f"listing {prefix!r}: {e.strerror}", e.errno or errno.EIO) from e
        return Listing(tuple(sorted(keys)), tuple(sorted(prefixes)))

    def scan(self, prefix: str) -> Iterator[tuple[str, int]]:
        """One scandir per directory; our own temporary files are not keys."""
        try:
            top = self._path(prefix)
        except StoreError:
            return
        stack = [("", top)]
        while stack:
            relative, directory = stack.pop()
            try:
                with os.scandir(directory) as it:
                    entries = list(it)
            except OSError:
                continue
            for entry in entries:
                name = f"{relative}{entry.name}"
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append((f"{name}/", entry.path))
                    elif entry.is_file() and TEMP_MARKER not in entry.name:
                        yield name, entry.stat().st_size
                except OSError:
                    continue

    def _write_temp(self, key: str, value: bytes) -> Staged:
        """The value in a new temporary file beside its key (not yet synced)."""
        path = self._path(key)
        directory, name = os.path.split(path)
        temp = os.path.join(directory, f".{name}{TEMP_MARKER}{secrets.token_hex(4)}")
        try:
            try:
                fd = os.open(temp, _CREATE, 0o644)
            except FileNotFoundError:  # the first chunk of a new directory
                os.makedirs(directory, exist_ok=True)
                fd = os.open(temp, _CREATE, 0o644)
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
                os.unlink(temp)
            raise StoreError(f"writing {key!r}: {e.strerror}", e.errno or errno.EIO) from e
        return Staged(key, temp, path)

    def set(self, key: str, value: bytes, *, durable: bool = True) -> None:
        """Temporary file in the same directory, fsync, rename over, fsync the directory."""
        staged = self._write_temp(key, value)
        self.commit([staged])  # the bytes and size, before the rename makes them visible
        if durable:
            try:
                _fsync_directory(os.path.dirname(staged.path))
            except OSError as e:
                raise StoreError(f"writing {key!r}: {e.strerror}", e.errno or errno.EIO) from e

    def stage(self, key: str, value: bytes) -> Staged:
        return self._write_temp(key, value)

    def commit(self, staged: list[Staged]) -> None:
        """Every staged file made durable, then the renames; a crash before a
        rename leaves the old value and a temporary file that the next mount
        removes."""
        done = 0
        try:
            _sync_data([s.temp for s in staged])
            for item in staged:
                os.replace(item.temp, item.path)
                done += 1
        except OSError as e:
            for item in staged[done:]:
                with contextlib.suppress(OSError):
                    os.unlink(item.temp)
            key = staged[done].key if done < len(staged) else staged[-1].key
            raise StoreError(f"writing {key!r}: {e.strerror}", e.errno or errno.EIO) from e

    def delete(self, key: str, *, durable: bool = True) -> None:
        path = self._path(key)
        try:
            os.unlink(path)
        except OSError as e:
            if e.errno in _MISSING:
                return
            raise StoreError(f"deleting {key!r}: {e.strerror}", e.errno or errno.EIO) from e
        if durable:
            _fsync_directory(os.path.dirname(path))

    def sync(self, keys: list[str]) -> None:
        """One fsync per directory that the keys live in (renames and unlinks)."""
        for directory in sorted({os.path.dirname(self._path(key)) for key in keys}):
            try:
                _fsync_directory(directory)
            except OSError as e:
                err = e.errno or errno.EIO
                raise StoreError(f"syncing {directory!r}: {e.strerror}", err) from e

    def cleanup(self, older_than: float) -> int:
        """Remove temporary files last modified before ``older_than`` (a time.time()).

        The walk runs while the mount already writes: its own temporary files are
        newer than the mount and must be left alone.
        """
        removed = 0
        for directory, _, files in os.walk(self.root):
            for name in files:
                if TEMP_MARKER not in name or not name.startswith("."):
                    continue
                path = os.path.join(directory, name)
                with contextlib.suppress(OSError):
                    if os.stat(path).st_mtime < older_than:
                        os.unlink(path)
                        removed += 1
        return removed

    def mtime(self, key: str) -> float | None:
        try:
            return os.stat(self._path(key)).st_mtime
        except OSError:
            return None

    def statvfs(self) -> tuple[int, int, int] | None:
        try:
            st = os.statvfs(self.root)
        except OSError:
            return None
        return st.f_frsize, st.f_blocks, st.f_bavail


@dataclass(frozen=True)
class Staged:
    key: str
    temp: str  # written, not yet synced
    path: str  # where the commit renames it


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


def _sync_data(paths: list[str]) -> None:
    """Make the bytes of ``paths`` durable, one fdatasync each.

    Each file started writing back when it was staged, so these mostly wait for
    I/O already under way. (A ``syncfs`` per batch was tried: it also wrote back
    every other dirty file of the filesystem, which cost a second per GiB the
    user had written elsewhere.)"""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)


def _fsync_directory(directory: str) -> None:
    """Make a rename or unlink durable; a filesystem that cannot fsync directories is fine."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)
