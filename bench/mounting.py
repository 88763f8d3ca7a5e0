"""Mounts the benchmark makes, and the reads it times through them.

Every mount is a foreground daemon in a subprocess of ours (``python -m zarrfs mount
-f``, or bench/memfs.py), run from the repository's root so that it runs this
checkout's code. The mount point is polled with ``os.path.ismount``; whatever
happens, it is unmounted (``fusermount3 -u``, lazily if busy) and the daemon is
waited for, or killed by the PID we hold: nothing else is ever signalled.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench import cpumeter
from bench.data import check_file
from bench.memfs import FILE_NAME
from bench.profiling import profiled
from bench.results import BenchError

ROOT = Path(__file__).resolve().parent.parent  # the repository: bench/ and zarrfs/
MOUNT_TIMEOUT = 30.0  # seconds a daemon may take to mount
EXIT_TIMEOUT = 30.0  # seconds it may take to end once unmounted (5 when it was busy)


@dataclass
class Mounted:
    """A daemon of ours and where it mounted; ``mounted / "arr"`` is a path under it."""

    path: Path
    process: subprocess.Popen
    log_file: Path

    def tail(self, lines: int = 15) -> str:
        """The last lines of the daemon's log, indented, for an error message."""
        text = self.log_file.read_text(errors="replace")
        return "\n".join(f"    {line}" for line in text.splitlines()[-lines:])

    def __truediv__(self, name: str) -> Path:
        return self.path / name


def wait_or_kill(process: subprocess.Popen, seconds: float) -> None:
    """Wait for a process of ours to end; kill it (by the PID we hold) if it has not
    within ``seconds``."""
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def unmount(path: str) -> str | None:
    """Unmount; if the mount is busy, detach it lazily and return fusermount3's complaint."""
    if not os.path.ismount(path):
        return None
    first = subprocess.run(["fusermount3", "-u", path], capture_output=True, text=True)
    if not os.path.ismount(path):
        return None
    subprocess.run(["fusermount3", "-u", "-z", path], capture_output=True)
    return first.stderr.strip() or "fusermount3 -u failed"


@contextmanager
def _daemon(command: list[str], name: str, log_dir: Path) -> Iterator[Mounted]:
    """Run ``command`` + a new mount point until it has mounted; yields the mount.

    The daemon's exit status is checked once the body has succeeded: a daemon that
    failed (data not stored, say) fails the measurement that used it.
    """
    mountpoint = tempfile.mkdtemp(prefix=f"{name}-mnt-")
    log_file = Path(tempfile.mkstemp(prefix=f"{name}-log-", dir=log_dir)[1])
    with open(log_file, "wb") as log:
        process = subprocess.Popen(
            [*command, mountpoint],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    mounted = Mounted(Path(mountpoint), process, log_file)
    busy: str | None = None
    try:
        deadline = time.monotonic() + MOUNT_TIMEOUT
        while not os.path.ismount(mountpoint):
            if process.poll() is not None:
                raise BenchError(
                    f"{name} exited with {process.returncode} before mounting:\n{mounted.tail()}"
                )
            if time.monotonic() > deadline:
                raise BenchError(f"{name}: {mountpoint} not mounted after {MOUNT_TIMEOUT:.0f} s")
            time.sleep(0.02)
        yield mounted
    finally:
        busy = unmount(mountpoint)
        wait_or_kill(process, 5 if busy else EXIT_TIMEOUT)
        unmount(mountpoint)
        os.rmdir(mountpoint)
    # Only reached when the body succeeded: a file it left open is the benchmark's bug.
    if busy is not None:
        raise BenchError(f"{name}: the mount was busy at unmount (a file left open?): {busy}")
    if process.returncode:
        raise BenchError(
            f"{name} exited with {process.returncode} after unmounting:\n{mounted.tail()}"
        )


@contextmanager
def mounted(store: str | Path, *options: str, log_dir: Path) -> Iterator[Mounted]:
    """zarrfs mounting ``store`` (a path or URL), read-write unless ``--read-only`` is
    among ``options``: the write sections need it, and every section reads the same
    kind of mount."""
    access = () if "--read-only" in options or "--rw" in options else ("--rw",)
    command = [sys.executable, "-m", "zarrfs", "mount", "-f", *access, *options, str(store)]
    with _daemon(command, "zarrfs", log_dir) as m:
        yield m


@contextmanager
def memfs_mounted(size: int, log_dir: Path, direct_io: bool = False) -> Iterator[tuple[Path, Path]]:
    """bench/memfs.py serving ``size`` bytes from memory (``direct_io``: opened as
    zarrfs opens array data by default): yields (file path, log file).

    Its kernel read-ahead is raised as zarrfs raises its own (1 MiB by default), so
    both are sent reads of the same size: at the kernel's 128 KiB, memfs answers
    eight times the requests and reads at half its rate.
    """
    from zarrfs.daemon.build import MountOptions
    from zarrfs.daemon.tuning import set_readahead

    mode = ["--direct-io"] if direct_io else []
    command = [sys.executable, "-m", "bench.memfs", *mode, str(size)]
    with _daemon(command, "memfs", log_dir) as m:
        set_readahead(str(m.path), MountOptions().readahead)
        yield m.path / FILE_NAME, m.log_file


@contextmanager
def treefs_mounted(dirs: int, files: int, log_dir: Path) -> Iterator[Mounted]:
    """bench/memfs.py serving a tree of ``dirs`` directories of ``files`` files."""
    command = [sys.executable, "-m", "bench.memfs", "--tree", str(dirs), str(files)]
    with _daemon(command, "treefs", log_dir) as m:
        yield m


# -- reads and writes through a mount -----------------------------------------------------


def dd_command(source: Path, target: Path | str, *flags: str) -> list[str]:
    return ["dd", f"if={source}", f"of={target}", "bs=1M", *flags, "status=none"]


def dd(m: Mounted, source: Path, target: Path | str, *flags: str) -> float:
    """Run dd through the mount ``m``; the wall time in seconds."""
    start = time.perf_counter()
    result = subprocess.run(dd_command(source, target, *flags), capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode:
        raise BenchError(
            f"dd {source} -> {target} failed (exit {result.returncode}): "
            f"{result.stderr.strip()}\n  Last lines of the zarrfs log:\n{m.tail()}"
        )
    return elapsed


def dd_concurrently(m: Mounted, sources: list[Path]) -> tuple[list[float], float]:
    """One dd to /dev/null per source, all at once: each one's seconds, and the wall time."""
    ends = [0.0] * len(sources)
    start = time.perf_counter()
    processes = [
        subprocess.Popen(dd_command(s, "/dev/null"), stderr=subprocess.PIPE) for s in sources
    ]

    def wait(i: int) -> None:
        processes[i].wait()
        ends[i] = time.perf_counter()

    threads = [threading.Thread(target=wait, args=(i,)) for i in range(len(sources))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for p, s in zip(processes, sources):
        assert p.stderr is not None
        if p.returncode:
            raise BenchError(
                f"dd {s} failed (exit {p.returncode}): {p.stderr.read().decode().strip()}\n"
                f"  Last lines of the zarrfs log:\n{m.tail()}"
            )
        p.stderr.close()
    return [end - start for end in ends], max(ends) - start


def metered_dd(
    store: str | Path,
    work: Path,
    data: np.ndarray,
    what: str,
    server: int | None = None,
    options: tuple[str, ...] = (),
    read_done: Callable[[], None] | None = None,
) -> tuple[float, cpumeter.Usage]:
    """Seconds of ``dd bs=1M`` of arr/array.raw on a fresh mount of ``store`` (a path
    or URL; ``options``: the mount's), its first and last MiB checked after, and where
    the CPU went meanwhile (``server``: the process group of a server the store is
    read from). ``read_done`` is called as ``dd`` ends, before the check reads."""
    with mounted(store, *options, log_dir=work) as m:
        raw = m / "arr" / "array.raw"
        if not raw.is_file():
            raise BenchError(f"{what}: no arr/array.raw under the mount\n{m.tail()}")
        with profiled(m.process.pid, what):
            meter = cpumeter.Meter(pid=m.process.pid, pgid=server)
            meter.start()
            elapsed = dd(m, raw, "/dev/null")
            usage = meter.stop()
        if read_done is not None:
            read_done()
        check_file(raw, data, what)
    return elapsed, usage


def daemon_pid(m: Mounted) -> int:
    """The zarrfs daemon's pid: the mount root's user.zarrfs.pid, else our subprocess."""
    try:
        return int(os.getxattr(m.path, "user.zarrfs.pid"))
    except (OSError, ValueError):
        return m.process.pid


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set size (VmHWM) in MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise BenchError(f"no VmHWM in /proc/{pid}/status")
