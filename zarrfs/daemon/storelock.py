"""The store lock: a read-write mount of a local directory holds an exclusive ``flock``
on the store's root directory for the life of the daemon.

The kernel drops it when the last descriptor closes, so it is gone after a crash too,
and it follows the inode, so any path to the store conflicts. flock does not say who
holds it: the run-state files of this user's daemons do (``runstate.lock_holder``).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os

from zarrfs.daemon import runstate
from zarrfs.errors import ZarrfsError

log = logging.getLogger(__name__)


class StoreLockError(ZarrfsError):
    """The store cannot be opened to lock it, or another mount holds its lock."""


class StoreLock:
    """An exclusive flock on the store's root directory.

    The lock belongs to the open file description, which a fork shares: the detached
    daemon inherits it and the parent only closes its descriptor (never ``LOCK_UN``,
    which would release it for the daemon too).
    """

    def __init__(self, fd: int | None, device: int, inode: int) -> None:
        self.fd = fd
        self.device = device
        self.inode = inode

    @classmethod
    def take(cls, location: str) -> StoreLock:
        try:
            # Not inherited across exec: a helper program must not keep the store locked.
            fd = os.open(location, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as e:
            raise StoreLockError(f"store {location!r}: {e.strerror}") from e
        st = os.fstat(fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLockError(
                f"store {location!r} is already mounted read-write " + _holder(st.st_dev, st.st_ino)
            ) from None
        except OSError as e:
            os.close(fd)
            if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise StoreLockError(f"store {location!r}: cannot lock: {e.strerror}") from e
            # A filesystem without locks: mount anyway, unguarded.
            log.warning(
                "store %s cannot be locked (%s): a second mount is not refused",
                location,
                e.strerror,
            )
            return cls(None, st.st_dev, st.st_ino)
        return cls(fd, st.st_dev, st.st_ino)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _holder(device: int, inode: int) -> str:
    """Who holds the lock, as far as this user's run directory tells (flock does not)."""
    found = runstate.lock_holder(device, inode)
    if found is None:
        return "by another zarrfs process"
    mountpoint, pid = found
    return f"on {mountpoint!r} by process {pid}"
