"""The command line: one-line errors, detaching, ``zarrfs umount``, signals, read-only
unless ``--rw``, and what a detached mount tells its user (warnings, FUSE's reasons,
where its log is).

Every error case runs the real ``zarrfs`` entry point in a subprocess (so a traceback
or a stray line on stderr is seen exactly as a user would see it) and unmounts in a
``finally`` in case a broken check let the mount through.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import shutil
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import zarr

from tests.support import daemon_logs
from tests.support.cli import PID_XATTR, alive, assert_one_error_line, run_cli
from tests.support.http_server import HttpServer
from tests.support.mounting import mounted, unmount
from zarrfs.daemon import logs, runstate
from zarrfs.daemon.serve import READ_ONLY_HINT

FOO_BAR_FILES = [".zarray", ".zattrs", "array.hdr", "array.nhdr", "array.npy", "array.raw"]
FOO_BAR_FILES += ["array.tif", "info"]


@pytest.fixture
def mountpoint(tmp_path: Path) -> Path:
    path = tmp_path / "mnt"
    path.mkdir()
    return path


# -- bad input -----------------------------------------------------------------------------


def _missing_store(tmp: Path, example: Path, mnt: Path) -> tuple[list[str], str]:
    return [str(tmp / "nope.zarr"), str(mnt)], str(tmp / "nope.zarr")


def _store_is_a_file(tmp: Path, example: Path, mnt: Path) -> tuple[list[str], str]:
    (tmp / "file.zarr").write_bytes(b'{"zarr_format": 2}')
    return [str(tmp / "file.zarr"), str(mnt)], str(tmp / "file.zarr")


def _no_zarr_metadata(tmp: Path, example: Path, mnt: Path) -> tuple[list[str], str]:
    plain = tmp / "plain"
    (plain / "sub").mkdir(parents=True)
    (plain / "data.bin").write_bytes(b"\0" * 16)
    (plain / "sub" / ".zattrs").write_text("{}")
    return [str(plain), str(mnt)], str(plain)


def _mountpoint_missing(tmp: Path, example: Path, mnt: Path) -> tuple[list[str], str]:
    return [str(example), str(tmp / "no_such_dir")], str(tmp / "no_such_dir")


def _mountpoint_not_empty(tmp: Path, example: Path, mnt: Path) -> tuple[list[str], str]:
    (mnt / "somebody_elses_file").write_text("x")
    return [str(example), str(mnt)], str(mnt)


def _mountpoint_is_a_file(tmp: Path, example: Path, mnt: Path) -> tuple[list[str], str]:
    (tmp / "afile").write_text("x")
    return [str(example), str(tmp / "afile")], str(tmp / "afile")


def _bad_size(option: str, value: str) -> Callable[[Path, Path, Path], tuple[list[str], str]]:
    def case(tmp: Path, example: Path, mnt: Path) -> tuple[list[str], str]:
        return [option, value, str(example), str(mnt)], value

    return case


def _bad_log_level(tmp: Path, example: Path, mnt: Path) -> tuple[list[str], str]:
    return ["--log-level", "loud", str(example), str(mnt)], "loud"


def _bad_fuse_option(tmp: Path, example: Path, mnt: Path) -> tuple[list[str], str]:
    # No option libfuse knows: refused before mounting (tests/process/test_mount_options.py).
    return ["-o", "no_such_fuse_option", str(example), str(mnt)], "no_such_fuse_option"


BAD_MOUNTS = {
    "missing-store": _missing_store,
    "store-is-a-file": _store_is_a_file,
    "no-zarr-metadata": _no_zarr_metadata,
    "mountpoint-missing": _mountpoint_missing,
    "mountpoint-not-empty": _mountpoint_not_empty,
    "mountpoint-is-a-file": _mountpoint_is_a_file,
    "cache-size-word": _bad_size("--cache-size", "lots"),
    "cache-size-negative": _bad_size("--cache-size", "-5M"),
    "cache-size-unit": _bad_size("--cache-size", "12Q"),
    "readahead-word": _bad_size("--readahead", "fast"),
    "write-cache-size-negative": _bad_size("--write-cache-size", "-1"),
    "log-level": _bad_log_level,
    "fuse-option": _bad_fuse_option,
}


@pytest.mark.parametrize("case", BAD_MOUNTS.values(), ids=BAD_MOUNTS.keys())
def test_bad_mount_is_one_error_line(
    case: Callable[[Path, Path, Path], tuple[list[str], str]],
    tmp_path: Path,
    example_store: Path,
    mountpoint: Path,
) -> None:
    args, needle = case(tmp_path, example_store, mountpoint)
    try:
        result = run_cli("mount", *args)
        assert_one_error_line(result, needle)
        assert not os.path.ismount(args[-1])
    finally:
        unmount(args[-1])


def test_mount_on_a_mounted_mountpoint(example_store: Path, tmp_path: Path) -> None:
    with mounted(example_store, log_dir=tmp_path) as m:
        try:
            result = run_cli("mount", str(example_store), str(m.path))
            assert_one_error_line(result, str(m.path))
        finally:
            # the first mount must be untouched (a second one on top would shadow it)
            assert m.process.poll() is None
        assert sorted(os.listdir(m.path)) == [".zarrfs", ".zattrs", ".zgroup", "foo", "weather"]
        assert os.path.ismount(m.path)


def test_umount_not_mounted(tmp_path: Path, mountpoint: Path) -> None:
    assert_one_error_line(run_cli("umount", str(mountpoint)), str(mountpoint))
    assert_one_error_line(run_cli("umount", str(tmp_path / "missing")), str(tmp_path / "missing"))


def test_help_lists_the_options() -> None:
    result = run_cli("mount", "--help")
    assert result.returncode == 0, result.stderr
    for option in (
        "--foreground",
        "--read-only",
        "--rw",
        "--cache-size",
        "--write-cache-size",
        "--flush-interval",
        "--readahead",
        "--no-consolidated",
        "--log-level",
        "--log-file",
    ):
        assert option in result.stdout


# -- detaching and unmounting ------------------------------------------------------------


def test_detached_mount_then_umount(tmp_path: Path, example_store: Path, mountpoint: Path) -> None:
    log_file = tmp_path / "daemon.log"
    daemon_logs.watch(log_file)
    pid = None
    try:
        # capture_output: if the daemon kept the pipes open, this would time out
        result = run_cli("mount", "--log-file", str(log_file), str(example_store), str(mountpoint))
        assert result.returncode == 0, result.stderr
        assert (result.stdout, result.stderr) == ("", "")
        assert os.path.ismount(mountpoint), "ready as soon as the command returns"
        pid = int(os.getxattr(mountpoint, PID_XATTR))
        assert pid != os.getpid() and alive(pid)
        assert sorted(os.listdir(mountpoint)) == [".zarrfs", ".zattrs", ".zgroup", "foo", "weather"]
        expected = np.ascontiguousarray(zarr.open_array(str(example_store / "foo/bar"))[...])
        assert (mountpoint / "foo/bar/array.raw").read_bytes() == expected.tobytes()

        done = run_cli("umount", str(mountpoint))
        assert done.returncode == 0, done.stderr
        assert (done.stdout, done.stderr) == ("", "")
        assert not os.path.ismount(mountpoint)
        assert not alive(pid), "zarrfs umount returns only once the daemon has exited"
        assert "mounted" in log_file.read_text()
    finally:
        unmount(mountpoint)
        if pid is not None and alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_umount_of_foreground_mount_waits_for_the_daemon(
    example_store: Path, tmp_path: Path
) -> None:
    with mounted(example_store, log_dir=tmp_path) as m:
        assert int(os.getxattr(m.path, PID_XATTR)) == m.process.pid
        result = run_cli("umount", str(m.path))
        assert result.returncode == 0, result.stderr
        assert not os.path.ismount(m.path)
        assert m.process.poll() == 0, "the daemon had already exited when umount returned"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_unmounts_and_exits_0(example_store: Path, tmp_path: Path, signum: int) -> None:
    with mounted(example_store, log_dir=tmp_path) as m:
        assert (m / "foo/bar/.zarray").read_bytes()
        busy = open(m / "foo/bar/array.raw", "rb")  # noqa: SIM115 - closed after the daemon
        busy.read(16)
        m.process.send_signal(signum)
        assert m.process.wait(timeout=30) == 0, m.log()
        # The daemon is gone: close() cannot send its FUSE flush any more.
        with pytest.raises(OSError) as closing:
            busy.close()
        assert closing.value.errno == errno.ENOTCONN
        deadline = time.monotonic() + 10
        while os.path.ismount(m.path) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not os.path.ismount(m.path)


def test_fusermount_u_ends_the_daemon(example_store: Path, tmp_path: Path) -> None:
    with mounted(example_store, log_dir=tmp_path) as m:
        result = subprocess.run(["fusermount3", "-u", str(m.path)], capture_output=True, timeout=30)
        assert result.returncode == 0, result.stderr
        assert m.process.wait(timeout=30) == 0, m.log()


# -- writes are refused --------------------------------------------------------------------


def open_and_close(path: Path, mode: str) -> None:
    with open(path, mode):
        pass


def expect_erofs(action: Callable[[], object], what: str) -> None:
    with pytest.raises(OSError) as info:
        action()
    assert info.value.errno == errno.EROFS, f"{what}: {info.value!r}"


def test_writes_are_refused_with_erofs(example_store: Path, tmp_path: Path) -> None:
    before = (example_store / "foo/bar/0.0").read_bytes()
    with mounted(example_store, "--read-only", log_dir=tmp_path) as m:
        raw = m / "foo/bar/array.raw"
        size = os.stat(raw).st_size
        expect_erofs(lambda: open_and_close(raw, "r+b"), "open r+b")
        expect_erofs(lambda: open_and_close(raw, "wb"), "open wb")
        expect_erofs(lambda: open_and_close(raw, "ab"), "open ab")
        expect_erofs(lambda: os.open(raw, os.O_WRONLY), "O_WRONLY")
        expect_erofs(lambda: open_and_close(m / "foo/bar/.zarray", "r+b"), "metadata r+b")
        expect_erofs(lambda: open_and_close(m / "foo/new.raw", "wb"), "create")
        expect_erofs(lambda: os.truncate(raw, 0), "truncate")
        expect_erofs(lambda: os.chmod(raw, 0o644), "chmod")
        expect_erofs(lambda: os.mkdir(m / "foo/newgroup"), "mkdir")
        expect_erofs(lambda: os.rmdir(m / "foo/bar"), "rmdir")
        expect_erofs(lambda: os.unlink(raw), "unlink")
        expect_erofs(lambda: os.rename(raw, m / "foo/bar/renamed.raw"), "rename")
        expect_erofs(lambda: os.rename(m / "foo", m / "foo2"), "rename dir")
        expect_erofs(lambda: os.symlink("array.raw", m / "foo/bar/link"), "symlink")
        mode = os.stat(raw).st_mode
        assert stat.S_ISREG(mode) and not mode & 0o222
        assert os.stat(raw).st_size == size
        assert sorted(os.listdir(m / "foo/bar")) == FOO_BAR_FILES
        assert m.process.poll() is None
    assert (example_store / "foo/bar/0.0").read_bytes() == before
    assert READ_ONLY_HINT not in m.log(), "asked for read-only: no hint"


def test_read_write_mount_refuses_namespace_changes(example_store: Path, tmp_path: Path) -> None:
    """Without --read-only the arrays' bytes are writable, the tree's shape is not."""
    store = tmp_path / "rw.zarr"
    shutil.copytree(example_store, store)
    with mounted(store, log_dir=tmp_path) as m:
        raw = m / "foo/bar/array.raw"
        assert os.stat(raw).st_mode & 0o200
        assert not os.stat(m / "foo/bar/.zarray").st_mode & 0o222
        for what, action in [
            ("metadata r+b", lambda: open_and_close(m / "foo/bar/.zarray", "r+b")),
            ("create", lambda: open_and_close(m / "foo/new.raw", "wb")),
            ("mkdir", lambda: os.mkdir(m / "foo/newgroup")),
            ("rmdir", lambda: os.rmdir(m / "foo/bar")),
            ("unlink", lambda: os.unlink(raw)),
            ("rename", lambda: os.rename(raw, m / "foo/bar/renamed.raw")),
            ("symlink", lambda: os.symlink("array.raw", m / "foo/bar/link")),
        ]:
            with pytest.raises(OSError) as info:
                action()
            assert info.value.errno in (errno.EPERM, errno.EACCES), f"{what}: {info.value!r}"
        assert sorted(os.listdir(m / "foo/bar")) == FOO_BAR_FILES
        # A writing handle uses direct I/O, which the kernel maps shared all the same
        # (FUSE_DIRECT_IO_ALLOW_MMAP, asked for by the venv's libfuse).
        with open(raw, "r+b") as writable, mmap.mmap(writable.fileno(), 0) as mapped:
            assert len(mapped) == os.stat(raw).st_size
        size = os.stat(raw).st_size
        os.utime(raw, (0, 0))  # accepted and ignored, as on sshfs (cp -p, touch)
        os.chmod(raw, 0o600)
        assert os.stat(raw).st_size == size and os.stat(raw).st_mode & 0o444 == 0o444


# -- read-only unless --rw ---------------------------------------------------------------


def mount_options_of(path: Path) -> set[str]:
    """The per-mount options (ro, nosuid, ...) of the newest mount on ``path``."""
    found: set[str] = set()
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == str(path):
                found = set(fields[5].split(","))
    return found


def test_a_mount_without_rw_is_read_only_and_its_log_says_how_to_write(
    example_store: Path, tmp_path: Path, mountpoint: Path
) -> None:
    store = tmp_path / "s.zarr"
    shutil.copytree(example_store, store)
    before = (store / "foo/bar/0.0").read_bytes()
    log_file = tmp_path / "daemon.log"
    daemon_logs.watch(log_file)
    pid = None
    try:
        result = run_cli("mount", "--log-file", str(log_file), str(store), str(mountpoint))
        assert (result.returncode, result.stderr) == (0, "")
        pid = int(os.getxattr(mountpoint, PID_XATTR))
        assert "ro" in mount_options_of(mountpoint), "read-only for the kernel too"
        raw = mountpoint / "foo/bar/array.raw"
        for _ in range(3):
            expect_erofs(lambda: open_and_close(raw, "r+b"), "open r+b")
            expect_erofs(lambda: os.truncate(raw, 0), "truncate")
        assert not os.stat(raw).st_mode & 0o222
        text = log_file.read_text()
        assert text.count(READ_ONLY_HINT) == 1, f"one line per mount, not per write:\n{text}"
        assert "--rw" in READ_ONLY_HINT and "-o rw" in READ_ONLY_HINT
        done = run_cli("umount", str(mountpoint))
        assert done.returncode == 0, done.stderr
    finally:
        unmount(mountpoint)
        if pid is not None and alive(pid):
            os.kill(pid, signal.SIGKILL)  # the daemon this test started
    assert (store / "foo/bar/0.0").read_bytes() == before


def test_rw_mounts_read_write(example_store: Path, tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    shutil.copytree(example_store, store)
    with mounted(store, "--rw", log_dir=tmp_path) as m:
        assert "rw" in mount_options_of(m.path)
        with open(m / "foo/bar/array.raw", "r+b") as f:
            f.write(b"\0" * 4)
    assert READ_ONLY_HINT not in m.log()
    assert zarr.open_array(str(store / "foo/bar"))[0, 0] == 0


# -- what a detached mount tells its user --------------------------------------------------

FUSE_REFUSALS = {
    # the kernel refuses blksize on a FUSE mount that is no fuseblk: libfuse says why
    "libfuse": ("blksize=4096", "fuse: mount failed: Invalid argument"),
    # with auto_unmount too (libfuse 3.17 mounts as root itself, then starts
    # fusermount3 only to unmount)
    "auto_unmount": ("auto_unmount,blksize=4096", "fuse: mount failed: Invalid argument"),
}


@pytest.mark.parametrize("mode", ["detached", "foreground"])
@pytest.mark.parametrize(("options", "reason"), FUSE_REFUSALS.values(), ids=FUSE_REFUSALS.keys())
def test_fuses_own_reason_reaches_the_user(
    example_store: Path, mountpoint: Path, tmp_path: Path, mode: str, options: str, reason: str
) -> None:
    args = ["-f"] if mode == "foreground" else ["--log-file", str(tmp_path / "log")]
    daemon_logs.watch(tmp_path / "log")
    try:
        result = run_cli("mount", *args, "-o", options, str(example_store), str(mountpoint))
        assert_one_error_line(result, f"cannot mount on {str(mountpoint)!r}: {reason}")
        assert not os.path.ismount(mountpoint)
    finally:
        unmount(mountpoint)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_warnings_of_mounting_are_printed_before_detaching(
    http_server: HttpServer, tmp_path: Path, mountpoint: Path
) -> None:
    """An HTTP store is opened by the daemon itself (after the fork): what it warns
    of while mounting reaches the user all the same, as a local store's does."""
    group = zarr.open_group(str(http_server.root / "s.zarr"), mode="w")
    group.create_array("a", shape=(4,), chunks=(2,), dtype="<i4")
    daemon_logs.watch(tmp_path / "log")
    pid = None
    try:
        result = run_cli(
            "mount",
            "--log-file",
            str(tmp_path / "log"),
            f"{http_server.url}s.zarr",
            str(mountpoint),
        )
        assert result.returncode == 0, result.stderr
        pid = int(os.getxattr(mountpoint, PID_XATTR))
        [line] = result.stderr.splitlines()
        assert "WARNING" in line and "only the node at its root is shown" in line, line
        assert sorted(os.listdir(mountpoint)) == [".zarrfs", "zarr.json"]
    finally:
        unmount(mountpoint)
        if pid is not None and alive(pid):
            os.kill(pid, signal.SIGKILL)  # the daemon this test started


def test_a_detached_daemon_without_syslog_logs_to_its_run_directory(
    example_store: Path, mountpoint: Path
) -> None:
    pid = None
    log = None
    try:
        result = run_cli("mount", str(example_store), str(mountpoint))
        assert result.returncode == 0, result.stderr
        pid = int(os.getxattr(mountpoint, PID_XATTR))
        log = Path(runstate.run_dir()) / f"{pid}.log"
        no_syslog = logs._no_syslog(logs.SYSLOG_SOCKET)
        if no_syslog is None:  # syslog here: the log is there, and nothing is said
            assert (result.stderr, log.exists()) == ("", False)
        else:
            said = f"zarrfs: logging to {log} (no syslog at /dev/log: {no_syslog})"
            assert result.stderr.splitlines() == [said]
            assert "mounted" in log.read_text()
            assert stat.S_IMODE(os.stat(log.parent).st_mode) == 0o700
        done = run_cli("umount", str(mountpoint))
        assert done.returncode == 0, done.stderr
        if no_syslog is not None:
            assert "unmounted" in log.read_text(), "the log outlives the daemon"
    finally:
        unmount(mountpoint)
        if pid is not None and alive(pid):
            os.kill(pid, signal.SIGKILL)  # the daemon this test started
        if log is not None:
            log.unlink(missing_ok=True)


@pytest.fixture
def restored_logging() -> Iterator[logging.Logger]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield root
    finally:
        for handler in root.handlers:
            if handler not in handlers:
                handler.close()
        root.handlers[:] = handlers
        root.setLevel(level)


def _stale_socket(path: Path) -> Path:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))  # the file stays; nothing listens on it any more
    return path


@pytest.mark.parametrize(
    "address",
    [lambda tmp: tmp / "missing", lambda tmp: _stale_socket(tmp / "stale")],
    ids=["missing", "stale-socket"],
)
def test_without_syslog_the_log_is_a_file_in_the_run_directory(
    tmp_path: Path,
    address: Callable[[Path], Path],
    restored_logging: logging.Logger,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(logs, "SYSLOG_SOCKET", str(address(tmp_path)))
    log = Path(runstate.run_dir()) / f"{os.getpid()}.log"
    try:
        said = logs.setup_logging("info", None, detached=True)
        assert said is not None and said.startswith(f"zarrfs: logging to {log} (no syslog at")
        logging.getLogger("zarrfs.test").warning("kept")
        for handler in restored_logging.handlers:
            handler.flush()
        assert "WARNING zarrfs.test: kept" in log.read_text()
    finally:
        log.unlink(missing_ok=True)


def test_a_listening_syslog_is_used(
    tmp_path: Path, restored_logging: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as syslog:
        syslog.bind(str(tmp_path / "log"))
        monkeypatch.setattr(logs, "SYSLOG_SOCKET", str(tmp_path / "log"))
        assert logs.setup_logging("info", None, detached=True) is None
        logging.getLogger("zarrfs.test").warning("to syslog")
        syslog.settimeout(5)
        assert b"to syslog" in syslog.recv(4096)
