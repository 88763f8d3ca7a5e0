"""The disk cache's directory (stores/diskcache.py), shared by every mount of the
machine that names it:

    DIR/            0700, the user's own
      lock          flock'ed while files are put in place, removed or counted;
                    its first 8 bytes are the bytes the entries hold together
      tmp/          files being written (one per writer, never shared)
      objects/xx/   the entries (cachefiles.py), 0600

A file is written whole in ``tmp/`` and renamed into place, so a reader sees a
complete file or none. The lock is held only around renames, unlinks and counts,
never across a store's request. Eviction (least recently used first, down to a
tenth under the bound) happens when a new file takes the total past the bound,
after a fresh count of the files, so several mounts sharing the directory keep one
bound; it tolerates files that others removed meanwhile. A reader whose file is
removed under it still reads the open file, or finds none (a miss).

Nothing here fails a read: an error of the cache's own disk (full, gone, read-only)
is logged and the cache only stops adding for a while.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import stat
import struct
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from zarrfs.errors import StoreError
from zarrfs.stores.cachefiles import CachedFile, bucket_of, low_water, to_evict
from zarrfs.stores.readbuffers import ReadBuffers

log = logging.getLogger(__name__)

_USAGE = struct.Struct("<Q")
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
PAUSE = 30.0  # seconds the cache adds nothing after its disk was found full
STALE_TEMP = 3600.0  # seconds after which a temporary file is a crashed writer's
RECOUNT = 1000  # files added by this process between two counts of the directory
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


@dataclass
class Read:
    data: bytes | memoryview  # a view of a pooled buffer (stores/readbuffers.py)
    validated: int  # when it was last validated (ns since the epoch)
    inode: int


class CacheDir:
    def __init__(self, path: str, max_bytes: int) -> None:
        """The directory, made (0700) if missing; StoreError if it is not the user's
        own directory or cannot be made."""
        self.path = os.path.abspath(path)
        self.max_bytes = max_bytes
        self.objects = os.path.join(self.path, "objects")
        self.tmp = os.path.join(self.path, "tmp")
        self._lock_path = os.path.join(self.path, "lock")
        self._paused_until = 0.0  # adding nothing until then (its disk was full)
        self._quiet_until = 0.0  # logging no trouble until then
        self._added = 0  # files since the last count
        self._guard = threading.Lock()
        self.evicted = 0
        self.full = 0  # files not added because the disk was full
        self.last_usage = 0  # the total as this process last wrote it (for stats)
        self._buffers = ReadBuffers()  # what files are read into
        try:
            for directory in (self.path, self.objects, self.tmp):
                os.makedirs(directory, mode=0o700, exist_ok=True)
                st = os.lstat(directory)
                if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                    raise StoreError(f"disk cache {self.path!r}: not a directory of this user")
                if stat.S_IMODE(st.st_mode) != 0o700:
                    os.chmod(directory, 0o700)
            with self._locked() as fd:
                self._write_usage(fd, self._recount())
        except OSError as e:
            raise StoreError(f"disk cache {self.path!r}: {e.strerror}", e.errno or 5) from None

    # -- reading ---------------------------------------------------------------------

    def path_of(self, name: str) -> str:
        return os.path.join(self.objects, bucket_of(name), name)

    def read(self, name: str, most: int) -> Read | None:
        """The file's bytes if it is there and at most ``most`` bytes long (a longer
        one is left for a caller that may read more); its use is stamped."""
        try:
            fd = os.open(self.path_of(name), _OPEN)
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.ENOTDIR):
                self._trouble("reading", e)
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > most:
                return None
            data = self._buffers.read(fd, st.st_size)
            now = time.time_ns()
            if now - st.st_atime_ns > 1_000_000_000:  # the LRU order, not every hit
                os.utime(fd, ns=(now, st.st_mtime_ns))
            return Read(data, st.st_mtime_ns, st.st_ino)
        except OSError as e:
            self._trouble("reading", e)
            return None
        finally:
            os.close(fd)

    def restamp(self, name: str, inode: int, validated: int) -> None:
        """The entry (if it is still the file read, ``inode``) validated at ``validated``."""
        try:
            fd = os.open(self.path_of(name), _OPEN)
        except OSError:
            return
        try:
            if os.fstat(fd).st_ino == inode:
                os.utime(fd, ns=(time.time_ns(), validated))
        except OSError as e:
            self._trouble("stamping", e)
        finally:
            os.close(fd)

    # -- writing ---------------------------------------------------------------------

    def add(self, name: str, parts: Sequence[bytes | memoryview], validated: int) -> bool:
        """The file written whole, then renamed into place; False where the cache
        does not take it (too large, its disk full, any error of its own)."""
        size = sum(len(p) for p in parts)
        if size > self.max_bytes or time.monotonic() < self._paused_until:
            return False
        try:
            fd, temp = tempfile.mkstemp(dir=self.tmp, prefix="entry-")  # 0600
        except OSError as e:
            self._failed_write(e)
            return False
        try:
            try:
                for part in parts:
                    view = memoryview(part).cast("B")
                    while view:
                        view = view[os.write(fd, view) :]
                os.utime(fd, ns=(time.time_ns(), validated))
            finally:
                os.close(fd)
            self._place(temp, name, size)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            self._failed_write(e)
            return False
        return True

    def _place(self, temp: str, name: str, size: int) -> None:
        target = self.path_of(name)
        with self._locked() as fd:
            usage = self._read_usage(fd)
            with self._guard:
                self._added += 1
                recount = self._added >= RECOUNT
                if recount:
                    self._added = 0
            if usage is None or recount:
                usage = self._recount()
            try:
                old = os.lstat(target).st_size
            except FileNotFoundError:
                old = 0
            try:
                os.rename(temp, target)
            except FileNotFoundError:  # its bucket directory: made on first use
                os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
                os.rename(temp, target)
            usage += size - old
            if usage > self.max_bytes:
                usage = self._evict(low_water(self.max_bytes))
            self._write_usage(fd, usage)

    def remove_key(self, prefix: str) -> None:
        """Remove every file whose name starts with ``prefix`` (the parts of a key)."""
        bucket = os.path.join(self.objects, bucket_of(prefix))
        try:
            with self._locked() as fd:
                usage = self._read_usage(fd)
                matching: list[str] = []
                with contextlib.suppress(FileNotFoundError), os.scandir(bucket) as it:
                    matching = [e.path for e in it if e.name.startswith(prefix)]
                freed = sum(self._unlink(path) for path in matching)
                if usage is not None:
                    self._write_usage(fd, max(usage - freed, 0))
        except OSError as e:
            self._trouble("removing", e)

    def remove_read(self, name: str, inode: int) -> None:
        """Remove the file read as ``inode`` (found corrupt), not one put in its
        place since."""
        try:
            with self._locked() as fd:
                path = self.path_of(name)
                st = os.lstat(path)
                if st.st_ino != inode:
                    return
                usage = self._read_usage(fd)
                freed = self._unlink(path)
                if usage is not None:
                    self._write_usage(fd, max(usage - freed, 0))
        except FileNotFoundError:
            pass
        except OSError as e:
            self._trouble("removing", e)

    # -- size --------------------------------------------------------------------------

    def usage(self) -> int:
        """The bytes the entries hold together (as last counted or kept up)."""
        try:
            with self._locked() as fd:
                found = self._read_usage(fd)
                return self._recount() if found is None else found
        except OSError:
            return 0

    def _files(self) -> Iterator[CachedFile]:
        """Every entry file, with its size and last use; files that go away while
        counted are not counted (another mount evicted them)."""
        try:
            buckets = list(os.scandir(self.objects))
        except FileNotFoundError:
            return
        for bucket in buckets:
            try:
                with os.scandir(bucket.path) as it:
                    for entry in it:
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except FileNotFoundError:
                            continue
                        yield CachedFile(entry.path, st.st_size, st.st_atime_ns)
            except (FileNotFoundError, NotADirectoryError):
                continue

    def _recount(self) -> int:
        """The total of the entries, counted now (under the lock); temporary files
        of crashed writers are removed on the way."""
        now = time.time()
        with contextlib.suppress(FileNotFoundError), os.scandir(self.tmp) as it:
            for entry in it:
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_ctime < now - STALE_TEMP:
                        os.unlink(entry.path)
        return sum(f.size for f in self._files())

    def _evict(self, target: int) -> int:
        """Remove the least recently used entries down to ``target`` bytes (under
        the lock); the new total."""
        victims, total = to_evict(self._files(), target)
        for victim in victims:
            if self._unlink(victim.name):
                self.evicted += 1
        return total

    @staticmethod
    def _unlink(path: str) -> int:
        """The bytes freed (0 where another mount removed it first)."""
        try:
            size = os.lstat(path).st_size
            os.unlink(path)
        except FileNotFoundError:
            return 0
        return size

    @contextlib.contextmanager
    def _locked(self) -> Iterator[int]:
        """The directory's lock: a descriptor of its own, so that threads of one
        process exclude each other as processes do."""
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            os.close(fd)

    @staticmethod
    def _read_usage(fd: int) -> int | None:
        raw = os.pread(fd, _USAGE.size, 0)
        return _USAGE.unpack(raw)[0] if len(raw) == _USAGE.size else None

    def _write_usage(self, fd: int, usage: int) -> None:
        self.last_usage = max(usage, 0)
        os.pwrite(fd, _USAGE.pack(self.last_usage), 0)

    # -- trouble -----------------------------------------------------------------------

    def _failed_write(self, e: OSError) -> None:
        if e.errno in _FULL:
            self.full += 1
        self._paused_until = time.monotonic() + PAUSE
        self._trouble("writing", e)

    def _trouble(self, action: str, e: OSError) -> None:
        now = time.monotonic()
        if now < self._quiet_until:
            return  # one line per pause, not one per read
        self._quiet_until = now + PAUSE
        log.warning(
            "disk cache %s: %s failed (%s): read from the store instead",
            self.path,
            action,
            e.strerror or type(e).__name__,
        )
