"""A static HTTP server for tests: serves a directory on 127.0.0.1 with Range support.

Python's ``SimpleHTTPRequestHandler`` ignores Range; the subclass here answers a
single range ("bytes=a-b", open-ended "bytes=a-", suffix "bytes=-n") with 206 and
Content-Range, 416 when unsatisfiable, and counts every body byte it sends so a test
can prove that a ranged read fetched only its range. Directories are 404 (as an
object store or a web server without autoindex answers), never a listing.

    from tests.support.http_server import HttpServer  # the fixture is registered for every test

    def test_x(http_server: HttpServer) -> None:
        (http_server.root / "a").write_bytes(b"...")
        HttpStore(http_server.url)

``serve(root)`` starts one more (e.g. with ``ignore_range=True``); each stops at
the end of its ``with`` block or fixture.

Hostile servers: ``hostile[path prefix] = mode`` makes every answer under that
prefix misbehave as ``MODES`` says, and ``redirects[path] = location`` answers
``redirect_status`` (302) with that Location.
"""

from __future__ import annotations

import contextlib
import email.utils
import functools
import gzip
import io
import os
import re
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from zarrfs.stores.http import HttpStore

_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
_PIECE = 64 << 10  # bodies are written this much at a time, each piece counted

# What a hostile path does (``HttpServer.hostile``); Range is honoured where not said.
MODES = {
    "endless": "200 and an endless chunked body of zeros, whatever the Range",
    "trickle": "the right answer, its body one byte every ``trickle`` seconds",
    "trickle_headers": "a status line, then a header one byte every ``trickle`` seconds",
    "short_length": "a Content-Length ``length_error`` bytes short of the body sent",
    "long_length": "a Content-Length ``length_error`` bytes past the body, then close",
    "long_length_stall": "a Content-Length past the body, then silence, connection open",
    "gzip_bomb": "200, Content-Encoding gzip, 4 MiB that inflate to 4 GiB, whatever the Range",
    "huge_headers": "200 with 200 header fields of 1 KiB",
    "huge_header_line": "200 with one header field of 128 KiB",
}
_OWN_ANSWERS = ("endless", "trickle_headers", "gzip_bomb")


@functools.cache
def gzip_bomb() -> bytes:
    """Gzip members back to back (one stream to a decoder): 4 GiB of zeros."""
    return gzip.compress(bytes(16 << 20), 9) * 256


@dataclass
class Request:
    method: str
    path: str  # with its query string
    range: str | None
    authorization: str | None = None
    status: int = 0
    # Body bytes handed to the socket (counted before each write, taken back if it
    # fails); final once ``done`` is set.
    body_bytes: int = 0
    done: threading.Event = field(default_factory=threading.Event)


@dataclass
class HttpServer:
    root: Path
    url: str  # "http://127.0.0.1:PORT/" (the root directory)
    port: int
    httpd: _Server
    # A test may flip these at run time. ignore_range: answer 200 and the whole body
    # to any Range; send_length=False: no Content-Length, the body ends with the
    # connection; statuses: answer this status to these paths (query left out).
    ignore_range: bool = False
    send_length: bool = True
    # etags: an ETag of the file's mtime, size and inode; If-None-Match naming it is 304.
    etags: bool = True
    statuses: dict[str, int] = field(default_factory=dict)
    # hostile: path prefix -> a mode of MODES (the longest prefix wins); redirects:
    # path (query left out) -> Location, answered with redirect_status.
    hostile: dict[str, str] = field(default_factory=dict)
    redirects: dict[str, str] = field(default_factory=dict)
    redirect_status: int = 302
    # fields: path (query left out) -> header fields added to each answer of its file
    fields: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    trickle: float = 0.2  # seconds between the bytes of a trickling answer
    length_error: int = 16  # bytes a lying Content-Length is off by
    requests: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)

    def mode(self, path: str) -> str | None:
        found = [prefix for prefix in self.hostile if path.startswith(prefix)]
        return self.hostile[max(found, key=len)] if found else None

    @property
    def bytes_served(self) -> int:
        with self.lock:
            return sum(r.body_bytes for r in self.requests)

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()

    def gets(self) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if r.method == "GET"]

    def settled(self, timeout: float = 5.0) -> list[Request]:
        """Every request so far, once each is answered (a handler may still be
        writing a body the client stopped reading)."""
        with self.lock:
            requests = list(self.requests)
        for request in requests:
            assert request.done.wait(timeout), f"{request} not answered in {timeout}s"
        return requests


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a kept-alive connection must not hold up shutdown
    state: HttpServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (or a fault proxy's cut) resets its connection:
        # expected here, not worth socketserver's traceback on stderr.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class RangeHandler(SimpleHTTPRequestHandler):
    # Keep-alive: the store's connection pool really reuses connections.
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # a body written after its head is sent at once
    server: _Server

    def __init__(self, *args: Any, directory: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, directory=directory, **kwargs)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: pytest shows stderr of failing tests only, and this is noise

    def handle_one_request(self) -> None:
        self._request: Request | None = None
        try:
            super().handle_one_request()
        finally:
            if self._request is not None:
                self._request.done.set()  # answered, body and all (or given up)

    def _current(self) -> Request:
        """This request's record, made when its answer is first decided: before any
        of it is sent, so a test never finds its answer ahead of its record."""
        if self._request is None:
            self._request = Request(
                self.command,
                self.path,
                self.headers.get("Range"),
                self.headers.get("Authorization"),
            )
            with self.server.state.lock:
                self.server.state.requests.append(self._request)
        return self._request

    def send_response(self, code: int, message: str | None = None) -> None:
        self._current().status = int(code)
        super().send_response(code, message)

    def send_head(self) -> BinaryIO | None:  # type: ignore[override]
        state = self.server.state
        self._current()
        path = self.path.partition("?")[0]
        status = state.statuses.get(path)
        if status is not None:
            self.send_error(status)
            return None
        location = state.redirects.get(path)
        if location is not None:
            self.send_response(state.redirect_status)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        mode = state.mode(path)
        if mode in _OWN_ANSWERS:
            getattr(self, f"_{mode}")()
            return None
        local = self.translate_path(self.path)
        if not os.path.isfile(local):  # a directory too: no listing, no redirect
            self.send_error(HTTPStatus.NOT_FOUND)
            return None
        with open(local, "rb") as f:
            st = os.fstat(f.fileno())
            size = st.st_size
            etag = f'"{st.st_mtime_ns:x}-{size:x}-{st.st_ino:x}"'
            if state.etags and self.headers.get("If-None-Match") == etag:
                self.send_response(HTTPStatus.NOT_MODIFIED)
                self.send_header("ETag", etag)
                self.end_headers()
                return None
            header = self.headers.get("Range")
            window = None if header is None or state.ignore_range else _parse_range(header, size)
            if window == ():
                self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            first, last = window or (0, size - 1)
            f.seek(first)
            body = io.BytesIO(f.read(last - first + 1))
        self.send_response(HTTPStatus.PARTIAL_CONTENT if window else HTTPStatus.OK)
        self.send_header("Content-Type", "application/octet-stream")
        length = last - first + 1
        if mode == "short_length":
            length = max(length - state.length_error, 0)
        elif mode in ("long_length", "long_length_stall"):
            length += state.length_error
        if mode == "huge_headers":
            for n in range(200):
                self.send_header(f"X-Pad-{n}", "x" * 1024)
        elif mode == "huge_header_line":
            self.send_header("X-Pad", "x" * (128 << 10))
        if state.send_length:
            self.send_header("Content-Length", str(length))
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.send_header("Accept-Ranges", "none" if state.ignore_range else "bytes")
        if window:
            self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
        self.send_header("Last-Modified", email.utils.formatdate(st.st_mtime, usegmt=True))
        if state.etags:
            self.send_header("ETag", etag)
        for name, value in state.fields.get(path, ()):
            self.send_header(name, value)
        self.end_headers()
        return body

    def do_GET(self) -> None:
        body = self.send_head()
        if body is None:
            return
        state = self.server.state
        mode = state.mode(self.path.partition("?")[0])
        size = _PIECE
        if mode == "trickle":
            size = 1
            self.wfile.flush()
        if not self._write(body, size, state.trickle if mode == "trickle" else 0.0):
            return
        if mode == "long_length":
            self.close_connection = True
        elif mode == "long_length_stall":
            self.wfile.flush()
            state.stopping.wait(60)  # the client gives up first
            self.close_connection = True

    def _write(self, body: BinaryIO, size: int, pause: float) -> bool:
        """Send ``body`` ``size`` bytes at a time, ``pause`` seconds apart; False
        once the client is gone (or the server stops)."""
        request = self._current()
        while piece := body.read(size):
            if pause and self.server.state.stopping.wait(pause):
                self.close_connection = True
                return False
            request.body_bytes += len(piece)
            try:
                self.wfile.write(piece)
                if pause:
                    self.wfile.flush()
            except OSError:
                request.body_bytes -= len(piece)
                self.close_connection = True
                return False
        return True

    # -- hostile answers of their own (MODES) -------------------------------------------

    def _endless(self) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.close_connection = True
        if self.command == "HEAD":
            return
        chunk = b"%x\r\n" % _PIECE + bytes(_PIECE) + b"\r\n"
        request = self._current()
        while not self.server.state.stopping.is_set():
            try:
                self.wfile.write(chunk)
            except OSError:
                return
            request.body_bytes += _PIECE

    def _trickle_headers(self) -> None:
        self.send_response_only(HTTPStatus.OK)
        self.flush_headers()
        self.close_connection = True
        stopping = self.server.state.stopping
        line = b"X-Slow: " + b"x" * 1000
        while not stopping.wait(self.server.state.trickle):
            try:
                self.wfile.write(line[:1])
                self.wfile.flush()
            except OSError:
                return
            line = line[1:] + line[:1]

    def _gzip_bomb(self) -> None:
        bomb = gzip_bomb()
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(bomb)))
        self.end_headers()
        if self.command != "HEAD":
            self._write(io.BytesIO(bomb), _PIECE, 0.0)

    def do_HEAD(self) -> None:
        self.send_head()

    def do_PUT(self) -> None:
        """Store the body (Content-Length) as the file: requests with a body, for
        the fault proxy's tests (the store itself never writes)."""
        self._current()
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        target = Path(self.translate_path(self.path))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(body)
        self.send_response(HTTPStatus.CREATED)
        self.send_header("Content-Length", "0")
        self.end_headers()


def _parse_range(header: str, size: int) -> tuple[int, int] | tuple[()] | None:
    """(first, last) byte of a single range, clipped to the value; () when it is
    unsatisfiable (RFC 9110 14.1.2); None for a header to ignore (malformed or
    several ranges: the RFC lets a server send the whole value)."""
    match = _RANGE.fullmatch(header.strip())
    if match is None or match.group(1) == match.group(2) == "":
        return None
    start, end = match.group(1), match.group(2)
    if start == "":  # suffix: the last n bytes
        n = int(end)
        return (size - min(n, size), size - 1) if n and size else ()
    first = int(start)
    last = size - 1 if end == "" else min(int(end), size - 1)
    return (first, last) if first < size and first <= last else ()


@contextlib.contextmanager
def serve(root: Path, *, ignore_range: bool = False) -> Iterator[HttpServer]:
    """Serve ``root`` on 127.0.0.1 (a free port) in a thread until the block ends."""

    def handler(*args: Any) -> RangeHandler:
        return RangeHandler(*args, directory=str(root))

    httpd = _Server(("127.0.0.1", 0), handler)
    port = httpd.server_address[1]
    state = HttpServer(root, f"http://127.0.0.1:{port}/", port, httpd, ignore_range)
    httpd.state = state
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    try:
        yield state
    finally:
        state.stopping.set()  # hostile answers in progress end too
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


# Named apart from the fixture: a test module imports it to register it, and its
# parameter ``http_server`` would otherwise redefine the import (ruff F811).
@pytest.fixture(name="http_server")
def http_server_fixture(tmp_path: Path) -> Iterator[HttpServer]:
    """A server of the new, empty directory ``tmp_path / "www"``."""
    root = tmp_path / "www"
    root.mkdir()
    with serve(root) as server:
        yield server


@pytest.fixture
def other_server(tmp_path: Path) -> Iterator[HttpServer]:
    """A second server, of the new, empty directory ``tmp_path / "other"``."""
    root = tmp_path / "other"
    root.mkdir()
    with serve(root) as server:
        yield server


@pytest.fixture
def http_stores() -> Iterator[list[HttpStore]]:
    """The HttpStores a test makes, closed at its end."""
    made: list[HttpStore] = []
    yield made
    for store in made:
        store.close()
