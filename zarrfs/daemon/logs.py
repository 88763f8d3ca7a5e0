"""Where a zarrfs process logs: ``--log-file``, else stderr in the foreground, else
(a detached daemon) syslog, else a file of its own in the run directory."""

from __future__ import annotations

import logging
import logging.handlers
import socket
import sys

from zarrfs.daemon import runstate
from zarrfs.errors import ZarrfsError

LOG_FORMAT = "%(asctime)s zarrfs[%(process)d] %(levelname)s %(name)s: %(message)s"
SYSLOG_SOCKET = "/dev/log"


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
