"""Serving a mount: open the FUSE session, run pyfuse3 under trio, unmount.

Every exit path unmounts: a normal ``fusermount3 -u`` (pyfuse3.main returns),
SIGTERM/SIGINT/SIGHUP (we call ``pyfuse3.terminate``), or an exception. A read-write
mount holds its store's lock until the daemon ends, and every daemon keeps a run-state
file that tells ``zarrfs umount`` how it ended (see ``zarrfs.daemon.runstate``).
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable

import pyfuse3
import trio

from zarrfs.core import pool
from zarrfs.daemon.build import MountOptions
from zarrfs.daemon.runstate import RunState, Unstored
from zarrfs.daemon.storelock import StoreLock
from zarrfs.daemon.systemd import notify_systemd
from zarrfs.daemon.tuning import set_readahead, tune_gc, tune_malloc
from zarrfs.errors import StoreError, ZarrfsError
from zarrfs.fuse.directio import shared_mmap_allowed
from zarrfs.fuse.operations import Operations
from zarrfs.views.control import CONTROL_NAME, STATS_NAME

log = logging.getLogger(__name__)


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


# Seconds after mounting when temporary files of an earlier run are looked for, and
# the pause after each directory of the walk (10 000 directories: 10 s of walking).
CLEANUP_DELAY = 5.0
# How long an unmounted daemon waits for its worker threads' jobs under way (a
# decode, a fetch) before it exits anyway.
WORKERS_STOP_TIMEOUT = 10.0
CLEANUP_PAUSE = 0.001


async def _run(ops: Operations, readahead: Callable[[], None] | None = None) -> None:
    writeback = ops.writeback
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
        nursery.start_soon(ops.ahead.run)
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
    writeback = ops.writeback
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
        # Read-ahead may still be decoding: its threads end before the interpreter
        # tears down what they write into (core/pool.py).
        if not pool.stop_all(WORKERS_STOP_TIMEOUT):
            log.warning("worker threads still busy %.0f s after unmounting", WORKERS_STOP_TIMEOUT)


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
        # Asked at the first open of array data (fuse/directio.py): then a file of the
        # mount is open anyway, so the probe's own open never makes an unmount find
        # the mount busy.
        stats = os.path.join(target, CONTROL_NAME, STATS_NAME)
        ops.direct_probe = functools.partial(shared_mmap_allowed, stats)
        ops.kernel_cache = options.kernel_cache
        trio.run(_run, ops, readahead)
        notify_systemd("STOPPING=1")
    finally:
        pyfuse3.close(unmount=True)
        log.info("unmounted %s", mountpoint)
