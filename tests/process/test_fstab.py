"""fstab and mount(8): ``mount -t fuse.zarrfs`` and ``mount -a -T FSTAB`` run zarrfs as
a mount helper (mount(8) → mount.fuse3 → /bin/sh → ``zarrfs STORE MNT -o OPTIONS``).

The pure part (what an ``-o`` list means) is table-driven. The rest runs the real
mount(8) as root on temporary fstab files (never /etc/fstab), with a PATH lacking
/usr/local/bin: mount(8) removes PATH for its helpers anyway, and the shell's default
one finds the link install.sh makes (and runs this checkout's code: tests/support/mounting.py
sets PYTHONPATH, which mount(8) passes on). The daemon mount(8) starts detaches; this test
process makes itself a child subreaper (prctl) so that the orphaned daemon becomes
its child and its exit status can be read. Every mount is unmounted in a ``finally``
and a daemon that outlives it is killed by its PID, after checking its command line
names our mount point.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import numpy as np
import pytest
import zarr

from tests.support import daemon_logs
from tests.support.cli import alive
from tests.support.mountinfo import entries
from tests.support.mounting import zarrfs_command
from tests.support.paths import REPO
from zarrfs.commands import mountopts
from zarrfs.commands.cli import cli
from zarrfs.daemon import runstate

PID_XATTR = "user.zarrfs.pid"
MINIMAL_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"  # no /usr/local/bin, as cron or a unit may have
PR_SET_CHILD_SUBREAPER = 36
EXAMPLE_ENTRIES = [".zattrs", ".zgroup", "foo", "weather"]

# -- what -o means (pure) ----------------------------------------------------------------

OWN = mountopts.own_options(cli.commands["mount"])

TRANSLATE = [
    # (-o list, command-line arguments, FUSE options, dropped)
    ("ro", ["--read-only"], [], []),
    ("rw", ["--rw"], [], []),
    ("ro,rw", ["--rw"], [], []),
    ("rw,ro", ["--read-only"], [], []),
    ("read_only", ["--read-only"], [], []),
    ("cache_size=1G", ["--cache-size", "1G"], [], []),
    ("write_cache_size=64M", ["--write-cache-size", "64M"], [], []),
    ("flush_interval=2.5", ["--flush-interval", "2.5"], [], []),
    ("readahead=0", ["--readahead", "0"], [], []),
    ("no_consolidated", ["--no-consolidated"], [], []),
    ("anonymous", ["--anonymous"], [], []),
    (
        "disk_cache=/var/cache/z,disk_cache_size=10G",
        ["--disk-cache", "/var/cache/z", "--disk-cache-size", "10G"],
        [],
        [],
    ),
    ("log_level=debug", ["--log-level", "debug"], [], []),
    ("log_file=/var/log/z=1.log", ["--log-file", "/var/log/z=1.log"], [], []),
    ("allow_other,default_permissions", [], ["allow_other", "default_permissions"], []),
    ("max_read=131072,fsname=x", [], ["max_read=131072", "fsname=x"], []),
    ("nosuid,nodev,noexec,noatime", [], ["nosuid", "nodev", "noexec", "noatime"], []),
    ("dev,suid,exec,sync,dirsync", [], ["dev", "suid", "exec", "sync", "dirsync"], []),
    ("_netdev,nofail,defaults", [], [], ["_netdev", "nofail", "defaults"]),
    ("auto,noauto", [], [], ["auto", "noauto"]),
    ("user,users,nouser,owner,group", [], [], ["user", "users", "nouser", "owner", "group"]),
    ("relatime,atime,strictatime", [], [], ["relatime", "atime", "strictatime"]),
    ("lazytime,iversion,mand", [], [], ["lazytime", "iversion", "mand"]),
    ("x-systemd.automount", [], [], ["x-systemd.automount"]),
    ("x-systemd.requires=a.service", [], [], ["x-systemd.requires=a.service"]),
    ("comment=zarrfs,user=alice", [], [], ["comment=zarrfs", "user=alice"]),
    ("X-mount.mkdir,uhelper=udisks2", [], [], ["X-mount.mkdir", "uhelper=udisks2"]),
    ("", [], [], []),
    (
        "rw,_netdev,cache_size=256M,allow_other,nosuid,x-gvfs-show",
        ["--rw", "--cache-size", "256M"],
        ["allow_other", "nosuid"],
        ["_netdev", "x-gvfs-show"],
    ),
]  # fmt: skip


@pytest.mark.parametrize(("options", "args", "fuse", "ignored"), TRANSLATE)
def test_what_an_option_list_means(
    options: str, args: list[str], fuse: list[str], ignored: list[str]
) -> None:
    translated = mountopts.translate(options.split(","), OWN)
    assert (translated.args, translated.fuse, translated.ignored) == (args, fuse, ignored)


WRONG = [
    ("cache_size", "needs a value"),
    ("cache_size=", "needs a value"),
    ("ro=1", "takes no value"),
    ("anonymous=yes", "takes no value"),
    ("foreground", "is not accepted"),
    ("foreground=1", "is not accepted"),
]


@pytest.mark.parametrize(("option", "says"), WRONG)
def test_an_own_option_used_wrongly_is_a_usage_error(option: str, says: str) -> None:
    with pytest.raises(mountopts.MountOptionError, match=says):
        mountopts.translate([option], OWN)


COMMAND_LINES = [
    # mount.fuse3's form: mount, the store as the mount's source
    (
        ["/data/x.zarr", "/mnt/z", "-o", "ro,_netdev,dev,suid"],
        ["mount", "/data/x.zarr", "/mnt/z", "--read-only", "-o", "dev,suid",
         "-o", "fsname=/data/x.zarr"],
    ),
    (
        ["s3://b/p", "/mnt/z", "-o", "anonymous,fsname=mine"],
        ["mount", "s3://b/p", "/mnt/z", "--anonymous", "-o", "fsname=mine"],
    ),
    (["d", "/m"], ["mount", "d", "/m", "-o", "fsname=d"]),
    (["/a b,c\\d", "/m"], ["mount", "/a b,c\\d", "/m", "-o", "fsname=/a\\040b\\054c\\134d"]),
    (["/dät", "/m"], ["mount", "/dät", "/m", "-o", "fsname=/d\\303\\244t"]),
    # zarrfs mount: -o lists translated in place, everything else as given
    (["mount", "-o", "ro", "s", "m"], ["mount", "--read-only", "s", "m"]),
    (["mount", "s", "m", "-oro,allow_other"],
     ["mount", "s", "m", "--read-only", "-o", "allow_other"]),
    (["mount", "-fo", "noatime", "s", "m"], ["mount", "-f", "-o", "noatime", "s", "m"]),
    (["mount", "--log-file", "-o", "s", "m"], ["mount", "--log-file", "-o", "s", "m"]),
    (["mount", "--cache-size=1G", "s", "m", "-o", "cache_size=2G"],
     ["mount", "--cache-size=1G", "s", "m", "--cache-size", "2G"]),
    (["mount", "s", "--", "-o"], ["mount", "s", "--", "-o"]),
    # other commands, and what click itself answers
    (["umount", "/m"], ["umount", "/m"]),
    (["check", "-o", "ro"], ["check", "-o", "ro"]),
    (["tree", "s"], ["tree", "s"]),
    (["--help"], ["--help"]),
    ([], []),
]  # fmt: skip


@pytest.mark.parametrize(("args", "expected"), COMMAND_LINES)
def test_command_lines(args: list[str], expected: list[str]) -> None:
    assert mountopts.command_line(args, cli) == expected


def test_every_option_of_zarrfs_mount_is_a_mount_option() -> None:
    """-o names every option of zarrfs mount (but foreground), so a new option is
    usable in fstab at once, and the documentation lists them all."""
    options = [p for p in cli.commands["mount"].params if isinstance(p, click.Option)]
    names = {opt[2:].replace("-", "_") for p in options for opt in p.opts if opt[:2] == "--"}
    assert set(OWN) == names - {"help"} | {"ro"}
    semantics = (REPO / "docs" / "semantics.md").read_text()
    for name in [*OWN, *mountopts.GENERIC, *mountopts.GENERIC_PREFIXES, "rw"]:
        assert f"`{name}" in semantics, f"docs/semantics.md does not list -o {name}"


# -- real mounts -----------------------------------------------------------------------------


def run(*command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        env={**os.environ, "PATH": MINIMAL_PATH},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def listing(path: Path) -> list[str]:
    """The entries of a directory of the mount, but the mount root's control files
    (.zarrfs/), which are not the store's."""
    return sorted(name for name in os.listdir(path) if name != ".zarrfs")


@pytest.fixture
def reaper() -> Iterator[None]:
    """This process adopts the daemons mount(8) starts while the test runs (they
    detach, and would go to init): their exit status is then ours to read."""
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0, os.strerror(ctypes.get_errno())
    try:
        yield
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


@dataclass
class Daemon:
    pid: int
    mountpoint: Path
    code: int | None = None  # its exit status, once reaped

    def ours(self) -> bool:
        """Still the daemon we started: its command line names our mount point."""
        try:
            with open(f"/proc/{self.pid}/cmdline", "rb") as f:
                return str(self.mountpoint).encode() in f.read().split(b"\0")
        except OSError:
            return False

    def wait(self, timeout: float = 30) -> int | None:
        """Its exit status (None if it was not adopted by this process and is gone);
        raises if it is still running after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while self.code is None:
            try:
                done, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                if not (alive(self.pid) and self.ours()):
                    return None
            else:
                if done:
                    self.code = os.waitstatus_to_exitcode(status)
                    break
            assert time.monotonic() < deadline, f"daemon {self.pid} still running"
            time.sleep(0.02)
        return self.code


def _remove(mountpoint: Path) -> None:
    if entries(mountpoint) and run("umount", str(mountpoint)).returncode and entries(mountpoint):
        run("umount", "-l", str(mountpoint))


@contextlib.contextmanager
def mounted_with(command: list[str], mountpoint: Path) -> Iterator[Daemon]:
    """Run ``command`` (mount(8) in some form), expect ``mountpoint`` mounted by a
    zarrfs daemon; always unmount it and end the daemon."""
    result = run(*command)
    daemon = None
    try:
        assert result.returncode == 0, f"{command}:\n{result.stdout}{result.stderr}"
        assert [e.fstype for e in entries(mountpoint)] == ["fuse.zarrfs"]
        daemon = Daemon(int(os.getxattr(mountpoint, PID_XATTR)), mountpoint)
        assert daemon.ours(), "the pid the mount gives is not a daemon of this mount point"
        yield daemon
    finally:
        _remove(mountpoint)
        if daemon is not None:
            try:
                daemon.wait()
            except AssertionError:
                if daemon.ours():
                    os.kill(daemon.pid, signal.SIGKILL)
                daemon.wait()
            runstate.collect(daemon.pid, os.getuid())  # a killed daemon's file
            # its log, where there is no syslog and the line named no log_file
            (Path(runstate.run_dir()) / f"{daemon.pid}.log").unlink(missing_ok=True)


@pytest.fixture
def store(tmp_path: Path, example_store: Path) -> Path:
    copy = tmp_path / "store.zarr"
    shutil.copytree(example_store, copy)
    return copy


@pytest.fixture
def mnt(tmp_path: Path) -> Path:
    path = tmp_path / "mnt"
    path.mkdir()
    return path


def write_fstab(tmp_path: Path, *lines: str) -> Path:
    fstab = tmp_path / "fstab"
    fstab.write_text("# zarrfs test: never /etc/fstab\n" + "\n".join(lines) + "\n")
    return fstab


def expected_bar(store: Path) -> np.ndarray:
    return np.ascontiguousarray(zarr.open_array(str(store / "foo/bar"), mode="r")[...])


def test_mount_t_mounts_read_only_and_umount_ends_the_daemon(
    reaper: None, store: Path, mnt: Path, tmp_path: Path
) -> None:
    log = tmp_path / "daemon.log"
    daemon_logs.watch(log)
    command = ["mount", "-t", "fuse.zarrfs", str(store), str(mnt), "-o", f"ro,log_file={log}"]
    with mounted_with(command, mnt) as daemon:
        # mount.fuse3 found zarrfs through the link, with mount(8)'s PATH-less helpers
        with open(f"/proc/{daemon.pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        assert argv[1] == b"/usr/local/bin/zarrfs", argv
        [entry] = entries(mnt)
        assert "ro" in entry.options
        assert entry.source == str(store), "the store is the mount's source"
        assert listing(mnt) == EXAMPLE_ENTRIES
        assert (mnt / "foo/bar/array.raw").read_bytes() == expected_bar(store).tobytes()
        with pytest.raises(OSError) as refused:
            open(mnt / "foo/bar/array.raw", "r+b").close()
        assert refused.value.errno == errno.EROFS

        result = run("umount", str(mnt))
        assert result.returncode == 0, result.stderr
        assert not entries(mnt)
        assert daemon.wait() == 0, log.read_text()
    assert not (Path(runstate.run_dir()) / f"{daemon.pid}.status").exists(), "a clean exit"
    text = log.read_text()
    assert "mounted" in text and "unmounted" in text


@pytest.mark.parametrize("name", ["store.zarr", "a store, ünïcode.zarr"], ids=["plain", "odd"])
def test_an_fstab_line_mounts_with_mount_a_once(
    reaper: None, store: Path, mnt: Path, tmp_path: Path, name: str
) -> None:
    store = store.rename(store.with_name(name))
    source = str(store).replace(" ", "\\040")  # fstab's escape
    fstab = write_fstab(tmp_path, f"{source} {mnt} fuse.zarrfs ro,_netdev 0 0")
    with mounted_with(["mount", "-a", "-T", str(fstab)], mnt) as daemon:
        assert listing(mnt) == EXAMPLE_ENTRIES
        assert entries(mnt)[0].source == str(store)
        # Again: mount(8) sees the line mounted (its source is the store) and leaves it.
        again = run("mount", "-a", "-T", str(fstab))
        assert again.returncode == 0, again.stderr
        assert len(entries(mnt)) == 1
        assert daemon.ours() and daemon.code is None
        # and by its mount point alone, as `mount /mnt/z` would with /etc/fstab
        assert run("umount", str(mnt)).returncode == 0
        assert daemon.wait() == 0
        with mounted_with(["mount", "-T", str(fstab), str(mnt)], mnt) as second:
            assert "ro" in entries(mnt)[0].options
            assert run("umount", str(mnt)).returncode == 0
            assert second.wait() == 0


def test_read_write_line_umount_leaves_the_written_data_in_the_store(
    reaper: None, store: Path, mnt: Path, tmp_path: Path
) -> None:
    log = tmp_path / "daemon.log"
    daemon_logs.watch(log)
    # flush_interval: nothing is stored by the timer; close and unmount store it
    line = f"{store} {mnt} fuse.zarrfs rw,flush_interval=3600,log_file={log} 0 0"
    fstab = write_fstab(tmp_path, line)
    expected = expected_bar(store)
    new = np.arange(2 * 60, dtype="<f4").reshape(2, 60) + 0.5
    expected[40:42] = new
    with mounted_with(["mount", "-a", "-T", str(fstab)], mnt) as daemon:
        assert "rw" in entries(mnt)[0].options
        with open(mnt / "foo/bar/array.raw", "r+b") as f:
            f.seek(40 * 60 * 4)
            f.write(new.tobytes())
        result = run("umount", str(mnt))
        assert result.returncode == 0, result.stderr
        # in the store as soon as umount returns, as zarr-python reads it
        assert np.array_equal(expected_bar(store), expected)
        assert daemon.wait() == 0, log.read_text()
    assert not list(store.rglob(".*.tmp*")), "no temporary file left"


def test_a_line_with_neither_ro_nor_rw_is_read_write(
    reaper: None, store: Path, mnt: Path, tmp_path: Path
) -> None:
    """mount(8) hands its helpers ``rw`` unless the line says ``ro``: zarrfs cannot
    tell a line that asked for ``rw`` from one that said neither."""
    log = tmp_path / "daemon.log"
    daemon_logs.watch(log)
    fstab = write_fstab(tmp_path, f"{store} {mnt} fuse.zarrfs log_file={log} 0 0")
    with mounted_with(["mount", "-a", "-T", str(fstab)], mnt) as daemon:
        with open(f"/proc/{daemon.pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        assert argv[argv.index(b"-o") + 1].split(b",")[0] == b"rw", argv
        assert "rw" in entries(mnt)[0].options
        with open(mnt / "foo/bar/array.raw", "r+b") as f:
            f.write(np.zeros(1, "<f4").tobytes())
        assert run("umount", str(mnt)).returncode == 0
        assert daemon.wait() == 0, log.read_text()
    assert expected_bar(store)[0, 0] == 0


@pytest.fixture
def consolidated_store(tmp_path: Path) -> Path:
    """A consolidated v2 group listing "a", and an array "b" added after it."""
    path = tmp_path / "consolidated.zarr"
    group = zarr.open_group(str(path), mode="w", zarr_format=2)
    group.create_array("a", shape=(4,), chunks=(2,), dtype="<i4")[...] = [1, 2, 3, 4]
    zarr.consolidate_metadata(str(path))
    group.create_array("b", shape=(4,), chunks=(2,), dtype="<i4")
    return path


def test_own_fuse_and_generic_options_of_an_fstab_line(
    reaper: None, consolidated_store: Path, mnt: Path, tmp_path: Path
) -> None:
    log = tmp_path / "daemon.log"
    daemon_logs.watch(log)
    options = [
        "ro",
        "no_consolidated",
        "cache_size=64M",
        "write_cache_size=32M",
        "flush_interval=2",
        "readahead=0",
        "log_level=error",
        f"log_file={log}",
        "allow_other",
        "nosuid",
        "nodev",
        "noexec",
        "noatime",
        "_netdev",
        "nofail",
        "defaults",
        "relatime",
        "x-systemd.automount",
        "x-systemd.requires=network-online.target",
        "comment=zarrfs",
    ]
    fstab = write_fstab(tmp_path, f"{consolidated_store} {mnt} fuse.zarrfs {','.join(options)} 0 0")
    with mounted_with(["mount", "-a", "-T", str(fstab)], mnt):
        [entry] = entries(mnt)
        assert {"ro", "nosuid", "nodev", "noexec", "noatime"} <= entry.options, entry
        assert "allow_other" in entry.super_options, entry
        # no_consolidated: "b", which .zmetadata does not list, is shown
        assert listing(mnt) == [".zattrs", ".zgroup", ".zmetadata", "a", "b", "group.nc"]
        assert np.frombuffer((mnt / "a/array.raw").read_bytes(), "<i4").tolist() == [1, 2, 3, 4]
    # log_file and log_level=error: the file was used, and the info lines left out
    assert log.exists() and "mounted" not in log.read_text()


@pytest.mark.parametrize(
    ("option", "says"),
    [
        ("cache_size=lots", "lots"),  # parsed as zarrfs's size, not handed to FUSE
        ("cache_size", "needs a value"),
        ("foreground", "is not accepted"),
        ("no_such_option", "unknown mount option 'no_such_option'"),  # libfuse knows none
        ("blksize=4096", "fuse: mount failed: Invalid argument"),  # FUSE's own reason
    ],
)
def test_a_bad_option_fails_the_mount_in_one_line(
    store: Path, mnt: Path, option: str, says: str
) -> None:
    # No reaper: a daemon that fails may end after its parent, and nothing here would
    # collect it; init does.
    try:
        result = run("mount", "-t", "fuse.zarrfs", str(store), str(mnt), "-o", f"ro,{option}")
        assert result.returncode != 0
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("zarrfs: error:"), result.stderr
        assert says in lines[0]
        assert not entries(mnt)
    finally:
        _remove(mnt)


def test_the_helper_form_runs_without_mount(reaper: None, store: Path, mnt: Path) -> None:
    """``zarrfs STORE MNT -o OPTIONS`` as mount.fuse3 runs it, from a shell: detaches,
    returns once mounted."""
    command = [*zarrfs_command(str(store), str(mnt), "-o", "ro,allow_other,dev,suid")]
    with mounted_with(command, mnt) as daemon:
        [entry] = entries(mnt)
        assert "ro" in entry.options and "allow_other" in entry.super_options
        assert entry.source == str(store)
        assert listing(mnt) == EXAMPLE_ENTRIES
        assert run("umount", str(mnt)).returncode == 0
        assert daemon.wait() == 0
