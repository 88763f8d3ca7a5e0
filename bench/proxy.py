"""A TCP proxy on 127.0.0.1 that holds every HTTP request for ``delay`` seconds before
passing it on: the network latency of a remote object store, added to a local one.

It finds request boundaries from the head and its Content-Length (a chunked body
is passed on as it comes, its connection undelayed from then on), counts the
requests, and copies responses back untouched. ``stop()`` shuts every socket down
and joins every thread it started.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import socket
import threading
import time
from collections.abc import Callable
from email.message import Message

IDLE = 30.0  # seconds a proxied socket may wait for data before the proxy gives up
_PIECE = 1 << 16


class DelayProxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.delay = 0.0  # seconds each request is held, read at each request
        self.requests = 0
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._start(self._accept)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
        self._listener.close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(IDLE)

    def _start(self, target: Callable[..., None], *args: object) -> threading.Thread:
        thread = threading.Thread(target=target, args=args, daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()
        return thread

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # stopped
            self._start(self._serve, client)

    def _serve(self, client: socket.socket) -> None:
        """One connection: requests go up held, responses come down as they are."""
        try:
            server = socket.create_connection(self.upstream, timeout=IDLE)
        except OSError:
            client.close()
            return
        for sock in (client, server):
            sock.settimeout(IDLE)
            # Else Nagle holds a response's last piece for the peer's delayed ACK.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._sockets.update((client, server))
        down = self._start(_copy, server, client)
        try:
            self._up(client, server)
        except OSError:
            pass
        finally:
            # The client is done: so is the server once it sees that, which ends ``down``.
            with contextlib.suppress(OSError):
                server.shutdown(socket.SHUT_WR)
            down.join(IDLE)
            for sock in (client, server):
                sock.close()
                with self._lock:
                    self._sockets.discard(sock)

    def _up(self, client: socket.socket, server: socket.socket) -> None:
        """Client to server, each request held for ``delay`` first."""
        buffer = b""
        while True:
            while b"\r\n\r\n" not in buffer:
                piece = client.recv(_PIECE)
                if not piece:
                    return
                buffer += piece
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            fields = _fields(head)
            with self._lock:
                self.requests += 1
            if self.delay > 0:
                time.sleep(self.delay)
            server.sendall(head + b"\r\n\r\n")
            if "chunked" in fields.get("transfer-encoding", "").lower():
                server.sendall(buffer)  # no boundary to find: the rest as it comes
                return _copy(client, server)
            length = int(fields.get("content-length") or 0)
            while len(buffer) < length:
                server.sendall(buffer)
                length -= len(buffer)
                buffer = client.recv(_PIECE)
                if not buffer:
                    return
            server.sendall(buffer[:length])
            buffer = buffer[length:]


def _copy(source: socket.socket, sink: socket.socket) -> None:
    """Everything from ``source`` to ``sink`` as it comes, then end ``sink``'s sending."""
    with contextlib.suppress(OSError):
        while piece := source.recv(_PIECE):
            sink.sendall(piece)
        sink.shutdown(socket.SHUT_WR)


def _fields(head: bytes) -> Message:
    """A request head's header fields (looked up by name in any case)."""
    return http.client.parse_headers(io.BytesIO(head.partition(b"\r\n")[2] + b"\r\n\r\n"))
