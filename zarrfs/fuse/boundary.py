"""The one error boundary every FUSE handler passes through.

zarrfs errors become their errno (refusals of what the caller asked for are answered
and logged at debug level; failures are logged once and counted for .zarrfs/stats),
an OSError its errno, anything unexpected is logged with its traceback and becomes
EIO: pyfuse3 ends ``main()`` on any other exception, so nothing else may escape.
"""

from __future__ import annotations

import errno
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import pyfuse3

from zarrfs.core.counters import Counters
from zarrfs.errors import ZarrfsError

log = logging.getLogger("zarrfs.fuse.operations")  # where a handler's failures are logged

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

# Refusals of what the caller asked for: answered, not logged as faults.
CALLER_ERRNOS = frozenset(
    {
        errno.ENOENT,
        errno.EROFS,
        errno.EINVAL,
        errno.EPERM,
        errno.EACCES,
        errno.EFBIG,
        errno.EISDIR,
        errno.ENOTDIR,
        pyfuse3.ENOATTR,
    }
)


class Handlers(Protocol):
    counters: Counters


def failed(handlers: Handlers, err: int) -> pyfuse3.FUSEError:
    """The reply to a handler that failed; failures (not refusals such as ENOENT)
    are counted for .zarrfs/stats."""
    if err not in CALLER_ERRNOS:
        handlers.counters.errors += 1
    return pyfuse3.FUSEError(err)


def boundary(handler: F) -> F:
    """``handler`` (a method of the handlers) behind the boundary."""

    @functools.wraps(handler)
    async def wrapper(*args: Any) -> Any:
        try:
            return await handler(*args)
        except pyfuse3.FUSEError:
            raise
        except ZarrfsError as e:
            if e.errno in CALLER_ERRNOS or getattr(e, "logged", False):
                log.debug("%s: %s", handler.__name__, e)
            else:
                log.error("%s", e)
            raise failed(args[0], e.errno) from None
        except OSError as e:
            log.error("%s: %s", handler.__name__, e)
            raise failed(args[0], e.errno or errno.EIO) from None
        except Exception:
            log.exception("internal error in %s", handler.__name__)
            raise failed(args[0], errno.EIO) from None

    return wrapper  # type: ignore[return-value]
