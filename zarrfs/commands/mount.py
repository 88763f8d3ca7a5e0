"""``zarrfs mount STORE MOUNTPOINT``: check the command line, prepare the mount, serve it.

Everything that can fail on bad input (the mount point, the store, its lock) fails
here with one line on stderr, before the process detaches. Without ``-f`` the mount
detaches (daemon/detach.py): this process prints the warnings the daemon logs while
mounting, exits 0 only once the daemon says the mount is ready, and otherwise prints
the daemon's one-line error. A store URL with secrets is never left in a command
line (see ``_hide_secrets``).
"""

from __future__ import annotations

import functools
import os
import sys

import click

from zarrfs.commands.mountopts import (
    check_cache_size,
    check_endpoint_url,
    check_flush_interval,
    check_metadata_ttl,
    check_profile,
    check_readahead,
    check_region,
    fuse_escape,
    public_location,
)
from zarrfs.commands.output import fail
from zarrfs.core.sizes import parse_size
from zarrfs.daemon.build import MountOptions, prepare_mount
from zarrfs.daemon.detach import serve_detached, serve_foreground
from zarrfs.daemon.logs import setup_logging
from zarrfs.errors import ZarrfsError
from zarrfs.stores.location import StoreOptions, is_remote, kind

# A mount re-run without its store URL's secrets in its command line reads the URL
# from the descriptor this variable names.
STORE_FD_VARIABLE = "ZARRFS_STORE_FD"


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


def check_disk_cache_size(ctx: click.Context, param: click.Parameter, value: str) -> int:
    try:
        nbytes = parse_size(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    if nbytes < 1 << 20:
        raise click.BadParameter(f"{value!r} is less than 1 MiB")
    return nbytes


def check_log_level(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if value.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise click.BadParameter(f"unknown log level {value!r}")
    return value


@click.command("mount")
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
    "--metadata-ttl",
    default=60.0,
    show_default=True,
    type=float,
    callback=check_metadata_ttl,
    help="Seconds what the mount knows of the store is served before it is checked "
    "again at the next open, lookup or stat (0: at every one; up to 604800).",
)
@click.option(
    "--kernel-cache",
    is_flag=True,
    help="Read array.raw and array.npy through the kernel's page cache (two copies per "
    "read; the kernel serves repeated reads) rather than straight into the reader's "
    "buffer, which the mount does where the kernel and libfuse allow it.",
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
@click.option(
    "--disk-cache",
    default=None,
    metavar="DIR",
    help="Remote stores: keep what they send in DIR (made 0700) across mounts; "
    "mounts of this machine may share it.",
)
@click.option(
    "--disk-cache-size",
    default="10G",
    show_default=True,
    callback=check_disk_cache_size,
    help="The bound of --disk-cache (1M or more): past it the least recently used go.",
)
@click.option(
    "--endpoint-url",
    default=None,
    callback=check_endpoint_url,
    help="S3: the server, http(s)://host[:port] (over AWS_ENDPOINT_URL and the profile's).",
)
@click.option(
    "--region",
    default=None,
    callback=check_region,
    help="S3: the region (over AWS_REGION and the profile's).",
)
@click.option(
    "--profile",
    default=None,
    callback=check_profile,
    help="S3: the profile of ~/.aws/config and ~/.aws/credentials (over AWS_PROFILE); "
    "its credentials win over AWS_ACCESS_KEY_ID.",
)
@click.option("--log-level", default="info", show_default=True, callback=check_log_level)
@click.option("--log-file", default=None, help="Log here instead of stderr/syslog.")
def mount_command(
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
    metadata_ttl: float,
    kernel_cache: bool,
    no_consolidated: bool,
    anonymous: bool,
    disk_cache: str | None,
    disk_cache_size: int,
    endpoint_url: str,
    region: str,
    profile: str,
    log_level: str,
    log_file: str | None,
) -> None:
    """Mount the Zarr STORE on MOUNTPOINT, read-only unless --rw is given.

    STORE is a directory, a .zip archive (read-only), an http:// or https:// URL
    (read-only) or s3://bucket/prefix (configured as AWS tools are: these options,
    then AWS_* variables, then the ~/.aws files' profile). Credentials are never
    options: they go in ~/.aws/credentials or the environment.
    """
    if rw and read_only:
        raise click.UsageError(
            "--rw and --read-only (-o rw and -o ro) cannot both be given",
            click.get_current_context(),
        )
    store = _hide_secrets(store)
    fuse_options = [o for opt in fuse_opts for o in opt.split(",") if o]
    if not any(option.startswith("fsname=") for option in fuse_options):
        fuse_options.append(f"fsname={fuse_escape(mount_source(store))}")
    options = MountOptions(
        read_only=not rw,
        default_read_only=not (rw or read_only),
        cache_size=cache_size,
        write_cache_size=write_cache_size,
        flush_interval=flush_interval,
        consolidated=not no_consolidated,
        readahead=readahead,
        fuse_options=fuse_options,
        store=StoreOptions(anonymous, endpoint_url, region, profile),
        metadata_ttl=metadata_ttl,
        disk_cache=None if disk_cache is None else os.path.abspath(disk_cache),
        disk_cache_size=disk_cache_size,
        kernel_cache=kernel_cache,
    )
    check_not_nested(store, mountpoint)  # first: a nested mountpoint is also "not empty"
    check_mountpoint(mountpoint)
    if log_file:
        try:
            open(log_file, "a").close()
        except OSError as e:
            fail(f"log file {log_file!r}: {e.strerror}")
    setup_logging(log_level, log_file, detached=False)
    try:
        _serve(store, mountpoint, options, foreground, log_level, log_file)
    except ZarrfsError as e:
        fail(str(e))


def mount_source(store: str) -> str:
    """The mount's source in /proc/mounts and ``findmnt`` (FUSE's fsname): a URL
    without its secrets (every user reads /proc/mounts), a path made absolute. (The
    form mount(8) runs names the store as the fstab line does: mountopts.py.)"""
    if kind(store) in ("s3", "gs", "az", "http"):
        return public_location(store)
    return os.path.abspath(store)


def _say(text: str) -> None:
    click.echo(text, err=True)


def _serve(
    store: str,
    mountpoint: str,
    options: MountOptions,
    foreground: bool,
    log_level: str,
    log_file: str | None,
) -> None:
    prepare = functools.partial(prepare_mount, store, options)
    if not foreground and is_remote(store):
        # A network client runs threads of its own, which the fork would not keep:
        # the daemon opens the store itself and reports failures over the pipe.
        serve_detached(prepare, mountpoint, options, log_level, log_file, _say)
    prepared = prepare()
    if foreground:
        serve_foreground(prepared, mountpoint, options)
    else:
        serve_detached(prepared, mountpoint, options, log_level, log_file, _say)


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
