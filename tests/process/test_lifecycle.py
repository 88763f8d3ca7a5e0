"""Mount lifecycle across processes: the store lock, what ``zarrfs umount`` reports and
what it agrees to unmount, and mount points the daemon could not serve.

- One read-write mount per store: a second is refused with one line, by whatever path
  it names the store; read-only mounts stay allowed; the lock dies with the daemon.
- ``zarrfs umount`` exits non-zero with one line saying what was not stored (full
  store, dropped partial rows, a killed daemon), and 0 with no file left otherwise.
- ``zarrfs umount`` acts only on a zarrfs mount, whatever extended attributes say.
- A mount point inside the store (or the store inside it) is refused before mounting.

Every daemon started here is ended by its PID; every mount is removed in a ``finally``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import zarr

from tests.support import daemon_logs
from tests.support.cli import PID_XATTR, alive, assert_one_error_line, run_cli
from tests.support.mountinfo import mount_entry
from tests.support.mounting import unmount, wait_for_mount, zarrfs_command
from tests.support.tmpfs import CHUNK_BYTES, full_store, random_data, tiny_tmpfs
from zarrfs.daemon import runstate

NO_FLUSH = ("--flush-interval", "3600")  # nothing stored before close or unmount
STORE_FILES = [".zarrfs", ".zattrs", ".zgroup", "foo", "weather"]  # .zarrfs: the control dir


def remove_mount(path: Path) -> None:
    """Whatever is mounted on ``path`` (live, dead or deadlocked) goes: a FUSE
    connection is aborted first, so nothing waits on its daemon."""
    for _ in range(5):
        entry = mount_entry(path)
        if entry is None:
            return
        device, fstype = entry
        if fstype.startswith("fuse"):
            abort = Path(f"/sys/fs/fuse/connections/{device.split(':')[1]}/abort")
            with contextlib.suppress(OSError):
                abort.write_text("1")
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)
    raise AssertionError(f"{path} is still mounted")


def wait_until_gone(pid: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while alive(pid):
        assert time.monotonic() < deadline, f"daemon {pid} still running after {timeout}s"
        time.sleep(0.02)


@dataclasses.dataclass
class Daemon:
    pid: int
    process: subprocess.Popen | None  # the ``zarrfs mount -f``; None when detached
    log: Path


@contextmanager
def daemon(
    store: Path, mountpoint: Path, *options: str, log: Path, mode: str = "detached"
) -> Iterator[Daemon]:
    """A read-write mount, or a read-only one if ``options`` ask for it; always
    unmounted, and the daemon (started by this test) killed by its PID if it outlives
    the unmount."""
    process = None
    daemon_logs.watch(log)
    if "--read-only" not in options:
        options = ("--rw", *options)
    if mode == "detached":
        result = run_cli("mount", "--log-file", str(log), *options, str(store), str(mountpoint))
        assert result.returncode == 0, result.stderr
        pid = int(os.getxattr(mountpoint, PID_XATTR))
    else:
        with open(log, "w") as out:
            process = subprocess.Popen(
                zarrfs_command("mount", "-f", *options, str(store), str(mountpoint)),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        pid = process.pid
    try:
        if process is not None:
            wait_for_mount(mountpoint, process, log)
        yield Daemon(pid, process, log)
    finally:
        if alive(pid) and mount_entry(mountpoint) is not None:
            unmount(mountpoint)
        deadline = time.monotonic() + 30
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
        if process is not None:
            process.wait()
        wait_until_gone(pid)
        remove_mount(mountpoint)
        status_file(pid).unlink(missing_ok=True)  # left by a daemon a test killed


def status_file(pid: int) -> Path:
    return Path(runstate.run_dir()) / f"{pid}.status"


@pytest.fixture
def store(tmp_path: Path, example_store: Path) -> Path:
    """A private copy: the lock is per store, and other tests mount the example."""
    copy = tmp_path / "s.zarr"
    shutil.copytree(example_store, copy)
    return copy


def mountpoints(tmp_path: Path, *names: str) -> list[Path]:
    paths = [tmp_path / name for name in names]
    for path in paths:
        path.mkdir()
    return paths


# -- one read-write mount per store ------------------------------------------------------


def test_second_read_write_mount_is_refused(store: Path, tmp_path: Path) -> None:
    """The detached daemon holds the lock after its parent has exited; a second
    read-write mount is refused by any path to the store, a read-only one is not."""
    m1, m2, m3 = mountpoints(tmp_path, "m1", "m2", "m3")
    (tmp_path / "link.zarr").symlink_to(store)
    try:
        with daemon(store, m1, log=tmp_path / "m1.log") as first:
            for named in (str(store), str(tmp_path / "link.zarr"), "s.zarr", "./s.zarr/"):
                for foreground in ((), ("-f",)):
                    result = subprocess.run(
                        zarrfs_command("mount", *foreground, "--rw", named, str(m2)),
                        cwd=tmp_path,
                        stdin=subprocess.DEVNULL,
                        capture_output=True,
                        text=True,
                        timeout=30,
                        check=False,
                    )
                    line = assert_one_error_line(result, repr(named), "already mounted read-write")
                    assert f"process {first.pid}" in line, f"the holder is named: {line}"
                    assert mount_entry(m2) is None, named

            with daemon(store, m2, "--read-only", log=tmp_path / "m2.log"):
                assert sorted(os.listdir(m2)) == STORE_FILES
            with daemon(store, m3, "--read-only", log=tmp_path / "m3.log", mode="foreground"):
                assert sorted(os.listdir(m3)) == STORE_FILES
            # without --rw a mount is read-only, and takes no lock either
            plain = run_cli("mount", "--log-file", str(tmp_path / "m3.log"), str(store), str(m3))
            assert plain.returncode == 0, plain.stderr
            assert sorted(os.listdir(m3)) == STORE_FILES
            assert run_cli("umount", str(m3)).returncode == 0
            assert sorted(os.listdir(m1)) == STORE_FILES, "the first mount is untouched"

            done = run_cli("umount", str(m1))
            assert (done.returncode, done.stderr) == (0, "")
            assert not alive(first.pid)
        # released with the daemon: a new read-write mount succeeds at once
        with daemon(store, m2, log=tmp_path / "m2.log"):
            assert sorted(os.listdir(m2)) == STORE_FILES
    finally:
        for path in (m1, m2, m3):
            remove_mount(path)


def test_foreground_mount_holds_the_lock(store: Path, tmp_path: Path) -> None:
    m1, m2 = mountpoints(tmp_path, "m1", "m2")
    try:
        with daemon(store, m1, log=tmp_path / "m1.log", mode="foreground") as first:
            result = run_cli("mount", "--rw", str(store), str(m2))
            line = assert_one_error_line(result, repr(str(store)), "already mounted read-write")
            assert f"process {first.pid}" in line, line
            assert mount_entry(m2) is None
    finally:
        remove_mount(m2)


@pytest.mark.parametrize("mode", ["detached", "foreground"])
def test_lock_is_released_when_the_daemon_is_killed(store: Path, tmp_path: Path, mode: str) -> None:
    m1, m2 = mountpoints(tmp_path, "m1", "m2")
    try:
        with daemon(store, m1, log=tmp_path / "m1.log", mode=mode) as first:
            assert_one_error_line(run_cli("mount", "--rw", str(store), str(m2)), "already mounted")
            os.kill(first.pid, signal.SIGKILL)  # the daemon this test started
            if first.process is not None:
                first.process.wait(timeout=30)
            wait_until_gone(first.pid)
            subprocess.run(["fusermount3", "-u", "-z", str(m1)], capture_output=True, check=False)
            with daemon(store, m2, log=tmp_path / "m2.log"):
                assert sorted(os.listdir(m2)) == STORE_FILES
    finally:
        remove_mount(m2)


# -- zarrfs umount says what was not stored -------------------------------------------------


@pytest.mark.parametrize("mode", ["detached", "foreground"])
def test_umount_reports_chunks_not_stored_on_a_full_disk(tmp_path: Path, mode: str) -> None:
    data = random_data()
    (mountpoint,) = mountpoints(tmp_path, "mnt")
    with (
        full_store(tmp_path) as (store, _filler),
        daemon(store, mountpoint, *NO_FLUSH, log=tmp_path / "log", mode=mode) as d,
    ):
        fd = os.open(mountpoint / "array.raw", os.O_WRONLY)
        try:
            assert os.pwrite(fd, data, 0) == len(data)
        finally:
            with pytest.raises(OSError) as closing:  # close stores, and cannot
                os.close(fd)  # (the descriptor is released even so)
        assert closing.value.errno == errno.ENOSPC

        result = run_cli("umount", str(mountpoint), timeout=60)
        line = assert_one_error_line(
            result,
            f"{mountpoint}: {len(data) // CHUNK_BYTES} chunks ({len(data) // 1024} KiB) "
            "of 1 array were not stored: No space left on device",
        )
        assert mount_entry(mountpoint) is None
        assert not alive(d.pid), "umount returns once the daemon has exited"
        assert not status_file(d.pid).exists(), "umount removes what it has read"
        if d.process is not None:  # and zarrfs mount -f says the same
            assert d.process.wait(timeout=30) == 1
            assert d.log.read_text().strip().splitlines()[-1] == line, d.log.read_text()


def test_umount_reports_a_dropped_partial_row(tmp_path: Path) -> None:
    store = tmp_path / "a.zarr"
    zarr.open_group(str(store), mode="w", zarr_format=2)
    zarr.create_array(
        store=str(store / "t"), shape=(4, 100), chunks=(2, 100), dtype="u1", zarr_format=2
    )
    (mountpoint,) = mountpoints(tmp_path, "mnt")
    with daemon(store, mountpoint, log=tmp_path / "log") as d:
        fd = os.open(mountpoint / "t" / "array.raw", os.O_WRONLY | os.O_APPEND)
        assert os.write(fd, b"\x07" * 105) == 105  # one row and 5 bytes of the next
        with pytest.raises(OSError) as closing:
            os.close(fd)  # released even so
        assert closing.value.errno == errno.EINVAL, "a partial row is pending"
        result = run_cli("umount", str(mountpoint))
        assert_one_error_line(
            result, f"{mountpoint}: 5 bytes of an incomplete row of 1 array (t) were dropped"
        )
        assert not alive(d.pid) and not status_file(d.pid).exists()
    assert zarr.open_array(str(store / "t"), mode="r").shape == (5, 100)


def test_a_partial_row_appended_by_a_shell_is_logged_at_close(tmp_path: Path) -> None:
    """``printf 'ab' >> array.raw``: the shell closes the file through dup2, which
    drops close's EINVAL, so the log says at once which array holds a partial row."""
    store = tmp_path / "a.zarr"
    zarr.open_group(str(store), mode="w", zarr_format=2)
    zarr.create_array(
        store=str(store / "t"), shape=(4, 100), chunks=(2, 100), dtype="u1", zarr_format=2
    )
    (mountpoint,) = mountpoints(tmp_path, "mnt")
    log = tmp_path / "log"
    with daemon(store, mountpoint, log=log):
        shell = subprocess.run(
            ["bash", "-c", f"printf 'ab' >> '{mountpoint}/t/array.raw'"], check=False
        )
        assert shell.returncode == 0  # bash never sees close's error
        lines = [line for line in log.read_text().splitlines() if "pending after close" in line]
        assert len(lines) == 1 and "t: 2 bytes of an incomplete row" in lines[0], lines
        run_cli("umount", str(mountpoint))


def test_normal_umount_exits_0_and_leaves_no_file(store: Path, tmp_path: Path) -> None:
    (mountpoint,) = mountpoints(tmp_path, "mnt")
    before = zarr.open_array(str(store / "foo/bar"))[...]
    data = np.full(before.shape, 3, before.dtype)
    with daemon(store, mountpoint, *NO_FLUSH, log=tmp_path / "log") as d:
        assert status_file(d.pid).exists(), "a running daemon has its run-state file"
        fd = os.open(mountpoint / "foo/bar/array.raw", os.O_WRONLY)
        try:
            os.pwrite(fd, data.tobytes(), 0)
        finally:
            os.close(fd)
        result = run_cli("umount", str(mountpoint))
        assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
        assert not alive(d.pid)
        assert not status_file(d.pid).exists()
    assert (zarr.open_array(str(store / "foo/bar"))[...] == data).all()


def test_umount_of_a_killed_daemon_says_so(store: Path, tmp_path: Path) -> None:
    (mountpoint,) = mountpoints(tmp_path, "mnt")
    with daemon(store, mountpoint, log=tmp_path / "log") as d:
        os.kill(d.pid, signal.SIGKILL)  # the daemon this test started
        wait_until_gone(d.pid)
        result = run_cli("umount", str(mountpoint))
        assert_one_error_line(result, str(mountpoint), f"process {d.pid}", "killed or crashed")
        assert mount_entry(mountpoint) is None
        assert not status_file(d.pid).exists()


def test_a_running_record_that_outlives_its_daemon_means_it_died(tmp_path: Path) -> None:
    """What ``zarrfs umount`` reads once the daemon's pid has gone (the daemon dying
    while umount waits cannot be timed from here): a ``running`` record left behind
    means it was killed; none means a clean end. The record is read once."""
    state = runstate.RunState.begin(str(tmp_path), str(tmp_path), None)
    pid = os.getpid()
    try:
        record = runstate.collect(pid, os.geteuid())
        assert record is not None and record["state"] == "running"
        assert "killed or crashed" in (runstate.explain(record, pid) or "")
        assert not Path(state.path).exists(), "read once, then removed"
        assert runstate.explain(runstate.collect(pid, os.geteuid()), pid) is None
    finally:
        state.succeeded()


def test_the_log_of_an_ended_daemon_is_swept_a_week_after_its_last_line(tmp_path: Path) -> None:
    """A daemon without syslog logs to <pid>.log in the run directory; the next daemon
    to start removes the logs of ended daemons not written for a week, no other."""
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    running = os.getpid()
    week_ago = time.time() - runstate.LOG_KEPT - 60
    files = {
        "old-ended": tmp_path / f"{ended.pid}.log",
        "old-running": tmp_path / f"{running}.log",
        "new-ended": tmp_path / f"{ended.pid + 1}.log",
        "not-a-log": tmp_path / "notes.log",
    }
    for name, path in files.items():
        path.write_text(name)
        if name != "new-ended":
            os.utime(path, (week_ago, week_ago))
    runstate._sweep(str(tmp_path))
    assert sorted(p.read_text() for p in tmp_path.iterdir()) == [
        "new-ended",
        "not-a-log",
        "old-running",
    ]


@pytest.mark.parametrize(
    ("unstored", "line"),
    [
        (
            runstate.Unstored(chunks=3, nbytes=3 << 16, arrays=1, error="No space left on device"),
            "3 chunks (192 KiB) of 1 array were not stored: No space left on device",
        ),
        (
            runstate.Unstored(chunks=1, nbytes=1536 << 10, arrays=2, error="Permission denied"),
            "1 chunk (1.5 MiB) of 2 arrays was not stored: Permission denied",
        ),
        (
            runstate.Unstored(arrays=1, error="Input/output error"),
            "the metadata of 1 array was not stored: Input/output error",
        ),
        (
            runstate.Unstored(
                chunks=2, nbytes=100, arrays=1, error="x", tail_bytes=7, tail_arrays=2
            ),
            "2 chunks (100 bytes) of 1 array were not stored: x; "
            "7 bytes of incomplete rows of 2 arrays were dropped",
        ),
        (
            runstate.Unstored(tail_bytes=9, tail_arrays=4, tail_names=["a", "b/c", "d"]),
            "9 bytes of incomplete rows of 4 arrays (a, b/c, d and 1 more) were dropped",
        ),
        (
            runstate.Unstored(tail_bytes=1, tail_arrays=1),
            "1 byte of an incomplete row of 1 array was dropped",
        ),
    ],
)
def test_what_was_not_stored_is_one_phrase(unstored: runstate.Unstored, line: str) -> None:
    assert unstored.describe() == line


# -- zarrfs umount acts only on zarrfs mounts ------------------------------------------------


def test_umount_refuses_a_tmpfs_with_a_forged_pid(tmp_path: Path) -> None:
    # a pid zarrfs umount must not wait on
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with tiny_tmpfs(tmp_path / "tmpfs") as fake:
            (fake / "mine").write_text("still here")
            os.setxattr(fake, PID_XATTR, str(bystander.pid).encode())
            started = time.monotonic()
            result = run_cli("umount", "--timeout", "10", str(fake))
            assert_one_error_line(result, str(fake), "not a zarrfs mount")
            assert time.monotonic() - started < 10, "it waited on the forged pid"
            assert os.path.ismount(fake), "the tmpfs was unmounted"
            assert (fake / "mine").read_text() == "still here"
            assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


MOUNTINFO = (
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
    "40 22 0:41 / /mnt/my\\040data rw,nosuid shared:5 master:2 - fuse.zarrfs zarrfs rw\n"
    "41 22 0:45 / /mnt/z rw - fuse.zarrfs zarrfs rw,user_id=0\n"
    "42 22 0:47 / /mnt/z rw - tmpfs tmpfs rw\n"
    "43 22 0:48 /sub /mnt/bind rw - ext4 /dev/sda1 rw\n"
    "44 22 0:49 / /mnt/t rw - fuse.sshfs host:/x\\040y rw\n"
    "garbage line\n"
    "45 22 0:50 / /mnt/nosep rw fuse.zarrfs zarrfs rw\n"
)


@pytest.mark.parametrize(
    ("mountpoint", "expected"),
    [
        ("/", ("8:1", "/", "ext4", "/dev/sda1")),
        ("/mnt/my data", ("0:41", "/mnt/my data", "fuse.zarrfs", "zarrfs")),
        ("/mnt/z", ("0:47", "/mnt/z", "tmpfs", "tmpfs")),  # mounted over: newest
        ("/mnt/bind", ("0:48", "/mnt/bind", "ext4", "/dev/sda1")),
        ("/mnt/t", ("0:49", "/mnt/t", "fuse.sshfs", "host:/x y")),
        ("/mnt/nosep", None),  # no "-" separator: not a line to trust
        ("/mnt/other", None),
        ("/mnt/my\\040data", None),
    ],
)
def test_find_mount(mountpoint: str, expected: tuple[str, str, str, str] | None) -> None:
    from zarrfs.daemon.mountinfo import find_mount, mount_device

    entry = find_mount(mountpoint, MOUNTINFO)
    assert (dataclasses.astuple(entry) if entry is not None else None) == expected
    assert mount_device(mountpoint, MOUNTINFO) == (expected[0] if expected else None)


def test_parse_mountinfo_skips_malformed_lines() -> None:
    from zarrfs.daemon.mountinfo import parse_mountinfo

    assert len(parse_mountinfo(MOUNTINFO)) == 6
    assert parse_mountinfo("") == []


# -- a mount point inside the store --------------------------------------------------------


NESTED = {
    "mountpoint-inside": ("s.zarr", "s.zarr/view", "is inside the store"),
    "mountpoint-inside-via-link": ("link.zarr", "s.zarr/view", "is inside the store"),
    "mountpoint-inside-relative": ("./s.zarr/", "s.zarr/sub/../view", "is inside the store"),
    "mountpoint-is-the-store": ("s.zarr", "s.zarr", "is the store"),
    "store-inside-mountpoint": ("s.zarr", ".", "is inside the mountpoint"),
}


@pytest.mark.parametrize(("store_arg", "mount_arg", "says"), NESTED.values(), ids=NESTED.keys())
def test_mountpoint_inside_the_store_is_refused(
    store: Path, tmp_path: Path, store_arg: str, mount_arg: str, says: str
) -> None:
    """Without .zmetadata the daemon walks the store, and so its own mount, at once."""
    (store / "view").mkdir()
    (store / "sub").mkdir()
    (tmp_path / "link.zarr").symlink_to(store)
    mountpoint = (tmp_path / mount_arg).resolve()
    log = tmp_path / "log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            zarrfs_command("mount", "-f", store_arg, mount_arg),
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=out,
        )
    try:
        deadline = time.monotonic() + 20
        while process.poll() is None:
            assert mount_entry(mountpoint) is None, "mounted inside its own store"
            assert time.monotonic() < deadline, "zarrfs mount neither refused nor mounted"
            time.sleep(0.02)
        result = subprocess.CompletedProcess(process.args, process.returncode, "", log.read_text())
        assert_one_error_line(result, repr(mount_arg), says)
        assert mount_entry(mountpoint) is None
    finally:
        remove_mount(mountpoint)  # aborts the connection of a deadlocked daemon first
        if process.poll() is None:
            process.kill()  # the process this test started
        process.wait()


def test_the_daemon_collects_garbage_rarely_and_never_scans_its_startup_objects() -> None:
    # In a fresh interpreter: tune_gc changes the process's collector for good.
    code = (
        "import gc\n"
        "from zarrfs.daemon.tuning import GC_YOUNG_THRESHOLD, tune_gc\n"
        "assert gc.get_freeze_count() == 0 and gc.get_threshold()[0] < GC_YOUNG_THRESHOLD\n"
        "tune_gc()\n"
        "assert gc.get_freeze_count() > 1000, gc.get_freeze_count()\n"
        "assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
