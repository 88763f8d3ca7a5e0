"""Running the daemon: in the foreground, or detached from the command that mounts.

Detached, the command forks; the child becomes the daemon (its own session, stdio
closed, logging to syslog) and reports to its parent over a pipe: the warnings it
logs while mounting, then ``ready`` or the one-line error. The parent waits for that,
prints the warnings and exits 0 once the mount is ready, or raises DaemonError with
the daemon's reason (libfuse's and fusermount3's included); the command prints it.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

from zarrfs.daemon.build import MountOptions, PreparedMount
from zarrfs.daemon.logs import LOG_FORMAT, setup_logging
from zarrfs.daemon.serve import FuseMountError, UnstoredDataError, serve
from zarrfs.errors import ZarrfsError

log = logging.getLogger(__name__)


class DaemonError(ZarrfsError):
    """The mount failed, or ended with data not stored: the message says which."""


def serve_foreground(prepared: PreparedMount, mountpoint: str, options: MountOptions) -> None:
    """Serve in this process until unmounted; DaemonError (or the ZarrfsError of the
    run-state file) when it cannot mount or ends with data not stored."""
    try:
        serve(prepared.ops, mountpoint, options, lock=prepared.lock)
    except UnstoredDataError as e:
        raise DaemonError(f"{mountpoint}: {e}") from None
    except RuntimeError as e:
        raise DaemonError(f"cannot mount on {mountpoint!r}: {e}") from None


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


def _wait_for_daemon(read_end: int, say: Callable[[str], None]) -> NoReturn:
    """The parent: ``say`` what the daemon says until it is ready (exit 0) or fails."""
    with os.fdopen(read_end, "rb") as pipe:
        for line in pipe:
            try:
                message = json.loads(line)
                kind, text = message["kind"], str(message["text"])
            except (ValueError, TypeError, KeyError):
                continue
            if kind == "say":
                say(text)
            elif kind == "ready":
                # At once: tearing down the interpreter (a tree of 10 000 arrays built
                # here before the fork) would keep the caller waiting another 0.1-0.2 s.
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(0)
            elif kind == "error":
                raise DaemonError(text)
    raise DaemonError("the mount daemon exited before the mount was ready")


def serve_detached(
    prepared: PreparedMount | Callable[[], PreparedMount],
    mountpoint: str,
    options: MountOptions,
    log_level: str,
    log_file: str | None,
    say: Callable[[str], None],
) -> NoReturn:
    """Fork: the child serves ``prepared`` (or what it prepares, for a store whose
    client runs threads a fork would not keep) as the daemon; this process passes
    what it says to ``say`` and exits 0 once the mount is ready (DaemonError if not)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write_end)
        # The daemon holds the store lock now; a copy here must not outlive it.
        if isinstance(prepared, PreparedMount) and prepared.lock is not None:
            prepared.lock.close()
        _wait_for_daemon(read_end, say)

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
