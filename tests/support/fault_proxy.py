"""A TCP proxy on 127.0.0.1 that tests put in front of a server they started (the
HTTP server of tests/support/http_server.py, a moto S3 server) to inject network faults.

Faults are set at run time, from the test's thread, and apply to what passes next:

- ``delay``: seconds waited before forwarding each request (HTTP-aware mode) or
  each piece of data the client sends (plain TCP mode, where one small request is
  one piece);
- ``cut(after, times)``: the next ``times`` responses (``None``: every one) are cut
  after ``after`` bytes by resetting both connections (RST), as a dropped network
  path or a crashed server does; in plain TCP mode bytes are counted per connection
  from the moment of arming, in HTTP-aware mode per response;
- ``fail(count, status)`` (HTTP-aware mode only): the next ``count`` requests are
  answered with ``status`` (503) by the proxy itself, never reaching the server;
- ``flip(match, times, at)`` (HTTP-aware mode only): in the answers to the next
  ``times`` GET requests whose target contains ``match`` (``None``: every one),
  byte ``at`` of the body is inverted, as a corrupting middlebox does: status,
  headers and length as the server sent them;
- ``passthrough()``: no faults.

In HTTP-aware mode the heads of the last ``HEADS`` requests are kept in ``heads``.

HTTP-aware mode (``http=True``) finds request boundaries (head, Content-Length
body); a chunked request body makes it plain TCP for the rest of that connection.
Every loop ends: the listener polls a stop flag, each socket has a timeout, and
``stop()`` (the fixture's teardown) shuts every socket down.

    with FaultProxy(("127.0.0.1", server.port), http=True) as proxy:
        store = HttpStore(proxy.url)
        proxy.fail(2)
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Iterator
from http import HTTPStatus
from types import TracebackType

import pytest

IDLE = 30.0  # seconds a proxied socket may wait for data before the proxy gives up
_HEAD_LIMIT = 64 << 10  # a request head longer than this ends HTTP parsing
HEADS = 1000  # request heads kept (HTTP-aware mode)


class _Link:
    """One proxied connection: the client's socket and the server's."""

    def __init__(self, client: socket.socket, server: socket.socket, generation: int) -> None:
        self.client = client
        self.server = server
        self.sent = 0  # response bytes since the last request or arming
        self.generation = generation
        self.dead = False
        self.flip: _Flip | None = None  # the answer on its way is to be corrupted


class _Flip:
    """Inverts byte ``at`` of the body of the answer passing next: its head is
    found first (the end of the header block), across pieces of any size."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.tail = b""  # the last bytes of the head seen, for a terminator split in two
        self.body: int | None = None  # body bytes passed so far; None in the head

    def apply(self, data: bytes) -> tuple[bytes, bool]:
        """``data`` with the byte inverted if it holds it, and whether it did."""
        start = 0
        if self.body is None:
            seen = self.tail + data
            end = seen.find(b"\r\n\r\n")
            if end < 0:
                self.tail = seen[-3:]
                return data, False
            start, self.body = end + 4 - len(self.tail), 0
        position = start + self.at - self.body
        if position >= len(data):
            self.body += len(data) - start
            return data, False
        changed = bytearray(data)
        changed[position] ^= 0xFF
        return bytes(changed), True


class FaultProxy:
    def __init__(self, upstream: tuple[str, int], *, http: bool = False) -> None:
        self.upstream = upstream
        self.http = http
        self.delay = 0.0
        self.connections = 0  # accepted so far
        self.requests = 0  # seen so far (HTTP-aware mode)
        self.request_lines: list[str] = []  # of those requests ("GET /b/k HTTP/1.1")
        self.cuts = 0  # done so far
        self.failures = 0  # answered by the proxy so far
        self.flips = 0  # bytes inverted so far
        self.heads: deque[bytes] = deque(maxlen=HEADS)  # the last requests' heads
        self._cut_after = 0
        self._cut_times: int | None = 0
        self._fail_left = 0
        self._fail_status = 503
        self._flip_match = ""
        self._flip_left: int | None = 0
        self._flip_at = 0
        self._generation = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)  # the accept loop looks at the stop flag this often
        self.port: int = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/"
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    # -- faults, set by tests ---------------------------------------------------------

    def cut(self, after: int, times: int | None = 1) -> None:
        with self._lock:
            self._cut_after, self._cut_times = after, times
            self._generation += 1

    def fail(self, count: int, status: int = 503) -> None:
        if not self.http:
            raise ValueError("status injection needs FaultProxy(..., http=True)")
        with self._lock:
            self._fail_left, self._fail_status = count, status

    def flip(self, match: str, times: int | None = None, at: int = 0) -> None:
        if not self.http:
            raise ValueError("flipping bytes of bodies needs FaultProxy(..., http=True)")
        with self._lock:
            self._flip_match, self._flip_left, self._flip_at = match, times, at

    def passthrough(self) -> None:
        with self._lock:
            self.delay, self._cut_times, self._fail_left = 0.0, 0, 0
            self._flip_left = 0

    # -- lifetime ---------------------------------------------------------------------

    def stop(self) -> None:
        self._stopping.set()
        self._listener.close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            _close(sock, reset=False)
        self._acceptor.join(5)
        for thread in list(self._threads):
            thread.join(5)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- forwarding -------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # the listener was closed: stopping
            with self._lock:
                self.connections += 1
            thread = threading.Thread(target=self._serve, args=(client,), daemon=True)
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
            thread.start()

    def _serve(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self.upstream, timeout=IDLE)
        except OSError:
            _close(client, reset=True)
            return
        client.settimeout(IDLE)
        for sock in (client, server):
            # Without it Nagle holds a response's second piece for the client's
            # delayed ACK: 40 ms added to every request, which no delay asked for.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._sockets.update((client, server))
            link = _Link(client, server, self._generation)
        down = threading.Thread(target=self._down, args=(link,), daemon=True)
        down.start()
        try:
            if self.http:
                self._up_http(link)
            else:
                self._up_raw(link, b"")
        except OSError:
            pass
        finally:
            # The client is done: so is the server once it sees that, which ends _down.
            with contextlib.suppress(OSError):
                link.server.shutdown(socket.SHUT_WR)
            down.join(IDLE)
            self._end(link, reset=link.dead)

    def _up_raw(self, link: _Link, pending: bytes) -> None:
        """Client to server, as it comes."""
        data = pending
        while True:
            if data:
                self._wait()
                link.server.sendall(data)
            data = link.client.recv(1 << 16)
            if not data:
                return

    def _up_http(self, link: _Link) -> None:
        """Client to server one request at a time, each first judged by the faults."""
        buffer = b""
        while True:
            while b"\r\n\r\n" not in buffer:
                if len(buffer) > _HEAD_LIMIT:
                    return self._up_raw(link, buffer)
                data = link.client.recv(1 << 16)
                if not data:
                    return None
                buffer += data
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            head += b"\r\n\r\n"
            fields = _fields(head)
            length = fields.get("content-length", "0")
            if "chunked" in fields.get("transfer-encoding", "") or not length.isdigit():
                return self._up_raw(link, head + buffer)  # no boundary to find
            with self._lock:
                self.requests += 1
                self.request_lines.append(head.partition(b"\r\n")[0].decode("latin-1"))
                self.heads.append(head)
                link.sent = 0  # a cut counts the bytes of this request's response
                failing = self._fail_left > 0
                if failing:
                    self._fail_left -= 1
                    self.failures += 1
                else:
                    # Set before the request goes on: its answer cannot come earlier,
                    # and the client read the previous answer whole before asking.
                    link.flip = _Flip(self._flip_at) if self._flips_answer_to(head) else None
            self._wait()
            if failing:
                # The body is read (unless the client waits for "100 Continue") so
                # that closing leaves nothing unread, which would turn into a reset.
                if "100-continue" not in fields.get("expect", "").lower():
                    self._pass_body(link, buffer, int(length), None)
                self._answer(link, self._fail_status)
                return None
            # The head goes on at once: a client may wait for "100 Continue" first.
            link.server.sendall(head)
            buffer = self._pass_body(link, buffer, int(length), link.server)

    def _flips_answer_to(self, head: bytes) -> bool:
        """Whether the answer to this request head is to be corrupted (and counted)."""
        armed = self._flip_left is None or self._flip_left > 0
        method, _, rest = head.partition(b" ")
        target = rest.partition(b" ")[0].decode("latin-1")
        if not armed or method != b"GET" or self._flip_match not in target:
            return False
        if self._flip_left is not None:
            self._flip_left -= 1
        return True

    def _pass_body(
        self, link: _Link, buffer: bytes, length: int, to: socket.socket | None
    ) -> bytes:
        """Send a body of ``length`` bytes (``buffer`` its start) on ``to`` (or drop
        it) as it comes; returns what the client sent after it."""
        while True:
            piece, buffer = buffer[:length], buffer[length:]
            if to is not None and piece:
                to.sendall(piece)
            length -= len(piece)
            if length == 0:
                return buffer
            buffer = link.client.recv(1 << 16)
            if not buffer:
                return b""

    def _down(self, link: _Link) -> None:
        """Server to client, cut where a fault says."""
        try:
            while True:
                data = link.server.recv(1 << 16)
                if not data:
                    with contextlib.suppress(OSError):
                        link.client.shutdown(socket.SHUT_WR)
                    return
                with self._lock:
                    if link.flip is not None:
                        data, flipped = link.flip.apply(data)
                        if flipped:
                            link.flip = None
                            self.flips += 1
                    if link.generation != self._generation:
                        link.generation, link.sent = self._generation, 0
                    armed = self._cut_times is None or self._cut_times > 0
                    cut = armed and link.sent + len(data) > self._cut_after
                    if cut:
                        data = data[: max(self._cut_after - link.sent, 0)]
                        self.cuts += 1
                        if self._cut_times is not None:
                            self._cut_times -= 1
                    link.sent += len(data)
                link.client.sendall(data)
                if cut:
                    link.dead = True
                    self._end(link, reset=True)  # wakes _up_http/_up_raw too
                    return
        except OSError:
            pass  # either side went away: _serve closes both

    def _answer(self, link: _Link, status: int) -> None:
        phrase = HTTPStatus(status).phrase
        body = f"{status} {phrase} (injected by the test's fault proxy)\n".encode()
        link.client.sendall(
            f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        link.client.shutdown(socket.SHUT_WR)

    def _wait(self) -> None:
        if self.delay > 0:
            time.sleep(self.delay)

    def _end(self, link: _Link, *, reset: bool) -> None:
        for sock in (link.client, link.server):
            _close(sock, reset=reset)
            with self._lock:
                self._sockets.discard(sock)


def _fields(head: bytes) -> dict[str, str]:
    """Header fields of a request head (names lowercased; the request line skipped)."""
    fields = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.decode("latin-1").partition(":")
        fields[name.strip().lower()] = value.strip()
    return fields


def _close(sock: socket.socket, *, reset: bool) -> None:
    with contextlib.suppress(OSError):
        if reset:
            # Linger 0: close sends RST, as a dropped path or crashed server shows;
            # SHUT_RD sends nothing but wakes a thread blocked reading the socket.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.shutdown(socket.SHUT_RD)
        else:
            sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


@pytest.fixture(name="fault_proxy")  # named apart: see tests/support/http_server.py
def fault_proxy_fixture() -> Iterator[type[FaultProxy]]:
    """A factory of proxies (``fault_proxy((host, port), http=True)``), each stopped
    at the test's end."""
    started: list[FaultProxy] = []

    class Tracked(FaultProxy):
        def __init__(self, upstream: tuple[str, int], *, http: bool = False) -> None:
            super().__init__(upstream, http=http)
            started.append(self)

    yield Tracked
    for proxy in started:
        proxy.stop()
