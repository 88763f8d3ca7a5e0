"""``zarrfs umount MOUNTPOINT``: unmount, wait for the daemon to end, say how it ended.

A daemon that this command did not start has no exit status to wait for: it reads
the run-state file the daemon left (daemon/runstate.py) once the daemon is gone, and
exits non-zero with its one line when anything written could not be stored. The
mount point is checked in /proc/self/mountinfo first: only a zarrfs mount's daemon
is asked (its pid, an extended attribute of the mount's root) and waited for.
"""

from __future__ import annotations

import errno
import os
import subprocess
import time

import click

from zarrfs.commands.output import fail
from zarrfs.daemon import runstate
from zarrfs.daemon.mountinfo import find_mount
from zarrfs.fuse.operations import PID_XATTR

ZARRFS_FSTYPE = "fuse.zarrfs"  # the mount's subtype, as /proc/self/mountinfo shows it


def _daemon_pid(mountpoint: str) -> int | None:
    """The daemon's pid, None if it has died (the mount only needs removing)."""
    try:
        pid = int(os.getxattr(mountpoint, PID_XATTR.decode()))
    except OSError as e:
        if e.errno == errno.ENOTCONN:
            return None
        fail(f"{mountpoint!r} is not a zarrfs mount: {e.strerror}")
    except ValueError:
        fail(f"{mountpoint!r} is not a zarrfs mount")
    if pid <= 0:
        fail(f"{mountpoint!r} is not a zarrfs mount")
    return pid


def _check_zarrfs_mount(mountpoint: str) -> str:
    """The mount's path, once the kernel says it is a zarrfs mount: its extended
    attributes alone are no proof (any filesystem can carry a forged pid)."""
    target = os.path.realpath(mountpoint)
    try:
        with open("/proc/self/mountinfo") as f:
            entry = find_mount(target, f.read())
    except OSError as e:
        fail(f"cannot read /proc/self/mountinfo: {e.strerror}")
    if entry is None:
        if not os.path.isdir(mountpoint):
            fail(f"{mountpoint!r} is not a directory")
        fail(f"{mountpoint!r} is not mounted")
    if entry.fstype != ZARRFS_FSTYPE:
        fail(f"{mountpoint!r} is not a zarrfs mount (it is {entry.fstype})")
    return target


def _owner(pid: int) -> int:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return os.geteuid()


@click.command("umount")
@click.argument("mountpoint")
@click.option("--timeout", default=0.0, help="Give up waiting for the daemon after N seconds.")
def umount_command(mountpoint: str, timeout: float) -> None:
    """Unmount MOUNTPOINT; returns once the zarrfs daemon has exited, non-zero if
    anything written could not be stored."""
    target = _check_zarrfs_mount(mountpoint)
    pid = _daemon_pid(target)
    uid = _owner(pid) if pid is not None else os.geteuid()  # read while it still runs
    if pid is not None:
        runstate.keep(pid, uid)
    result = subprocess.run(
        ["fusermount3", "-u", target], capture_output=True, text=True, check=False
    )
    if result.returncode:
        reason = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "failed"
        fail(f"cannot unmount {mountpoint!r}: {reason}")
    if pid is None:  # the daemon had died before: the connection was gone
        fail(f"{mountpoint}: {runstate.died(runstate.collect_dead(target))}")
    deadline = time.monotonic() + timeout if timeout > 0 else None
    while runstate.alive(pid):
        if deadline is not None and time.monotonic() > deadline:
            fail(f"daemon {pid} still running after {timeout:g}s")
        time.sleep(0.05)
    problem = runstate.explain(runstate.collect(pid, uid), pid)
    if problem is not None:
        fail(f"{mountpoint}: {problem}")
