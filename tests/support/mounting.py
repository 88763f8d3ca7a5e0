"""Real mounts for integration tests: a ``zarrfs mount -f`` subprocess per mount, its
output (the daemon's log) in a file that tests.support.daemon_logs checks.

The mount is polled with ``os.path.ismount``; whatever happens, it is unmounted with
``fusermount3 -u`` (lazily if busy) and the daemon we started is waited for, or
killed by its PID. A mount that cannot come up fails the test, never skips it.
"""

from __future__ import annotations

import errno
import functools
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import daemon_logs
from tests.support.paths import REPO
from zarrfs.daemon import runstate

MOUNT_TIMEOUT = 30.0

# Every zarrfs a test starts runs this checkout's code, not the installed one: also
# ``python -m zarrfs`` from another directory, and mount(8)'s helper, which runs the
# /usr/local/bin/zarrfs link (mount(8) passes PYTHONPATH on to its helpers).
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(REPO), *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
)


@dataclass
class Mounted:
    path: Path
    process: subprocess.Popen
    log_file: Path

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")

    def __truediv__(self, other: str) -> Path:
        return self.path / other


def read_range(path: str | Path, offset: int, length: int) -> bytes:
    """One pread, as a legacy reader would."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, length, offset)
    finally:
        os.close(fd)


def expect_eio(path: str | Path, offset: int, length: int) -> None:
    """That pread fails with EIO (a chunk that cannot be decoded, a store that failed)."""
    with pytest.raises(OSError) as info:
        read_range(path, offset, length)
    assert info.value.errno == errno.EIO, info.value


def zarrfs_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "zarrfs", *args]


def unmount(path: str | Path) -> str | None:
    """Unmount; if the mount is busy, detach it lazily and return fusermount3's complaint."""
    path = str(path)
    if not os.path.ismount(path):
        return None
    result = subprocess.run(["fusermount3", "-u", path], capture_output=True, check=False)
    if result.returncode and os.path.ismount(path):
        subprocess.run(["fusermount3", "-u", "-z", path], capture_output=True, check=False)
        return result.stderr.decode(errors="replace").strip() or "fusermount3 -u failed"
    return None


def wait_for_mount(
    path: str | Path, process: subprocess.Popen | None = None, log_file: Path | None = None
) -> None:
    """Until ``path`` is a mount point; fails if ``process`` (a ``zarrfs mount -f``)
    exits first, with its log, or after MOUNT_TIMEOUT seconds."""
    deadline = time.monotonic() + MOUNT_TIMEOUT
    while not os.path.ismount(path):
        if process is not None and process.poll() is not None:
            log = "" if log_file is None else log_file.read_text(errors="replace")
            raise AssertionError(f"zarrfs exited with {process.returncode} before mounting:\n{log}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} not mounted after {MOUNT_TIMEOUT}s")
        time.sleep(0.02)


def peak_rss(process: subprocess.Popen) -> int:
    """The daemon's peak resident memory so far, in bytes (VmHWM)."""
    with open(f"/proc/{process.pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for pid {process.pid}")


@contextmanager
def memory_cap(extra: int = 2 << 30) -> Iterator[None]:
    """Cap this (test) process's address space at its current size plus ``extra``, so
    a regression that allocates without bound raises MemoryError instead of taking
    the machine down."""
    with open("/proc/self/status") as f:
        size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    old = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (size + extra, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, old)


def _access(options: tuple[str, ...]) -> tuple[str, ...]:
    """Tests mount read-write unless they ask for ``--read-only`` (or ``--rw`` itself)."""
    if "--read-only" in options or "--rw" in options:
        return options
    return ("--rw", *options)


def cap_address_space(nbytes: int) -> None:
    """RLIMIT_AS of this process (called in a child before it runs zarrfs)."""
    resource.setrlimit(resource.RLIMIT_AS, (nbytes, nbytes))


# Signals a crashed process dies of (not those a test or the kernel sends to stop one).
CRASHES = {signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGILL, signal.SIGFPE}


@contextmanager
def mounted(
    store: str | Path,
    *options: str,
    log_dir: Path | None = None,
    memory_limit: int | None = None,
) -> Iterator[Mounted]:
    """Mount ``store`` in the foreground in a subprocess; unmount on every exit path.

    ``memory_limit`` caps the daemon's address space (RLIMIT_AS), so a test of
    hostile input that regresses fails instead of taking the machine down; assert
    on ``peak_rss`` to see how much the daemon really used.
    """
    mountpoint = tempfile.mkdtemp(prefix="zarrfs-mnt-")
    log_file = Path(tempfile.mkstemp(prefix="zarrfs-log-", dir=log_dir)[1])
    daemon_logs.watch(log_file, until_ended=True)
    limit = None if memory_limit is None else functools.partial(cap_address_space, memory_limit)
    with open(log_file, "wb") as log:
        process = subprocess.Popen(
            zarrfs_command("mount", "-f", *_access(options), str(store), mountpoint),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=limit,
        )
    busy: str | None = None
    try:
        wait_for_mount(mountpoint, process, log_file)
        yield Mounted(Path(mountpoint), process, log_file)
    finally:
        busy = unmount(mountpoint)
        try:
            process.wait(timeout=5 if busy else 30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        unmount(mountpoint)
        os.rmdir(mountpoint)
        runstate.collect(process.pid, os.getuid())  # as zarrfs umount would: no file left
        daemon_logs.ended(log_file)
    # Only reached when the body succeeded: a file it left open or mapped is its bug.
    assert busy is None, f"mount was busy at unmount (a file left open or mapped?): {busy}"
    # Whatever its exit status says of the data, the daemon must not have crashed.
    assert -process.returncode not in CRASHES, (
        f"the daemon died of signal {-process.returncode}:\n{log_file.read_text()[-4000:]}"
    )
