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
"""

from __future__ import annotations

import contextlib
import email.errors
import http.client
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from urllib3 import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.connection import HTTPConnection, HTTPSConnection


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
    _local.exchange = exchange
    WATCHDOG.start(exchange)
    try:
        yield exchange
    finally:
        WATCHDOG.finish(exchange)
        _local.exchange = None


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


class _Connection(HTTPConnection):
    response_class = _CheckedResponse

    def connect(self) -> None:
        _take_part(self)
        super().connect()

    def request(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        _take_part(self)
        super().request(*args, **kwargs)


class _TLSConnection(HTTPSConnection):
    response_class = _CheckedResponse

    def connect(self) -> None:
        _take_part(self)
        super().connect()

    def request(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        _take_part(self)
        super().request(*args, **kwargs)


class _Pool(HTTPConnectionPool):
    ConnectionCls = _Connection


class _TLSPool(HTTPSConnectionPool):
    ConnectionCls = _TLSConnection


POOL_CLASSES = {"http": _Pool, "https": _TLSPool}
