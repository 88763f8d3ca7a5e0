"""A read-only store of a Zarr hierarchy served over HTTP(S): key "a/0.0" is the URL
``<root>/a/0.0`` (with the root URL's query string, which may carry a token).

HTTP cannot list a directory: only the root's documents and, through consolidated
metadata, the rest of the hierarchy can be found (``listable = False``).

The client is urllib3 (a thread-safe pool of kept-alive connections, no threads of
its own, so a fork before first use is harmless). Every status, range and body is
judged here rather than in the client: a server that ignores Range answers 200 and
the whole value, of which only the asked-for window is kept (in bounded memory);
404/410 are missing values, 401/403 EACCES, everything else EIO once passing
failures (5xx, 429, reset or cut connections, timeouts) have been retried within a
bounded time. Messages name the URL without its query string or user info.
"""

from __future__ import annotations

import base64
import email.utils
import errno
import http.client
import random
import re
import time
import urllib.parse
from collections.abc import Callable, Iterator
from datetime import timezone
from http import HTTPStatus
from typing import NoReturn, TypeVar

import urllib3
from urllib3.exceptions import (
    HTTPError,
    MaxRetryError,
    NewConnectionError,
    ProtocolError,
    ResponseError,
    SSLError,
)
from urllib3.exceptions import TimeoutError as HTTPTimeoutError

from zarrfs import __version__
from zarrfs.errors import InvalidValueError, StoreError
from zarrfs.stores.base import Listing, WriteRefusingStore, check_ranges, resolve_range

T = TypeVar("T")

TRIES = 5  # of one request, the first included
RETRY_BUDGET = 10.0  # seconds from the first try after which no other starts
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 15.0  # of silence while waiting for the server, not of a whole body
CONNECTIONS = 16  # kept alive per host: the fetch pool of a remote store is this wide
_BACKOFF = (0.2, 3.0)  # first and longest pause between tries, before jitter
_CHUNK = 1 << 20  # bodies of unknown length are read this much at a time
_DRAIN = 64 << 10  # an unread rest up to this is read to keep the connection alive
_MISSING = (HTTPStatus.NOT_FOUND, HTTPStatus.GONE)
_DENIED = (HTTPStatus.UNAUTHORIZED, HTTPStatus.FORBIDDEN)
_PASSING = (408, 425, 429, 500, 502, 503, 504)
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


class _Passing(Exception):
    """A failure worth another try (a status; network errors are urllib3's own)."""


_RETRIED = (_Passing, ProtocolError, HTTPTimeoutError)  # NewConnectionError is a timeout


class HttpStore(WriteRefusingStore):
    read_only = True
    remote = True
    listable = False
    connections = CONNECTIONS

    def __init__(
        self,
        url: str,
        *,
        tries: int = TRIES,
        retry_budget: float = RETRY_BUDGET,
        timeout: tuple[float, float] = (CONNECT_TIMEOUT, READ_TIMEOUT),
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        netloc = parts.netloc.rpartition("@")[2]
        self._shown = f"{parts.scheme}://{netloc}{parts.path}"
        try:
            port_ok = parts.port is None or parts.port > 0
        except ValueError:
            port_ok = False
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname or not port_ok:
            raise StoreError(f"{self._shown!r} is not an http:// or https:// URL", errno.EINVAL)
        # Keys are appended to the root as a directory, whether or not it ended in "/".
        self._base = f"{parts.scheme}://{netloc}{parts.path.rstrip('/')}/"
        self._query = f"?{parts.query}" if parts.query else ""
        headers = {
            # Ranges are of the bytes as stored: no compression on the way.
            "Accept-Encoding": "identity",
            "User-Agent": f"zarrfs/{__version__}",
        }
        if parts.username is not None:
            user = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password or "")
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        self._headers = headers
        self._tries = max(1, tries)
        self._budget = retry_budget
        self._timeout = timeout
        # total=False: errors come back at once for the loop below to judge; only
        # redirects are followed by urllib3 (it drops Authorization across hosts).
        self._retries = urllib3.Retry(total=False, redirect=5)
        self._pool = urllib3.PoolManager(
            num_pools=4, maxsize=CONNECTIONS, headers=headers, retries=self._retries
        )

    def describe(self) -> str:
        return self._shown

    def close(self) -> None:
        self._pool.clear()

    def check(self) -> None:
        """Raise StoreError (one line) if no HTTP server answers at the root URL; any
        answer, even 403 or 404 (a bucket that lists nothing), is one. No retries:
        at mount time a wrong URL should fail at once."""
        try:
            response = self._pool.request(
                "HEAD", self._base + self._query, timeout=self._try_timeout(self._budget)
            )
        except HTTPError as e:
            raise StoreError(f"cannot reach {self._shown}: {_reason(e)}") from None
        response.release_conn()

    # -- requests ----------------------------------------------------------------------

    def _url(self, key: str) -> str | None:
        """The URL of ``key``; None for the root (a prefix, never a value)."""
        parts = [p for p in key.split("/") if p]
        # The server would resolve "." and ".." away from the key asked for.
        if "." in parts or ".." in parts or "\0" in key:
            raise StoreError(f"invalid key {key!r}", errno.EINVAL)
        if not parts:
            return None
        path = "/".join(urllib.parse.quote(p, safe="") for p in parts)
        return self._base + path + self._query

    def _try_timeout(self, remaining: float) -> urllib3.Timeout:
        # A late try gets what is left of the budget (but a second at least).
        left = max(remaining, 1.0)
        return urllib3.Timeout(
            connect=min(self._timeout[0], left), read=min(self._timeout[1], left)
        )

    def _request(
        self,
        key: str,
        method: str,
        read: Callable[[urllib3.BaseHTTPResponse], T],
        headers: dict[str, str] | None = None,
    ) -> T | None:
        """``read(response)`` of the key's answer, tried again while failures pass,
        None for a missing key (or the root). ``read`` sees only statuses it must
        judge (not 404, 401, 403 or a passing one) and may raise ``_Passing``."""
        url = self._url(key)
        if url is None:
            return None
        action = "reading" if method == "GET" else "looking up"
        deadline = time.monotonic() + self._budget
        failure = ""
        for attempt in range(1, self._tries + 1):
            try:
                response = self._pool.request(
                    method,
                    url,
                    # Given headers replace the pool's defaults: both are sent.
                    headers={**self._headers, **(headers or {})},
                    preload_content=False,
                    timeout=self._try_timeout(deadline - time.monotonic()),
                )
                ok = False
                try:
                    status = response.status
                    if status in _MISSING:
                        result = None
                    elif status in _DENIED:
                        raise StoreError(
                            f"{action} {key!r} at {self._shown}: {_status(status)}", errno.EACCES
                        )
                    elif status in _PASSING:
                        raise _Passing(_status(status))
                    else:
                        result = read(response)
                    ok = True
                    return result
                finally:
                    _finish(response, ok)
            except _RETRIED as e:
                failure = _reason(e)
            except MaxRetryError as e:  # only redirects count as retries in urllib3
                self._fail(action, key, _reason(e))
            except HTTPError as e:
                self._fail(action, key, _reason(e))
            # Exponential backoff with full jitter, so that the many fetches of one
            # read that failed together do not come back together.
            pause = random.uniform(0, min(_BACKOFF[1], _BACKOFF[0] * 2 ** (attempt - 1)))
            if attempt == self._tries or time.monotonic() + pause >= deadline:
                break
            time.sleep(pause)
        self._fail(action, key, f"{failure} ({attempt} tries)")

    def _fail(self, action: str, key: str, reason: str) -> NoReturn:
        # from None: urllib3's own messages carry the URL with its query string.
        raise StoreError(f"{action} {key!r} at {self._shown}: {reason}") from None

    def _unexpected(self, key: str, response: urllib3.BaseHTTPResponse, what: str) -> NoReturn:
        self._fail("reading", key, f"{what} ({_status(response.status)})")

    def _head(self, key: str) -> urllib3.HTTPHeaderDict | None:
        def read(response: urllib3.BaseHTTPResponse) -> urllib3.HTTPHeaderDict:
            if response.status != HTTPStatus.OK:
                self._unexpected(key, response, "unexpected answer to HEAD")
            return response.headers

        return self._request(key, "HEAD", read)

    # -- reading -----------------------------------------------------------------------

    def get(self, key: str, *, limit: int | None = None) -> bytes | None:
        def read(response: urllib3.BaseHTTPResponse) -> bytes:
            if response.status != HTTPStatus.OK:
                self._unexpected(key, response, "unexpected answer")
            size = _length(response.headers)
            if limit is not None and size is not None and size > limit:
                # Refused from the header alone: the body is never read.
                raise InvalidValueError(f"reading {key!r}: {size} bytes, more than {limit}")
            if size is not None:
                return response.read(size)  # one buffer; a short body raises ProtocolError
            data = b"".join(_chunks(response, limit + 1 if limit is not None else None))
            if limit is not None and len(data) > limit:
                raise InvalidValueError(f"reading {key!r}: more than {limit} bytes")
            return data

        return self._request(key, "GET", read)

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        check_ranges([(start, length)])
        return self._range(key, start, length)

    def get_ranges(self, key: str, ranges: list[tuple[int, int]]) -> list[bytes] | None:
        # One request per range: the generic version would read the whole value.
        check_ranges(ranges)
        out = []
        for start, length in ranges:
            data = self._range(key, start, length)
            if data is None:
                return None
            out.append(data)
        return out

    def _range(self, key: str, start: int, length: int) -> bytes | None:
        if length == 0:
            return None if self._head(key) is None else b""
        if start < 0 and length < -start:
            # A window that ends before the value does: no Range header says that
            # without the size, so the size first.
            size = self.size(key)
            if size is None:
                return None
            start, length = resolve_range(start, length, size)
            if length == 0:
                return b""
        # A negative start is a suffix range: the last -start bytes, all wanted.
        header = f"bytes={start}-{start + length - 1}" if start >= 0 else f"bytes={start}"

        def read(response: urllib3.BaseHTTPResponse) -> bytes:
            if response.status == HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE:
                return b""  # the value exists; the window lies past its end
            if response.status == HTTPStatus.PARTIAL_CONTENT:
                return self._partial(key, response, start, length)
            if response.status == HTTPStatus.OK:
                return _window(response, start, length)
            self._unexpected(key, response, "unexpected answer to a range request")

        return self._request(key, "GET", read, {"Range": header})

    def _partial(
        self, key: str, response: urllib3.BaseHTTPResponse, start: int, length: int
    ) -> bytes:
        """The body of a 206 answer to the range ``start``/``length`` (a suffix range
        when ``start`` < 0), checked to be that range."""
        match = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", "").strip())
        if match is None or response.headers.get("Content-Encoding", "identity") != "identity":
            self._unexpected(key, response, "a partial answer without a plain single range")
        first, last = int(match.group(1)), int(match.group(2))
        total = None if match.group(3) == "*" else int(match.group(3))
        count = last - first + 1
        if start >= 0:
            right = first == start and 0 < count <= length
            whole = None if total is None else min(length, total - start)
        else:
            right = 0 < count <= -start and (total is None or last == total - 1)
            whole = None if total is None else min(-start, total)
        # A shorter range than there is to send would be a silently short read.
        if not right or (whole is not None and count != whole):
            self._unexpected(key, response, f"range {first}-{last} is not the one asked for")
        size = _length(response.headers)
        if size is not None and size != count:
            self._unexpected(key, response, f"{size} bytes for a range of {count}")
        data = response.read(count)  # at most what was asked for, in one buffer
        if len(data) != count:
            raise _Passing(f"{len(data)} of {count} bytes before the connection ended")
        return data

    def size(self, key: str) -> int | None:
        headers = self._head(key)
        if headers is None:
            return None
        size = _length(headers)
        if size is not None:
            return size

        # No length in the HEAD answer (a dynamic server): a range of one byte tells
        # it in Content-Range, or else the body is counted.
        def read(response: urllib3.BaseHTTPResponse) -> int:
            match = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", "").strip())
            if response.status == HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE:
                return 0  # not even a first byte
            if response.status == HTTPStatus.PARTIAL_CONTENT and match and match.group(3) != "*":
                return int(match.group(3))
            if response.status != HTTPStatus.OK:
                self._unexpected(key, response, "no size in the answer")
            size = _length(response.headers)
            return sum(map(len, _chunks(response, None))) if size is None else size

        return self._request(key, "GET", read, {"Range": "bytes=0-0"})

    def contains(self, key: str) -> bool:
        return self._head(key) is not None

    def mtime(self, key: str) -> float | None:
        headers = self._head(key)
        stamp = None if headers is None else headers.get("Last-Modified")
        if stamp is None:
            return None
        try:
            when = email.utils.parsedate_to_datetime(stamp)
        except (TypeError, ValueError, IndexError):
            return None  # a server's malformed date is no reason to fail a stat
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = when.timestamp()
        return seconds if seconds > 0 else None

    def list_dir(self, prefix: str) -> Listing:
        return Listing((), ())  # HTTP has no listing; ``listable`` says so

    def scan(self, prefix: str) -> Iterator[tuple[str, int]]:
        return iter(())

    # -- writing: refused (WriteRefusingStore) ----------------------------------------

    def refusal(self) -> str:
        return f"{self._shown} is served over HTTP: read-only"


def _window(response: urllib3.BaseHTTPResponse, start: int, length: int) -> bytes:
    """The window ``start``/``length`` (a suffix when ``start`` < 0, wanted whole)
    of a whole value sent by a server that ignored Range: what lies before it is
    read and dropped, what follows is not read at all, so memory stays bounded by
    ``length`` (and a piece)."""
    size = _length(response.headers)
    if start < 0 and size is not None:
        start = max(size + start, 0)
    elif start < 0:
        # A suffix of a body of unknown length: the last -start bytes, kept as it
        # goes by (deleting a bytearray's head moves no memory).
        tail = bytearray()
        for chunk in _chunks(response, None):
            tail += chunk
            del tail[: max(len(tail) + start, 0)]
        return bytes(tail)
    kept = bytearray()
    position = 0
    if size is None or start < size:
        for chunk in _chunks(response, None):
            if position + len(chunk) > start:
                kept += chunk[max(start - position, 0) :]
                if len(kept) >= length:
                    break
            position += len(chunk)
    return bytes(kept[:length])


def _chunks(response: urllib3.BaseHTTPResponse, most: int | None) -> Iterator[bytes]:
    """The body in pieces until its end or ``most`` bytes."""
    left = most
    while left is None or left > 0:
        piece = response.read(_CHUNK if left is None else min(left, _CHUNK))
        if not piece:
            return
        if left is not None:
            left -= len(piece)
        yield piece


def _finish(response: urllib3.BaseHTTPResponse, ok: bool) -> None:
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
    response.release_conn()


def _length(headers: urllib3.HTTPHeaderDict) -> int | None:
    """The body's length in bytes as stored, if the headers say it for sure."""
    if headers.get("Content-Encoding", "identity") != "identity":
        return None
    text = headers.get("Content-Length", "")
    return int(text) if text.isascii() and text.isdigit() else None


def _status(status: int) -> str:
    try:
        return f"HTTP {status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"HTTP {status}"


def _reason(e: BaseException) -> str:
    """A short cause of a network failure, without the URL urllib3 puts in its own."""
    if isinstance(e, _Passing):
        return str(e)
    if isinstance(e, MaxRetryError):
        if e.reason is None or isinstance(e.reason, ResponseError):
            return "too many redirects"
        return _reason(e.reason)
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
        return "connection broken"
    return type(e).__name__
