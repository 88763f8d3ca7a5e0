"""Command line: ``zarrfs mount`` and ``zarrfs umount`` (``check`` and ``tree`` live in
their own modules).

Bad input ends with one line on stderr and a non-zero exit, never a traceback.
Without ``-f`` the mount detaches: the parent exits 0 only once the daemon says the
mount is ready, and otherwise relays the daemon's one-line error.
"""

from __future__ import annotations

import errno
import functools
import logging
import logging.handlers
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

import click

from zarrfs import runstate
from zarrfs.check import check_command
from zarrfs.core.sizes import parse_size
from zarrfs.errors import ZarrfsError
from zarrfs.fuse.operations import PID_XATTR
from zarrfs.mountopts import command_line
from zarrfs.treeprint import tree_command

if TYPE_CHECKING:
    from zarrfs.mount import MountOptions, PreparedMount

log = logging.getLogger("zarrfs")

ZARRFS_FSTYPE = "fuse.zarrfs"  # the mount's subtype, as /proc/self/mountinfo shows it
LOG_FORMAT = "%(asctime)s zarrfs[%(process)d] %(levelname)s %(name)s: %(message)s"


def fail(message: str, code: int = 1) -> NoReturn:
    click.echo(f"zarrfs: error: {message}", err=True)
    sys.exit(code)


def setup_logging(level: str, log_file: str | None, detached: bool) -> None:
    root = logging.getLogger()
    root.handlers.clear()
    root.setLevel(level.upper())
    handler: logging.Handler
    if log_file:
        handler = logging.FileHandler(log_file)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
    elif detached:
        if not os.path.exists("/dev/log"):
            root.addHandler(logging.NullHandler())
            return
        handler = logging.handlers.SysLogHandler(address="/dev/log")
        handler.setFormatter(logging.Formatter("zarrfs[%(process)d]: %(levelname)s %(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root.addHandler(handler)


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


cli.add_command(check_command)  # zarrfs check STORE: zarrfs/check.py
cli.add_command(tree_command)  # zarrfs tree STORE: zarrfs/treeprint.py


def main() -> None:
    """Entry point: click's usage errors become one line too (exit 2, as click's)."""
    try:
        # mount(8)'s form (zarrfs STORE MNT -o OPTS) and -o lists: zarrfs/mountopts.py
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
@click.option("--read-only", is_flag=True, help="Refuse every write (EROFS).")
@click.option("--rw", is_flag=True, help="Mount read-write.")
@click.option(
    "-o",
    "fuse_opts",
    multiple=True,
    help="Mount options, comma-separated: ro, rw, this command's options by name "
    "(cache_size=1G), FUSE's (allow_other); mount(8)'s generic ones are ignored.",
)
@click.option("--cache-size", default="512M", show_default=True, help="Decoded-chunk cache.")
@click.option(
    "--write-cache-size",
    default="256M",
    show_default=True,
    help="Dirty (written, not yet stored) chunks kept before the oldest are flushed.",
)
@click.option(
    "--flush-interval",
    default=5.0,
    show_default=True,
    type=float,
    help="Seconds a chunk may stay dirty before it is stored.",
)
@click.option(
    "--readahead",
    default="1M",
    show_default=True,
    help="Kernel read-ahead of the mount (needs root; 0 keeps the kernel's).",
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
    cache_size: str,
    write_cache_size: str,
    flush_interval: float,
    readahead: str,
    no_consolidated: bool,
    anonymous: bool,
    log_level: str,
    log_file: str | None,
) -> None:
    """Mount the Zarr STORE on MOUNTPOINT.

    STORE is a directory, a .zip archive (read-only), an http:// or https:// URL
    (read-only) or s3://bucket/prefix (configured as AWS tools are: AWS_* variables,
    ~/.aws files).
    """
    from zarrfs.mount import MountOptions, prepare_mount
    from zarrfs.stores.location import is_remote

    try:
        cache_bytes = parse_size(cache_size)
        write_cache_bytes = parse_size(write_cache_size)
        readahead_bytes = parse_size(readahead)
    except ValueError as e:
        fail(str(e))
    if not flush_interval > 0:
        fail(f"--flush-interval must be positive, got {flush_interval:g}")
    options = MountOptions(
        read_only=read_only,
        cache_size=cache_bytes,
        write_cache_size=write_cache_bytes,
        flush_interval=flush_interval,
        consolidated=not no_consolidated,
        readahead=readahead_bytes,
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


def _serve_foreground(prepared: PreparedMount, mountpoint: str, options: MountOptions) -> None:
    from zarrfs.mount import UnstoredDataError, serve

    try:
        serve(prepared.ops, mountpoint, options, lock=prepared.lock)
    except UnstoredDataError as e:
        fail(f"{mountpoint}: {e}")
    except RuntimeError as e:
        fail(f"cannot mount on {mountpoint!r}: {e}")
    except ZarrfsError as e:  # the run-state file could not be written
        fail(str(e))


def _serve_detached(
    prepared: PreparedMount | Callable[[], PreparedMount],
    mountpoint: str,
    options: MountOptions,
    log_level: str,
    log_file: str | None,
) -> None:
    from zarrfs.mount import PreparedMount, UnstoredDataError, serve

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write_end)
        # The daemon holds the store lock now; a copy here must not outlive it.
        if isinstance(prepared, PreparedMount) and prepared.lock is not None:
            prepared.lock.close()
        with os.fdopen(read_end, "rb") as pipe:
            message = pipe.read().decode(errors="replace").strip()
        if message == "ready":
            # At once: tearing down the interpreter (a tree of 10 000 arrays built
            # here before the fork) would keep the caller waiting another 0.1-0.2 s.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        fail(message or "the mount daemon exited before the mount was ready")

    # The daemon: its own session, no terminal, stdio closed so callers are not held.
    os.close(read_end)
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    setup_logging(log_level, log_file, detached=True)
    reported = False

    def ready() -> None:
        nonlocal reported
        os.write(write_end, b"ready")
        os.close(write_end)
        reported = True

    code = 0
    if not isinstance(prepared, PreparedMount):
        try:
            prepared = prepared()
        except ZarrfsError as e:
            log.error("%s", e)
            os.write(write_end, str(e).encode())
            os.close(write_end)
            os._exit(1)
    try:
        serve(prepared.ops, mountpoint, options, on_ready=ready, lock=prepared.lock)
    except UnstoredDataError:  # logged, and left in the run-state file for zarrfs umount
        code = 1
    except BaseException as e:
        code = 1
        log.exception("mount failed")
        if not reported:
            os.write(write_end, f"cannot mount on {mountpoint!r}: {e}".encode())
    finally:
        if not reported:
            os.close(write_end)
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
    from zarrfs.mount import find_mount

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
