"""Mount lifecycle: open the store, build the tree, run pyfuse3 under trio, unmount.

Every exit path unmounts: a normal ``fusermount3 -u`` (pyfuse3.main returns),
SIGTERM/SIGINT/SIGHUP (we call ``pyfuse3.terminate``), or an exception. A read-write
mount holds its store's lock until the daemon ends, and every daemon keeps a run-state
file that tells ``zarrfs umount`` how it ended (see ``zarrfs.daemon.runstate``).
"""

from __future__ import annotations

import ctypes
import functools
import gc
import logging
import os
import re
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pyfuse3
import trio

from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.write.writeback import WriteBack
from zarrfs.daemon.runstate import RunState, StoreLock, Unstored, ensure_run_dir
from zarrfs.errors import StoreError, ZarrfsError
from zarrfs.fuse.operations import Operations
from zarrfs.namespace.tree import Tree
from zarrfs.stores.base import Store
from zarrfs.stores.location import StoreOpenError, StoreOptions, kind, open_store

log = logging.getLogger(__name__)


@dataclass
class MountOptions:
    read_only: bool = False
    # Read-only because read-write was not asked for (zarrfs mount without --rw): the
    # log then says how to get a read-write mount.
    default_read_only: bool = False
    cache_size: int = 512 * 2**20
    write_cache_size: int = 256 * 2**20
    flush_interval: float = 5.0
    consolidated: bool = True  # list the hierarchy from consolidated metadata where present
    readahead: int = 2**20  # the mount's kernel read-ahead; 0 leaves the default
    fuse_options: list[str] = field(default_factory=list)
    debug_fuse: bool = False
    anonymous: bool = False  # S3: unsigned requests, for public buckets


def _checked_store(location: str, options: MountOptions) -> Store:
    """The store, opened and checked; a read-only kind of store (a .zip archive,
    HTTP) makes the mount read-only, said in one line."""
    store = open_store(location, StoreOptions(anonymous=options.anonymous))
    if store.read_only and not options.read_only:
        log.warning("%s is read-only: mounting it read-only", store.describe())
        options.read_only = True
    if store.read_only:
        options.default_read_only = False  # no option makes it writable
    local = kind(location) == "directory"
    if not options.read_only and local and not os.access(location, os.W_OK):
        raise StoreOpenError(f"store {location!r} is not writable (mount it without --rw)")
    return store


def build_operations(location: str, options: MountOptions) -> Operations:
    """The filesystem for ``location``, without the store lock (for in-process use)."""
    return _build(_checked_store(location, options), options)


@dataclass
class PreparedMount:
    ops: Operations
    lock: StoreLock | None  # held by read-write mounts until the daemon ends


def prepare_mount(location: str, options: MountOptions) -> PreparedMount:
    """Everything that can fail on bad input, done before mounting (and detaching).

    A read-write mount takes the store's lock here, so that a second one fails with
    the other errors, and the detached daemon inherits it.
    """
    store = _checked_store(location, options)
    ensure_run_dir()
    # The lock is a local directory's (flock): other stores have none (docs/semantics.md).
    local = kind(location) == "directory"
    lock = None if options.read_only or not local else StoreLock.take(location)
    try:
        if not options.read_only:  # a remote store's own lock (S3: a lease object)
            store.acquire_writer_lease(ensure_run_dir())
        return PreparedMount(_build(store, options), lock)
    except BaseException:
        store.release_writer_lease()
        if lock is not None:
            lock.close()
        raise


def _build(store: Store, options: MountOptions) -> Operations:
    cache = ChunkCache(store, options.cache_size)
    counters = cache.counters  # the mount's one set, shown by .zarrfs/stats
    writeback = None
    if not options.read_only:
        writeback = WriteBack(store, cache, options.write_cache_size, options.flush_interval)
    tree = Tree(store, cache, writeback, consolidated=options.consolidated)
    tree.show_control(counters)  # .zarrfs/ at the mount root
    return Operations(tree, counters, writeback, read_only=options.read_only)


def fuse_options(options: MountOptions) -> set[str]:
    opts = set(pyfuse3.default_options)
    opts.add("subtype=zarrfs")
    # The mount's source; an fstab mount names its store (zarrfs/commands/mountopts.py), so
    # that mount(8) sees the line is mounted. Two fsname= would leave it to chance.
    if not any(o.startswith("fsname=") for o in options.fuse_options):
        opts.add("fsname=zarrfs")
    if options.read_only:
        opts.add("ro")
    if options.debug_fuse:
        opts.add("debug")
    opts.update(options.fuse_options)
    return opts


# The hint a mount read-only by default logs once. The kernel refuses every write to a
# read-only mount (EROFS) before it reaches the daemon, which so never sees one:
# the line is logged when the mount comes up.
READ_ONLY_HINT = (
    "read-only mount (the default): writes fail with EROFS (Read-only file system); "
    "mount with --rw (-o rw in fstab) for a read-write mount"
)
MAX_FUSE_MESSAGE = 16 << 10  # bytes of what libfuse and fusermount3 said that are kept


class FuseMountError(RuntimeError):
    """libfuse could not mount; the message is what it (or fusermount3) said why."""


def _fuse_init(ops: Operations, mountpoint: str, options: MountOptions) -> None:
    """pyfuse3.init with fd 2 caught. libfuse and fusermount3 (its child) say why a
    mount failed only on stderr, which a detached daemon has closed, and pyfuse3's
    exception says only "fuse_session_mount failed": their lines become the error,
    or, when the mount succeeds, warnings in the log."""
    sys.stderr.flush()
    saved = os.dup(2)
    failure: RuntimeError | None = None
    try:
        with tempfile.TemporaryFile() as capture:
            os.dup2(capture.fileno(), 2)
            try:
                pyfuse3.init(ops, mountpoint, fuse_options(options))
            except RuntimeError as e:
                failure = e
            finally:
                os.dup2(saved, 2)
            capture.seek(0)
            text = capture.read(MAX_FUSE_MESSAGE).decode(errors="replace")
    finally:
        os.close(saved)
    said = [line.strip() for line in text.splitlines() if line.strip()]
    if failure is not None:
        raise FuseMountError("; ".join(said) or str(failure)) from None
    for line in said:
        log.warning("FUSE: %s", line)


def notify_systemd(message: str) -> None:
    """sd_notify without libsystemd: one datagram to $NOTIFY_SOCKET, if set."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(message.encode(), address)
    except OSError as e:
        log.warning("cannot notify systemd: %s", e)


# Seconds after mounting when temporary files of an earlier run are looked for, and
# the pause after each directory of the walk (10 000 directories: 10 s of walking).
CLEANUP_DELAY = 5.0
CLEANUP_PAUSE = 0.001


async def _run(ops: Operations, readahead: Callable[[], None] | None = None) -> None:
    writeback = ops.tree.writeback
    async with trio.open_nursery() as nursery:

        async def raise_readahead(set_it: Callable[[], None]) -> None:
            # The kernel lowers read-ahead to what INIT negotiated; raise it after.
            await ops.initialised.wait()
            await trio.to_thread.run_sync(set_it)

        async def watch_signals() -> None:
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as sigs:
                async for signum in sigs:
                    log.info("received %s, unmounting", signal.Signals(signum).name)
                    pyfuse3.terminate()

        started = time.time()

        hurry = threading.Event()  # unmounting: walk at full speed

        def pace() -> None:
            if not hurry.is_set():
                time.sleep(CLEANUP_PAUSE)

        async def cleanup() -> None:
            # Later and paced: a walk of a large store at full speed takes the GIL
            # from the requests of the first listings (a mount + ls -R of 10 000
            # arrays takes 1-2 s longer). A mount that ends sooner finishes it on
            # its way out, unpaced.
            try:
                await trio.sleep(CLEANUP_DELAY)
            finally:
                with trio.CancelScope(shield=True):
                    removed = await trio.to_thread.run_sync(ops.tree.store.cleanup, started, pace)
                if removed:
                    log.info("removed %d temporary files left by an earlier run", removed)

        nursery.start_soon(watch_signals)
        if readahead is not None:
            nursery.start_soon(raise_readahead, readahead)
        ops.tree.cache.read_ahead = True
        if writeback is not None:
            nursery.start_soon(writeback.run_periodic)
            nursery.start_soon(writeback.run_write_behind)
            nursery.start_soon(cleanup)
        await pyfuse3.main()
        hurry.set()
        nursery.cancel_scope.cancel()
    if writeback is not None:
        await _final_flush(ops)


class UnstoredDataError(ZarrfsError):
    """The daemon ends with written data that is not in the store."""

    def __init__(self, unstored: Unstored) -> None:
        super().__init__(unstored.describe())
        self.unstored = unstored


def _reason(error: ZarrfsError) -> str:
    # The per-chunk detail is in the log; the summary names the cause once.
    if isinstance(error, StoreError):
        return os.strerror(error.errno)
    return str(error)


async def _final_flush(ops: Operations) -> None:
    """Unmounted (or signalled): store everything still dirty before exiting."""
    writeback = ops.tree.writeback
    assert writeback is not None
    unstored = Unstored()
    for state in writeback.states():
        if state.tail:
            log.warning(
                "%s: dropping %d bytes of an incomplete row at unmount",
                state.meta.display_name,
                len(state.tail),
            )
            unstored.tail_bytes += len(state.tail)
            unstored.tail_arrays += 1
            if len(unstored.tail_names) < 3:
                unstored.tail_names.append(state.meta.display_name)
            state.drop_tail()
    try:
        await writeback.flush_all()
    except ZarrfsError as e:
        log.error("data not stored at unmount: %s", e)
        left = writeback.states()
        unstored.chunks = sum(len(state.dirty) for state in left)
        unstored.nbytes = sum(d.data.nbytes for state in left for d in state.dirty.values())
        unstored.arrays = len(left)
        unstored.error = _reason(e)
    if unstored.error is not None or unstored.tail_bytes:
        log.error("at unmount, %s", unstored.describe())
        raise UnstoredDataError(unstored)


@dataclass(frozen=True)
class MountEntry:
    """One line of /proc/self/mountinfo."""

    device: str  # "major:minor"
    mountpoint: str
    fstype: str  # "fuse.zarrfs" for a zarrfs mount (its subtype)
    source: str


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(mountinfo: str) -> list[MountEntry]:
    entries = []
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        # id parent major:minor root mountpoint options [optional...] - fstype source super
        if "-" not in fields[6:]:
            continue
        rest = fields[fields.index("-", 6) + 1 :]
        if len(rest) < 2:
            continue
        entries.append(
            MountEntry(fields[2], _unescape(fields[4]), _unescape(rest[0]), _unescape(rest[1]))
        )
    return entries


def find_mount(mountpoint: str, mountinfo: str) -> MountEntry | None:
    """The newest (topmost) mount on ``mountpoint``: later lines were mounted later."""
    found = None
    for entry in parse_mountinfo(mountinfo):
        if entry.mountpoint == mountpoint:
            found = entry
    return found


def mount_device(mountpoint: str, mountinfo: str) -> str | None:
    """The "major:minor" of the newest mount on ``mountpoint`` in /proc/self/mountinfo."""
    entry = find_mount(mountpoint, mountinfo)
    return entry.device if entry is not None else None


def set_readahead(mountpoint: str, nbytes: int) -> None:
    """Raise the kernel's read-ahead for this mount: sequential reads then arrive in
    requests of up to ``nbytes`` instead of 128 KiB, a fraction of the per-request cost.

    Needs root (the bdi file is root's); otherwise say how to do it.
    """
    try:
        with open("/proc/self/mountinfo") as f:
            device = mount_device(mountpoint, f.read())
    except OSError as e:
        log.info("cannot read /proc/self/mountinfo: %s", e)
        return
    if device is None:
        log.info("%s is not in /proc/self/mountinfo; read-ahead unchanged", mountpoint)
        return
    path = f"/sys/class/bdi/{device}/read_ahead_kb"
    kb = max(nbytes // 1024, 4)
    try:
        with open(path, "w") as f:
            f.write(str(kb))
    except OSError as e:
        log.info(
            "read-ahead left at the kernel default (%s); to raise it: echo %d > %s",
            e.strerror,
            kb,
            path,
        )
    else:
        log.debug("read-ahead of %s set to %d KiB", mountpoint, kb)


# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3


def tune_malloc() -> None:
    """Keep freed request and chunk buffers for reuse instead of returning them.

    Every write request arrives in a new 1 MiB buffer and most chunks are about that
    size. glibc would map each one afresh (or trim the heap after it is freed), and
    touching new memory costs a page fault per 4 KiB: measured here, ~20 000 faults and
    10% of sequential write throughput per 256 MiB. Freed memory is kept up to 128
    MiB; what the caches hold is bounded by their own budgets.
    """
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return
    mallopt(_M_MMAP_THRESHOLD, 64 << 20)
    mallopt(_M_TRIM_THRESHOLD, 128 << 20)
    mallopt(_M_TOP_PAD, 16 << 20)


# Allocations between collections of the youngest generation (CPython's default: 700).
GC_YOUNG_THRESHOLD = 20_000


def tune_gc() -> None:
    """Collect less often, and never scan what was built before mounting again.

    Listing a consolidated hierarchy makes a few dozen objects per node: with the
    default threshold, collections run every 700 allocations, and each full one
    walks every node loaded so far (at 10 000 arrays, the first ``ls -R`` spends
    a quarter of its time in the collector). Freezing moves the imports and the
    consolidated listing out of the collector's sight. zarrfs makes no reference
    cycles on its paths that matter for memory (chunk and stripe buffers are freed
    by reference counting, tested), so collecting later costs no memory.
    """
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 10, 10)


def serve(
    ops: Operations,
    mountpoint: str,
    options: MountOptions,
    on_ready: Callable[[], None] | None = None,
    lock: StoreLock | None = None,
) -> None:
    """Mount, call ``on_ready``, serve until unmounted or signalled, then unmount.

    Runs in the daemon. Its run-state file says how it ended; ``lock`` (the store's)
    is released last, after the final flush.
    """
    target = os.path.realpath(mountpoint)  # before mounting: after, a stat would hang
    try:
        run = RunState.begin(target, ops.tree.store.describe(), lock)
        mounted = False
        try:
            tune_malloc()
            tune_gc()
            _fuse_init(ops, mountpoint, options)
            mounted = True
            _serve_mounted(ops, mountpoint, target, options, on_ready)
        except UnstoredDataError as e:
            run.failed(str(e), e.unstored)
            raise
        except BaseException as e:
            if mounted:  # someone may be waiting in zarrfs umount
                run.failed(f"the zarrfs daemon failed: {e or type(e).__name__}")
            else:  # nothing was mounted, so nobody will ask
                run.succeeded()
            raise
        run.succeeded()
    finally:
        ops.tree.store.release_writer_lease()
        if lock is not None:
            lock.close()


def _serve_mounted(
    ops: Operations,
    mountpoint: str,
    target: str,
    options: MountOptions,
    on_ready: Callable[[], None] | None,
) -> None:
    try:
        log.info("mounted %s on %s", ops.tree.store.describe(), mountpoint)
        if options.default_read_only:
            log.info("%s", READ_ONLY_HINT)
        if on_ready is not None:
            on_ready()
        ops.mounted = True
        notify_systemd("READY=1")
        readahead = None
        if options.readahead:
            readahead = functools.partial(set_readahead, target, options.readahead)
        trio.run(_run, ops, readahead)
        notify_systemd("STOPPING=1")
    finally:
        pyfuse3.close(unmount=True)
        log.info("unmounted %s", mountpoint)
