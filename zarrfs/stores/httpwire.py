"""The HTTP store's connections (zarrfs/stores/http.py): each exchange has a deadline
that holds whatever the server does, and an answer is checked for bytes past the end
its Content-Length declared.

A socket timeout bounds one wait for the server, not an answer: a server that sends
a byte every few seconds (its headers or its body) never lets one expire. So every
try of a request is an ``Exchange`` with a deadline, and one thread (the watchdog,
started on first use) shuts down the socket of any connection still busy in an
exchange past its deadline: the blocked read returns at once, the try fails, and
``Exchange.expired`` says why. The socket is the one the connection has once
connected; a TLS handshake in progress is bounded by the connect timeout alone.

A connection takes part in the exchange of the thread that uses it (a thread-local
set by ``watched``), so urllib3's pool needs no change beyond its connection classes.

Also here: reading and giving back answers (``pieces``, ``finish``), what their
headers say for sure, the redirect policy (``redirect_target``) and short reasons
for failures, none of which know the store.
"""

from __future__ import annotations

import contextlib
import email.errors
import http.client
import os
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from http import HTTPStatus
from typing import Any

from urllib3 import BaseHTTPResponse, HTTPConnectionPool, HTTPHeaderDict, HTTPSConnectionPool
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import NewConnectionError, ProtocolError, SSLError
from urllib3.exceptions import TimeoutError as HTTPTimeoutError

MIN_RATE = 1 << 20  # bytes a second: each MiB received pushes the deadline back 1 s
PIECE = 1 << 20  # bodies are read this much at a time
_DRAIN = 64 << 10  # an unread rest up to this is read to keep the connection alive
REDIRECTS = (301, 302, 303, 307, 308)


class Exchange:
    """One try of a request: its deadline (``time.monotonic()``), the connections it
    uses, and what the watchdog and the answer's reader found."""

    __slots__ = ("connections", "deadline", "done", "expired", "overrun")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.connections: set[HTTPConnection] = set()
        self.done = False
        self.expired = False  # the watchdog ended it
        self.overrun = False  # an answer had more bytes than its Content-Length

    def extend(self, seconds: float) -> None:
        """Push the deadline back (a body arriving at a fair rate); the watchdog
        reads it when it wakes."""
        self.deadline += seconds


class _Watchdog:
    """Shuts down the sockets of exchanges past their deadlines (one daemon thread)."""

    def __init__(self) -> None:
        self._reset()
        # A fork (the daemon detaching) copies no thread: the child starts its own.
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._active: set[Exchange] = set()
        self._wake_at: float | None = None
        self._thread: threading.Thread | None = None

    def start(self, exchange: Exchange) -> None:
        with self._cond:
            self._active.add(exchange)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="zarrfs-http-deadlines", daemon=True
                )
                self._thread.start()
            if self._wake_at is None or exchange.deadline < self._wake_at:
                self._cond.notify()

    def finish(self, exchange: Exchange) -> bool:
        """The exchange is over; whether the watchdog had ended it (then what was
        read may have ended early because of that, and is not to be trusted)."""
        with self._cond:
            self._active.discard(exchange)
            exchange.done = True
            return exchange.expired

    def watch(self, exchange: Exchange, connection: HTTPConnection) -> None:
        with self._cond:
            exchange.connections.add(connection)
            if exchange.expired:  # a redirect after the deadline: ends at once
                _shut(connection)

    def unwatch(self, exchange: Exchange, connection: HTTPConnection) -> None:
        """Before the connection goes back to the pool, where another thread's
        exchange may take it."""
        with self._cond:
            exchange.connections.discard(connection)

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                nearest = None
                for exchange in list(self._active):
                    if exchange.deadline <= now:
                        exchange.expired = True
                        self._active.discard(exchange)
                        for connection in exchange.connections:
                            _shut(connection)
                    elif nearest is None or exchange.deadline < nearest:
                        nearest = exchange.deadline
                self._wake_at = nearest
                self._cond.wait(None if nearest is None else nearest - now)


def _shut(connection: HTTPConnection) -> None:
    sock = connection.sock
    if sock is None:
        return  # still connecting: the connect timeout bounds that
    with contextlib.suppress(OSError):  # already closed
        # socket.socket's own shutdown, also for a TLS socket: SSLSocket's would drop
        # its TLS state under the feet of the thread reading it.
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


WATCHDOG = _Watchdog()
_local = threading.local()


def current() -> Exchange | None:
    """The exchange of this thread, if one is under way."""
    return getattr(_local, "exchange", None)


@contextmanager
def watched(exchange: Exchange) -> Iterator[Exchange]:
    """Run this thread's requests of the block within ``exchange``'s deadline; the
    caller asks ``WATCHDOG.finish`` whether it expired before trusting a result."""
    previous = current()
    _local.exchange = exchange
    WATCHDOG.start(exchange)
    try:
        yield exchange
    finally:
        WATCHDOG.finish(exchange)
        _local.exchange = previous


def release(connection: HTTPConnection | None) -> None:
    """The connection leaves this thread's exchange (it goes back to the pool)."""
    exchange = current()
    if exchange is not None and connection is not None:
        WATCHDOG.unwatch(exchange, connection)


def _take_part(connection: HTTPConnection) -> None:
    exchange = current()
    if exchange is not None:
        WATCHDOG.watch(exchange, connection)


# Defects of a multipart Content-Type, not of the headers (urllib3 ignores them too).
_MULTIPART_DEFECTS = (
    email.errors.StartBoundaryNotFoundDefect,
    email.errors.MultipartInvariantViolationDefect,
)


class _CheckedResponse(http.client.HTTPResponse):
    """http.client's answer, noting bytes that arrived past the end its
    Content-Length declared: nothing should follow an answer before the next
    request, so such bytes mean the declared length was a lie (too short)."""

    def __init__(self, sock: socket.socket, *args: Any, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        self._socket = sock

    def begin(self) -> None:
        super().begin()
        # What http.client could not parse (a line that is no header field, or the
        # headers cut off) would be read as the body: the answer is refused.
        if any(not isinstance(d, _MULTIPART_DEFECTS) for d in self.msg.defects):
            raise http.client.HTTPException("malformed headers")

    def _close_conn(self) -> None:
        # Called with the body read to its declared end (length 0), before the
        # buffered reader that may hold such bytes is dropped.
        fp = self.fp
        if fp is not None and self.length == 0 and not self.chunked and self._method != "HEAD":
            exchange = current()
            if exchange is not None and _pending(self._socket, fp):
                exchange.overrun = True
        super()._close_conn()


def _pending(sock: socket.socket, fp: Any) -> bool:
    """Whether bytes are buffered or waiting on the socket (without waiting)."""
    timeout = sock.gettimeout()
    try:
        sock.settimeout(0.0)
        return bool(fp.peek(1))
    except (OSError, ValueError):
        return False  # nothing to read now (TLS says so by raising), or closed
    finally:
        with contextlib.suppress(OSError):
            sock.settimeout(timeout)


class _Watched:
    """A connection whose every connect and request is watched by the deadline of
    the exchange it belongs to (plain and TLS alike)."""

    response_class = _CheckedResponse

    def connect(self) -> None:
        _take_part(self)
        super().connect()  # type: ignore[misc]

    def request(self, *args: Any, **kwargs: Any) -> None:
        _take_part(self)
        super().request(*args, **kwargs)  # type: ignore[misc]


class _Connection(_Watched, HTTPConnection):
    pass


class _TLSConnection(_Watched, HTTPSConnection):
    pass


class _Pool(HTTPConnectionPool):
    ConnectionCls = _Connection


class _TLSPool(HTTPSConnectionPool):
    ConnectionCls = _TLSConnection


POOL_CLASSES = {"http": _Pool, "https": _TLSPool}


# -- answers ----------------------------------------------------------------------------


class Passing(Exception):
    """A failure worth another try (a status, a body that is not what its headers
    said; network errors are urllib3's own)."""


RETRIED = (Passing, ProtocolError, HTTPTimeoutError)  # NewConnectionError is a timeout


def pieces(response: BaseHTTPResponse, most: int) -> Iterator[bytes]:
    """The body as stored (never decoded) in pieces, until its end or ``most`` bytes;
    each piece pushes the exchange's deadline back as a body at ``MIN_RATE`` would
    need."""
    exchange = current()
    left = most
    while left > 0:
        piece = response.read(min(left, PIECE), decode_content=False)
        if not piece:
            return
        left -= len(piece)
        if exchange is not None:
            exchange.extend(len(piece) / MIN_RATE)
        yield piece


def finish(response: BaseHTTPResponse, ok: bool) -> None:
    """Give the connection back: reused if the body is read (or the rest small),
    closed if a large rest is unread or the exchange failed."""
    if ok and not response.closed:
        remaining = getattr(response, "length_remaining", None)
        if remaining is not None and remaining <= _DRAIN:
            response.drain_conn()
        else:
            ok = False
    if not ok:
        response.close()
    release(response.connection)
    response.release_conn()


def encodings(headers: HTTPHeaderDict) -> list[str]:
    """The Content-Encoding of a body, but identity."""
    codings = headers.get("Content-Encoding", "").lower().split(",")
    return [c.strip() for c in codings if c.strip() not in ("", "identity")]


def body_length(headers: HTTPHeaderDict) -> int | None:
    """The body's length in bytes as stored, if the headers say it for sure."""
    if encodings(headers):
        return None
    text = headers.get("Content-Length", "").strip()
    return int(text) if text.isascii() and text.isdigit() else None


def status_text(status: int) -> str:
    try:
        return f"HTTP {status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"HTTP {status}"


def reason(e: BaseException) -> str:
    """A short cause of a network failure, without the URL urllib3 puts in its own."""
    if isinstance(e, Passing):
        return str(e)
    if isinstance(e, NewConnectionError):  # refused, unreachable, unknown name
        cause = e.__cause__ or e.__context__
        if isinstance(cause, OSError) and cause.strerror:
            return f"cannot connect: {cause.strerror.lower()}"
        return "cannot connect"
    if isinstance(e, HTTPTimeoutError):
        return "timed out"
    if isinstance(e, SSLError):
        detail = getattr(e.args[0] if e.args else None, "verify_message", None)
        return f"TLS failure: {detail}" if detail else "TLS failure"
    if isinstance(e, ProtocolError):
        cause = e.args[1] if len(e.args) > 1 else None
        if isinstance(cause, http.client.IncompleteRead):
            return "connection cut mid-response"
        if isinstance(cause, http.client.RemoteDisconnected):
            return "connection closed without an answer"
        if isinstance(cause, ConnectionResetError):
            return "connection reset"
        if isinstance(cause, http.client.LineTooLong):
            return "malformed answer: a header line too long"
        if isinstance(cause, http.client.HTTPException) and "headers" in str(cause):
            return f"malformed answer: {cause}"  # "got more than 100 headers", ...
        return "connection broken"
    return type(e).__name__


# -- redirects --------------------------------------------------------------------------


class Refused(Exception):
    """A redirect that is not followed; the message says where to and why."""


def shown(url: str) -> str:
    """The URL as messages show it: no user info, query string or fragment."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def origin(parts: urllib.parse.SplitResult) -> tuple[str, str, int]:
    """Scheme, host and port: what credentials are sent to."""
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or ""), parts.port or (443 if scheme == "https" else 80)


def redirect_target(url: str, status: int, location: str | None) -> str:
    """Where the redirect ``status`` of ``url`` to ``location`` leads, if it may be
    followed (else ``Refused``): to http or https only, never from https down to
    http, and to any host or port (a CDN, a signed URL: the store sends its
    credentials to their own origin alone); user info in the Location is dropped."""
    if not location or not location.strip():
        raise Refused(f"{status_text(status)} without a Location")
    target = urllib.parse.urlsplit(urllib.parse.urljoin(url, location.strip()))
    scheme = target.scheme.lower()
    where = shown(urllib.parse.urlunsplit(target))
    if scheme not in ("http", "https"):
        raise Refused(f"redirect to {where} refused: only http and https")
    if scheme == "http" and urllib.parse.urlsplit(url).scheme.lower() == "https":
        raise Refused(f"redirect to {where} refused: from https down to http")
    try:
        port_ok = target.port is None or target.port > 0
    except ValueError:
        port_ok = False
    if not target.hostname or not port_ok:
        raise Refused(f"redirect to {where} refused: not a URL")
    netloc = target.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((scheme, netloc, target.path or "/", target.query, ""))
