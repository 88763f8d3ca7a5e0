"""What a daemon tells other zarrfs processes: its run-state file.

Each daemon keeps ``<pid>.status`` (one JSON object) in a private per-user run
directory. It says ``running`` from before the mount until the daemon ends; a clean end
removes it, a failed one (data not stored) rewrites it with what was lost. ``zarrfs
umount`` cannot read the exit status of a daemon it did not start, so it reads this
file once the daemon is gone: absent means success, ``failed`` carries the report and
a ``running`` left behind means the daemon was killed or crashed. The directory is
/run/zarrfs for root, else $XDG_RUNTIME_DIR/zarrfs or <tmp>/zarrfs-<uid>. Files nobody
collected (no ``zarrfs umount`` after a failure or crash) are swept an hour later.

A detached daemon with no syslog to log to (containers, WSL) and no ``--log-file``
logs to ``<pid>.log`` beside it; the log of a daemon that has ended is swept a week
after its last line.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import tempfile
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from zarrfs.core.sizes import format_size, plural
from zarrfs.errors import ZarrfsError

if TYPE_CHECKING:
    from zarrfs.daemon.storelock import StoreLock

log = logging.getLogger(__name__)

ROOT_RUN_DIR = "/run/zarrfs"
STATUS_SUFFIX = ".status"
STALE_AFTER = 3600.0  # seconds after its last write that a dead daemon's file is swept
LOG_SUFFIX = ".log"
LOG_KEPT = 7 * 86400.0  # seconds after its last line that an ended daemon's log is swept


class RunStateError(ZarrfsError):
    """The run directory cannot be used, or a run-state file cannot be written."""


def _private_dir(path: str, uid: int) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == uid and not st.st_mode & 0o022


def run_dir() -> str:
    """This user's run directory (which may not exist yet)."""
    uid = os.geteuid()
    if uid == 0:
        return ROOT_RUN_DIR
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and _private_dir(runtime, uid):
        return os.path.join(runtime, "zarrfs")
    return os.path.join(tempfile.gettempdir(), f"zarrfs-{uid}")


def ensure_run_dir() -> str:
    path = run_dir()
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise RunStateError(f"run directory {path!r}: {e.strerror}") from e
    # Under a shared temporary directory another user may have made it first.
    if not _private_dir(path, os.geteuid()):
        raise RunStateError(f"run directory {path!r} is not a private directory of this user")
    return path


def log_path() -> str:
    """Where this daemon logs when there is no syslog (the run directory is made)."""
    return os.path.join(ensure_run_dir(), f"{os.getpid()}{LOG_SUFFIX}")


def status_dirs(uid: int) -> list[str]:
    """Where a daemon running as ``uid`` may have put its status file: the unmounting
    user may differ from the mounting one (root unmounting a user's mount)."""
    dirs = [run_dir()] if uid == os.geteuid() else []
    if uid == 0:
        dirs.append(ROOT_RUN_DIR)
    dirs += [f"/run/user/{uid}/zarrfs", os.path.join(tempfile.gettempdir(), f"zarrfs-{uid}")]
    return list(dict.fromkeys(dirs))


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting to be reaped has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _write_atomically(path: str, record: dict[str, Any]) -> None:
    # A reader sees the old file or the new one, never a torn one.
    temp = f"{os.path.dirname(path)}/.{os.path.basename(path)}.tmp"
    with open(temp, "w") as f:
        f.write(json.dumps(record) + "\n")
    os.replace(temp, path)


def _read_status(path: str, uid: int) -> dict[str, Any] | None:
    """The record at ``path`` if it is a regular file of ``uid``'s holding a JSON object."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
            return None
        with open(path) as f:
            record = json.loads(f.read())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _statuses(directory: str) -> list[tuple[str, dict[str, Any]]]:
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    found = []
    for name in names:
        if name.endswith(STATUS_SUFFIX) and not name.startswith("."):
            path = os.path.join(directory, name)
            record = _read_status(path, os.geteuid())
            if record is not None:
                found.append((path, record))
    return found


def _sweep(directory: str) -> None:
    """Remove the files of daemons that ended long ago: a failure or crash nobody ran
    ``zarrfs umount`` for. The age keeps a file an umount is about to read: both the
    daemon's last write and ``keep`` make it new."""
    now = time.time()
    for path, record in _statuses(directory):
        pid = record.get("pid")
        with contextlib.suppress(OSError):
            if (
                now - os.lstat(path).st_mtime > STALE_AFTER
                and isinstance(pid, int)
                and pid != os.getpid()
                and not alive(pid)
            ):
                os.unlink(path)
    _sweep_logs(directory, now)


def _sweep_logs(directory: str, now: float) -> None:
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            pid = name.removesuffix(LOG_SUFFIX)
            if name == pid or not pid.isdigit() or int(pid) == os.getpid():
                continue
            path = os.path.join(directory, name)
            with contextlib.suppress(OSError):
                st = os.lstat(path)
                if (
                    stat.S_ISREG(st.st_mode)
                    and now - st.st_mtime > LOG_KEPT
                    and not alive(int(pid))
                ):
                    os.unlink(path)


def lock_holder(device: int, inode: int) -> tuple[Any, int] | None:
    """(mount point, pid) of a live daemon of this user that says it holds the lock
    of the store directory ``(device, inode)``; None if none does."""
    for _, record in _statuses(run_dir()):
        pid = record.get("pid")
        if (
            record.get("state") == "running"
            and (record.get("device"), record.get("inode")) == (device, inode)
            and isinstance(pid, int)
            and pid != os.getpid()
            and alive(pid)
        ):
            return record.get("mountpoint"), pid
    return None


# -- what was not stored ---------------------------------------------------------------


@dataclass
class Unstored:
    """What a daemon could not store at its end."""

    chunks: int = 0  # dirty chunks left after the final flush failed
    nbytes: int = 0  # their decoded size
    arrays: int = 0  # arrays with anything not stored (chunks or metadata)
    tail_bytes: int = 0  # pending partial rows, dropped
    tail_arrays: int = 0
    tail_names: list[str] = field(default_factory=list)  # the first arrays, by name
    error: str | None = None  # why the final flush failed

    def describe(self) -> str:
        parts = []
        if self.error is not None:
            if self.chunks:
                verb = "was" if self.chunks == 1 else "were"
                what = f"{plural(self.chunks, 'chunk')} ({format_size(self.nbytes)}) of "
                parts.append(f"{what}{plural(self.arrays, 'array')} {verb} not stored")
            elif self.arrays:
                verb = "was" if self.arrays == 1 else "were"
                parts.append(f"the metadata of {plural(self.arrays, 'array')} {verb} not stored")
            else:
                parts.append("data was not stored")
            parts[-1] += f": {self.error}"
        if self.tail_bytes:
            rows = "an incomplete row" if self.tail_arrays == 1 else "incomplete rows"
            verb = "was" if self.tail_bytes == 1 else "were"
            names = ", ".join(self.tail_names)
            if names and self.tail_arrays > len(self.tail_names):
                names += f" and {self.tail_arrays - len(self.tail_names)} more"
            parts.append(
                f"{plural(self.tail_bytes, 'byte')} of {rows} of "
                f"{plural(self.tail_arrays, 'array')}{f' ({names})' if names else ''} "
                f"{verb} dropped"
            )
        return "; ".join(parts)


# -- the run-state file ----------------------------------------------------------------


class RunState:
    """This daemon's ``<pid>.status``."""

    def __init__(self, path: str, record: dict[str, Any]) -> None:
        self.path = path
        self.record = record

    @classmethod
    def begin(cls, mountpoint: str, store: str, lock: StoreLock | None) -> RunState:
        """The file of a daemon serving ``store`` on ``mountpoint``; with the store's
        ``lock``, what it locks, so that a mount refused by it can name this one."""
        pid = os.getpid()  # the daemon's: after the fork when detached
        record: dict[str, Any] = {"pid": pid, "state": "running", "mountpoint": mountpoint}
        record["store"] = store
        if lock is not None:
            record.update(device=lock.device, inode=lock.inode)
        directory = ensure_run_dir()
        _sweep(directory)
        path = os.path.join(directory, f"{pid}{STATUS_SUFFIX}")
        try:
            _write_atomically(path, record)
        except OSError as e:
            raise RunStateError(f"cannot write {path!r}: {e.strerror}") from e
        return cls(path, record)

    def succeeded(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def failed(self, message: str, unstored: Unstored | None = None) -> None:
        record = {**self.record, "state": "failed", "message": message}
        if unstored is not None:
            record["unstored"] = vars(unstored)
        try:
            _write_atomically(self.path, record)
        except OSError as e:
            log.error("cannot write %s for zarrfs umount: %s", self.path, e.strerror)


def keep(pid: int, uid: int) -> None:
    """Called before unmounting: the daemon's file is wanted, so no sweep removes it."""
    for directory in status_dirs(uid):
        with contextlib.suppress(OSError):
            os.utime(os.path.join(directory, f"{pid}{STATUS_SUFFIX}"))


def collect(pid: int, uid: int) -> dict[str, Any] | None:
    """The status a daemon left (removed once read); None when it ended cleanly."""
    for directory in status_dirs(uid):
        path = os.path.join(directory, f"{pid}{STATUS_SUFFIX}")
        record = _read_status(path, uid)
        if record is not None and record.get("pid") == pid:
            with contextlib.suppress(OSError):
                os.unlink(path)
            return record
    return None


def collect_dead(mountpoint: str) -> int | None:
    """The pid of a dead daemon that served ``mountpoint``, from the ``running`` record
    it left (removed, with any older ones for the same mount point)."""
    newest: tuple[float, int] | None = None
    for directory in status_dirs(os.geteuid()):
        for path, record in _statuses(directory):
            pid = record.get("pid")
            if record.get("mountpoint") == mountpoint and isinstance(pid, int) and not alive(pid):
                with contextlib.suppress(OSError):
                    when = os.lstat(path).st_mtime
                    os.unlink(path)
                    newest = max(newest or (when, pid), (when, pid))
    return newest[1] if newest is not None else None


def died(pid: int | None) -> str:
    who = f"the zarrfs daemon (process {pid})" if pid is not None else "the zarrfs daemon"
    return f"{who} was killed or crashed: what it had not stored is lost"


def explain(record: dict[str, Any] | None, pid: int) -> str | None:
    """One line for ``zarrfs umount`` (None: the daemon ended cleanly)."""
    if record is None:
        return None
    if record.get("state") == "failed":
        return str(record.get("message") or "the daemon failed")
    return died(pid)  # its "running" record outlived it
