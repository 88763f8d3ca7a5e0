"""Command line: ``zarrfs mount`` and ``zarrfs umount`` (``check`` and ``tree`` live in
their own modules).

Bad input ends with one line on stderr and a non-zero exit, never a traceback; a bad
option value or an unknown ``-o`` entry is a usage error (exit 2) naming the option.
Without ``-f`` the mount detaches: the parent prints the warnings the daemon logs
while mounting, exits 0 only once the daemon says the mount is ready, and otherwise
relays the daemon's one-line error (libfuse's and fusermount3's reasons included).
A store URL with secrets is never left in a command line (see ``_hide_secrets``).
"""

from __future__ import annotations

import errno
import functools
import json
import logging
import logging.handlers
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

import click

from zarrfs.commands.check import check_command
from zarrfs.commands.mountopts import (
    check_cache_size,
    check_flush_interval,
    check_readahead,
    command_line,
    public_location,
)
from zarrfs.commands.tree import tree_command
from zarrfs.daemon import runstate
from zarrfs.errors import ZarrfsError
from zarrfs.fuse.operations import PID_XATTR

if TYPE_CHECKING:
    from zarrfs.daemon.mount import MountOptions, PreparedMount

log = logging.getLogger("zarrfs")

ZARRFS_FSTYPE = "fuse.zarrfs"  # the mount's subtype, as /proc/self/mountinfo shows it
LOG_FORMAT = "%(asctime)s zarrfs[%(process)d] %(levelname)s %(name)s: %(message)s"
SYSLOG_SOCKET = "/dev/log"
# A mount re-run without its store URL's secrets in its command line reads the URL
# from the descriptor this variable names.
STORE_FD_VARIABLE = "ZARRFS_STORE_FD"


def fail(message: str, code: int = 1) -> NoReturn:
    click.echo(f"zarrfs: error: {message}", err=True)
    sys.exit(code)


def setup_logging(level: str, log_file: str | None, detached: bool) -> str | None:
    """Log to ``log_file``, else to stderr, else (a detached daemon) to syslog, else to
    a file in the run directory. Returns a line saying where a detached daemon's log
    went when it is not where the user would look (syslog is missing), else None."""
    root = logging.getLogger()
    root.handlers.clear()
    root.setLevel(level.upper())
    handler: logging.Handler
    if log_file:
        handler = logging.FileHandler(log_file)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
    elif detached:
        missing = _no_syslog(SYSLOG_SOCKET)
        if missing is not None:
            return _log_to_run_dir(root, f"no syslog at {SYSLOG_SOCKET}: {missing}")
        handler = logging.handlers.SysLogHandler(address=SYSLOG_SOCKET)
        handler.setFormatter(logging.Formatter("zarrfs[%(process)d]: %(levelname)s %(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root.addHandler(handler)
    return None


def _no_syslog(address: str) -> str | None:
    """Why nothing listens at ``address`` (None if something does). SysLogHandler
    ignores a failed connection and drops every record after it."""
    reason = ""
    for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
        with socket.socket(socket.AF_UNIX, kind) as sock:
            try:
                sock.connect(address)
            except OSError as e:
                reason = e.strerror or str(e)
            else:
                return None
    return reason


def _log_to_run_dir(root: logging.Logger, why: str) -> str:
    """Containers and WSL have no syslog: a daemon's log is a file of its own."""
    try:
        path = runstate.log_path()
        handler: logging.Handler = logging.FileHandler(path)
    except (OSError, ZarrfsError) as e:
        root.addHandler(logging.NullHandler())
        return f"zarrfs: warning: {why}, and {e}: the daemon does not log (use --log-file)"
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root.addHandler(handler)
    return f"zarrfs: logging to {path} ({why})"


def check_mountpoint(mountpoint: str) -> None:
    if not os.path.exists(mountpoint):
        fail(f"mountpoint {mountpoint!r} does not exist")
    if not os.path.isdir(mountpoint):
        fail(f"mountpoint {mountpoint!r} is not a directory")
    if os.path.ismount(mountpoint):
        fail(f"mountpoint {mountpoint!r} is already a mount point")
    try:
        if os.listdir(mountpoint):
            fail(f"mountpoint {mountpoint!r} is not empty")
    except OSError as e:
        fail(f"mountpoint {mountpoint!r}: {e.strerror}")


def check_not_nested(store: str, mountpoint: str) -> None:
    """A mount inside its own store would list itself: the daemon deadlocks on its
    own mount at its first walk of the store."""
    if not (os.path.isdir(store) and os.path.isdir(mountpoint)):
        return  # the other checks say what is wrong
    store_path, mount_path = os.path.realpath(store), os.path.realpath(mountpoint)
    if os.path.commonpath([store_path, mount_path]) == store_path:
        where = "is the store" if store_path == mount_path else "is inside the store"
        fail(f"mountpoint {mountpoint!r} {where} {store!r}")
    if os.path.commonpath([store_path, mount_path]) == mount_path:
        fail(f"store {store!r} is inside the mountpoint {mountpoint!r}")


def check_log_level(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if value.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise click.BadParameter(f"unknown log level {value!r}")
    return value


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="zarrfs")
def cli() -> None:
    """Mount Zarr stores as directories of flat array.raw / array.npy files."""


cli.add_command(check_command)  # zarrfs check STORE: zarrfs/commands/check.py
cli.add_command(tree_command)  # zarrfs tree STORE: zarrfs/commands/tree.py


def main() -> None:
    """Entry point: click's usage errors become one line too (exit 2, as click's)."""
    try:
        # mount(8)'s form (zarrfs STORE MNT -o OPTS) and -o lists: zarrfs/commands/mountopts.py
        code = cli.main(args=command_line(sys.argv[1:], cli), standalone_mode=False)
    except click.UsageError as e:
        hint = f" (see 'zarrfs {e.ctx.info_name} --help')" if e.ctx else ""
        fail(f"{e.format_message()}{hint}", 2)
    except click.Abort:
        fail("aborted")
    sys.exit(code if isinstance(code, int) else 0)


@cli.command()
@click.argument("store")
@click.argument("mountpoint")
@click.option("-f", "--foreground", is_flag=True, help="Stay in the foreground, log to stderr.")
@click.option(
    "--read-only", is_flag=True, help="Refuse every write (EROFS): the default without --rw."
)
@click.option("--rw", is_flag=True, help="Mount read-write (directories and S3).")
@click.option(
    "-o",
    "fuse_opts",
    multiple=True,
    help="Mount options, comma-separated: ro, rw, this command's options by name "
    "(cache_size=1G), FUSE's (allow_other); mount(8)'s generic ones are ignored.",
)
@click.option(
    "--cache-size",
    default="512M",
    show_default=True,
    callback=check_cache_size,
    help="Decoded-chunk cache (4K up to the machine's memory).",
)
@click.option(
    "--write-cache-size",
    default="256M",
    show_default=True,
    callback=check_cache_size,
    help="Dirty (written, not yet stored) chunks kept before the oldest are flushed "
    "(4K up to the machine's memory).",
)
@click.option(
    "--flush-interval",
    default=5.0,
    show_default=True,
    type=float,
    callback=check_flush_interval,
    help="Seconds a chunk may stay dirty before it is stored (0.01 to 86400).",
)
@click.option(
    "--readahead",
    default="1M",
    show_default=True,
    callback=check_readahead,
    help="Kernel read-ahead of the mount (needs root; 0 keeps the kernel's; 4K to 1G).",
)
@click.option(
    "--no-consolidated",
    is_flag=True,
    help=(
        "List the store itself, ignoring consolidated metadata "
        "(.zmetadata, or a root zarr.json's consolidated_metadata)."
    ),
)
@click.option(
    "--anonymous",
    is_flag=True,
    help="S3: send unsigned requests (public buckets), ignoring any credentials.",
)
@click.option("--log-level", default="info", show_default=True, callback=check_log_level)
@click.option("--log-file", default=None, help="Log here instead of stderr/syslog.")
def mount(
    store: str,
    mountpoint: str,
    foreground: bool,
    read_only: bool,
    rw: bool,
    fuse_opts: tuple[str, ...],
    cache_size: int,
    write_cache_size: int,
    flush_interval: float,
    readahead: int,
    no_consolidated: bool,
    anonymous: bool,
    log_level: str,
    log_file: str | None,
) -> None:
    """Mount the Zarr STORE on MOUNTPOINT, read-only unless --rw is given.

    STORE is a directory, a .zip archive (read-only), an http:// or https:// URL
    (read-only) or s3://bucket/prefix (configured as AWS tools are: AWS_* variables,
    ~/.aws files).
    """
    from zarrfs.daemon.mount import MountOptions, prepare_mount
    from zarrfs.stores.location import is_remote

    if rw and read_only:
        raise click.UsageError(
            "--rw and --read-only (-o rw and -o ro) cannot both be given",
            click.get_current_context(),
        )
    store = _hide_secrets(store)
    options = MountOptions(
        read_only=not rw,
        default_read_only=not (rw or read_only),
        cache_size=cache_size,
        write_cache_size=write_cache_size,
        flush_interval=flush_interval,
        consolidated=not no_consolidated,
        readahead=readahead,
        fuse_options=[o for opt in fuse_opts for o in opt.split(",") if o],
        anonymous=anonymous,
    )
    check_not_nested(store, mountpoint)  # first: a nested mountpoint is also "not empty"
    check_mountpoint(mountpoint)
    if log_file:
        try:
            open(log_file, "a").close()
        except OSError as e:
            fail(f"log file {log_file!r}: {e.strerror}")
    setup_logging(log_level, log_file, detached=False)
    prepare = functools.partial(prepare_mount, store, options)
    if not foreground and is_remote(store):
        # A network client runs threads of its own, which the fork would not keep:
        # the daemon opens the store itself and reports failures over the pipe.
        _serve_detached(prepare, mountpoint, options, log_level, log_file)
        return
    try:
        prepared = prepare()
    except ZarrfsError as e:
        fail(str(e))
    if foreground:
        _serve_foreground(prepared, mountpoint, options)
    else:
        _serve_detached(prepared, mountpoint, options, log_level, log_file)


def _hide_secrets(store: str) -> str:
    """The store location, kept out of this process's command line (``ps`` and
    /proc/PID/cmdline show it to every user) when it carries secrets: a URL with user
    info or a query string (?X-Amz-Signature=..., ?token=...). Such a mount runs
    itself again at once with the URL shown without them, handing the whole URL over
    in a memory file only this user (and root) can read; the daemon is then that
    process, or its fork."""
    handed = os.environ.pop(STORE_FD_VARIABLE, None)
    if handed is not None:
        try:
            with os.fdopen(int(handed), "rb") as f:
                location = f.read().decode("utf-8", "surrogateescape")
        except (ValueError, OSError) as e:
            fail(f"cannot read the store handed over in {STORE_FD_VARIABLE}: {e}")
        if public_location(location) != store:
            fail(f"the store handed over in {STORE_FD_VARIABLE} is not {store!r}")
        return location
    shown = public_location(store)
    argv = sys.orig_argv
    if shown == store or store not in argv[1:]:
        return store  # nothing to hide, or not run from a command line (in-process)
    fd = os.memfd_create("zarrfs-store", 0)
    os.write(fd, store.encode("utf-8", "surrogateescape"))
    os.lseek(fd, 0, os.SEEK_SET)
    os.set_inheritable(fd, True)
    sys.stdout.flush()
    sys.stderr.flush()
    again = [sys.executable, *(shown if arg == store else arg for arg in argv[1:])]
    os.execve(sys.executable, again, {**os.environ, STORE_FD_VARIABLE: str(fd)})


def _serve_foreground(prepared: PreparedMount, mountpoint: str, options: MountOptions) -> None:
    from zarrfs.daemon.mount import UnstoredDataError, serve

    try:
        serve(prepared.ops, mountpoint, options, lock=prepared.lock)
    except UnstoredDataError as e:
        fail(f"{mountpoint}: {e}")
    except RuntimeError as e:
        fail(f"cannot mount on {mountpoint!r}: {e}")
    except ZarrfsError as e:  # the run-state file could not be written
        fail(str(e))


class _Report:
    """The daemon's side of the pipe its parent waits on: one JSON object a line,
    ``say`` (a line for the user's stderr), then ``ready`` or ``error``."""

    def __init__(self, fd: int) -> None:
        self.fd: int | None = fd
        self.lock = threading.Lock()  # store clients log from threads of their own

    def send(self, kind: str, text: str = "") -> None:
        with self.lock:
            if self.fd is None:
                return
            try:
                os.write(self.fd, (json.dumps({"kind": kind, "text": text}) + "\n").encode())
            except OSError:  # the parent is gone: nobody to tell
                self.close()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class _SayWarnings(logging.Handler):
    """Until the mount is ready, the warnings the daemon logs go to its parent too,
    which prints them (``zarrfs mount`` of a local store logs them to stderr itself,
    before detaching)."""

    def __init__(self, report: _Report) -> None:
        super().__init__(logging.WARNING)
        self.report = report
        self.setFormatter(logging.Formatter(LOG_FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        self.report.send("say", self.format(record))


def _wait_for_daemon(read_end: int) -> NoReturn:
    """The parent: print what the daemon says until it is ready (exit 0) or fails."""
    with os.fdopen(read_end, "rb") as pipe:
        for line in pipe:
            try:
                message = json.loads(line)
                kind, text = message["kind"], str(message["text"])
            except (ValueError, TypeError, KeyError):
                continue
            if kind == "say":
                click.echo(text, err=True)
            elif kind == "ready":
                # At once: tearing down the interpreter (a tree of 10 000 arrays built
                # here before the fork) would keep the caller waiting another 0.1-0.2 s.
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(0)
            elif kind == "error":
                fail(text)
    fail("the mount daemon exited before the mount was ready")


def _serve_detached(
    prepared: PreparedMount | Callable[[], PreparedMount],
    mountpoint: str,
    options: MountOptions,
    log_level: str,
    log_file: str | None,
) -> None:
    from zarrfs.daemon.mount import FuseMountError, PreparedMount, UnstoredDataError, serve

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write_end)
        # The daemon holds the store lock now; a copy here must not outlive it.
        if isinstance(prepared, PreparedMount) and prepared.lock is not None:
            prepared.lock.close()
        _wait_for_daemon(read_end)

    # The daemon: its own session, no terminal, stdio closed so callers are not held.
    os.close(read_end)
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    report = _Report(write_end)
    where = setup_logging(log_level, log_file, detached=True)
    say_warnings = _SayWarnings(report)
    root = logging.getLogger()
    root.addHandler(say_warnings)

    def ready() -> None:
        root.removeHandler(say_warnings)
        if where is not None:
            report.send("say", where)
        report.send("ready")
        report.close()

    code = 0
    try:
        if not isinstance(prepared, PreparedMount):
            prepared = prepared()
        serve(prepared.ops, mountpoint, options, on_ready=ready, lock=prepared.lock)
    except UnstoredDataError:  # logged, and left in the run-state file for zarrfs umount
        code = 1
    except ZarrfsError as e:  # the store could not be opened, or the run-state file
        code = 1
        root.removeHandler(say_warnings)  # the error is said once, as the error
        log.error("%s", e)
        report.send("error", str(e))
    except FuseMountError as e:  # what libfuse said: no traceback of ours adds to it
        code = 1
        root.removeHandler(say_warnings)
        log.error("cannot mount on %s: %s", mountpoint, e)
        report.send("error", f"cannot mount on {mountpoint!r}: {e}")
    except BaseException as e:
        code = 1
        root.removeHandler(say_warnings)
        log.exception("mount failed")
        report.send("error", f"cannot mount on {mountpoint!r}: {e}")
    finally:
        report.close()
    os._exit(code)


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
    from zarrfs.daemon.mount import find_mount

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


@cli.command()
@click.argument("mountpoint")
@click.option("--timeout", default=0.0, help="Give up waiting for the daemon after N seconds.")
def umount(mountpoint: str, timeout: float) -> None:
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


if __name__ == "__main__":
    main()
