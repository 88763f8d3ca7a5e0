"""A read-only store of a Zarr hierarchy served over HTTP(S): key "a/0.0" is the URL
``<root>/a/0.0`` (with the root URL's query string, which may carry a token).

HTTP cannot list a directory: only the root's documents and, through consolidated
metadata, the rest of the hierarchy can be found (``listable = False``).

The client is urllib3 (a thread-safe pool of kept-alive connections); the deadlines
of its exchanges are kept by zarrfs/stores/httpwire.py. Every status, range, body
and redirect is judged here rather than in the client, because the server is
hostile input (docs/semantics.md, "HTTP"):

- every request, all its tries and their bodies included, ends within the retry
  budget (10 s), pushed back one second per MiB received (``httpwire.MIN_RATE``),
  so a server that trickles its answer cannot hold a read;
- a server that ignores Range answers 200 and the whole value, of which only the
  asked-for window is kept; it is read up to the window's end and never past
  ``SKIP_LIMIT`` (an endless body is an error);
- a body shorter or longer than its Content-Length, or cut, is a failed try (a
  store error: the next read tries again), never a shorter value;
- a body in a Content-Encoding is refused (the bytes as stored were asked for);
- a whole value whose answer carries a checksum of it (``Content-MD5``,
  ``x-amz-checksum-*``, ``x-goog-hash``, the S3 store's CRC-32C: checksums.py) that
  the body does not match is a failed try; a range is not checked (the checksum
  is of the whole value);
- redirects are followed by the rules of ``httpwire.redirect_target``;
- 404/410 are missing values, 401/403 EACCES, everything else EIO once passing
  failures (5xx, 429, reset or cut connections, timeouts) have been retried.

Messages name URLs without their query strings or user info.
"""

from __future__ import annotations

import base64
import email.utils
import errno
import hashlib
import os
import random
import re
import secrets
import time
import urllib.parse
from collections.abc import Callable, Iterator
from datetime import timezone
from http import HTTPStatus
from typing import NoReturn, TypeVar

import urllib3
from urllib3.exceptions import HTTPError

from zarrfs import __version__
from zarrfs.errors import InvalidValueError, StoreError
from zarrfs.stores import checksums, httpwire
from zarrfs.stores.base import (
    UNCHANGED,
    Fetched,
    Listing,
    Version,
    WriteRefusingStore,
    check_ranges,
    resolve_range,
)
from zarrfs.stores.httpwire import (
    REDIRECTS,
    RETRIED,
    Passing,
    Refused,
    body_length,
    encodings,
    finish,
    origin,
    pieces,
    reason,
    redirect_target,
    shown,
    status_text,
)

T = TypeVar("T")

TRIES = 5  # of one request, the first included
RETRY_BUDGET = 10.0  # seconds from the first try by which every try has ended
BUDGET_VARIABLE = "ZARRFS_HTTP_RETRY_BUDGET"  # seconds, in place of RETRY_BUDGET
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 15.0  # of silence while waiting for the server, within the budget
CONNECTIONS = 16  # kept alive per host: the fetch pool of a remote store is this wide
MAX_REDIRECTS = 5  # followed by one request
SKIP_LIMIT = 256 << 20  # most bytes of a 200 answer to a range request ever read
BODY_LIMIT = 1 << 30  # most bytes of a whole value read for a caller without a limit
_BACKOFF = (0.2, 3.0)  # first and longest pause between tries, before jitter
_MISSING = (HTTPStatus.NOT_FOUND, HTTPStatus.GONE)
_DENIED = (HTTPStatus.UNAUTHORIZED, HTTPStatus.FORBIDDEN)
_PASSING = (408, 425, 429, 500, 502, 503, 504)
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


def _budget() -> float:
    """RETRY_BUDGET, or the environment's (tests shorten it for a daemon)."""
    try:
        value = float(os.environ.get(BUDGET_VARIABLE, ""))
    except ValueError:
        return RETRY_BUDGET
    return value if 0 < value < 3600 else RETRY_BUDGET


def _reason(e: BaseException) -> str:
    """``reason(e)``, naming the server that could not be reached or did not answer in
    time: after a redirect it is not the root URL's."""
    text = reason(e)
    peer = _peer(e)
    if peer and text.startswith("cannot connect"):
        return text.replace("cannot connect", f"cannot connect to {peer}", 1)
    if peer and text == "timed out":
        return f"timed out waiting for {peer}"
    return text


def _peer(e: BaseException) -> str:
    """ "host:port" of the connection (or pool) urllib3's error names, "" if none:
    urllib3 keeps the host apart from user info and query string."""
    conn = getattr(e, "conn", None) or getattr(e, "pool", None)
    if conn is None and e.args and hasattr(e.args[0], "host"):
        conn = e.args[0]  # ConnectTimeoutError(connection, message)
    host, port = getattr(conn, "host", None), getattr(conn, "port", None)
    if not isinstance(host, str) or not host:
        return ""
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{port}" if isinstance(port, int) else host


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
        retry_budget: float | None = None,
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
        self._origin = origin(parts)
        self._headers = {
            # Ranges are of the bytes as stored: no compression on the way.
            "Accept-Encoding": "identity",
            "User-Agent": f"zarrfs/{__version__}",
        }
        # Sent only to the root's own origin (scheme, host, port), never after a
        # redirect elsewhere.
        self._auth: str | None = None
        if parts.username is not None:
            user = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password or "")
            self._auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self._tries = max(1, tries)
        self._budget = _budget() if retry_budget is None else retry_budget
        self._timeout = timeout
        # No retries and no redirects in urllib3: errors and 3xx come back at once
        # for the loops below to judge.
        self._pool = urllib3.PoolManager(num_pools=4, maxsize=CONNECTIONS, retries=False)
        self._pool.pool_classes_by_scheme = httpwire.POOL_CLASSES

    def describe(self) -> str:
        return self._shown

    def close(self) -> None:
        self._pool.clear()

    def check(self) -> None:
        """Raise StoreError (one line) if no HTTP server answers at the root URL; any
        answer, even 403, 404 (a bucket that lists nothing) or a redirect, is one. No
        retries: at mount time a wrong URL should fail at once."""
        exchange = httpwire.Exchange(time.monotonic() + self._budget)
        try:
            with httpwire.watched(exchange):
                response = self._pool.request(
                    "HEAD",
                    self._base + self._query,
                    headers=self._headers_for(self._base),
                    redirect=False,
                    timeout=self._try_timeout(self._budget),
                )
                finish(response, True)
        except HTTPError as e:
            why = "timed out" if exchange.expired else _reason(e)
            raise StoreError(f"cannot reach {self._shown}: {why}") from None
        if exchange.expired:  # an answer cut short by the deadline is none
            raise StoreError(f"cannot reach {self._shown}: timed out")

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

    def _headers_for(self, url: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        headers = {**self._headers, **(extra or {})}
        if self._auth is not None and origin(urllib.parse.urlsplit(url)) == self._origin:
            headers["Authorization"] = self._auth
        return headers

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
        judge (not 404, 401, 403, a redirect or a passing one) and may raise
        ``Passing``. Every try ends by the request's deadline (``RETRY_BUDGET``)."""
        url = self._url(key)
        if url is None:
            return None
        action = "reading" if method == "GET" else "looking up"
        deadline = time.monotonic() + self._budget
        failure = ""
        for attempt in range(1, self._tries + 1):
            # A late try gets a second at least.
            exchange = httpwire.Exchange(max(deadline, time.monotonic() + 1.0))
            try:
                with httpwire.watched(exchange):
                    result = self._try(key, method, url, read, headers, deadline)
                if not exchange.expired:
                    return result
                # What was read may have ended where the watchdog cut it.
                failure = self._late()
            except RETRIED as e:
                failure = self._late() if exchange.expired else _reason(e)
            except HTTPError as e:
                if not exchange.expired:
                    self._fail(action, key, _reason(e))
                failure = self._late()
            # Exponential backoff with full jitter, so that the many fetches of one
            # read that failed together do not come back together.
            pause = random.uniform(0, min(_BACKOFF[1], _BACKOFF[0] * 2 ** (attempt - 1)))
            if attempt == self._tries or time.monotonic() + pause >= deadline:
                break
            time.sleep(pause)
        self._fail(action, key, f"{failure} ({attempt} {'try' if attempt == 1 else 'tries'})")

    def _late(self) -> str:
        return f"timed out: no whole answer within {self._budget:g} s"

    def _try(
        self,
        key: str,
        method: str,
        url: str,
        read: Callable[[urllib3.BaseHTTPResponse], T],
        headers: dict[str, str] | None,
        deadline: float,
    ) -> T | None:
        action = "reading" if method == "GET" else "looking up"
        timeout = self._try_timeout(deadline - time.monotonic())
        response = self._send(key, action, method, url, headers, timeout)
        ok = False
        try:
            status = response.status
            if status in _MISSING:
                result = None
            elif status in _DENIED:
                raise StoreError(
                    f"{action} {key!r} at {self._shown}: {status_text(status)}", errno.EACCES
                )
            elif status in _PASSING:
                raise Passing(status_text(status))
            else:
                if method == "GET":
                    self._refuse_encoding(key, response)
                result = read(response)
                exchange = httpwire.current()
                if exchange is not None and exchange.overrun:
                    raise Passing("a body longer than its Content-Length")
            ok = True
            return result
        finally:
            finish(response, ok)

    def _send(
        self,
        key: str,
        action: str,
        method: str,
        url: str,
        headers: dict[str, str] | None,
        timeout: urllib3.Timeout,
    ) -> urllib3.BaseHTTPResponse:
        """The answer to ``method`` at ``url``, redirects followed."""
        seen = {url}
        for hop in range(MAX_REDIRECTS + 1):
            exchange = httpwire.current()
            if exchange is not None:
                exchange.overrun = False  # of this answer only
            response = self._pool.request(
                method,
                url,
                headers=self._headers_for(url, headers),
                preload_content=False,
                decode_content=False,
                redirect=False,
                timeout=timeout,
            )
            if response.status not in REDIRECTS:
                return response
            location = response.headers.get("Location")
            finish(response, True)
            try:
                target = redirect_target(url, response.status, location)
            except Refused as e:
                self._fail(action, key, str(e))
            if target in seen:
                self._fail(action, key, f"redirect loop (back to {shown(target)})")
            if hop == MAX_REDIRECTS:
                self._fail(action, key, f"more than {MAX_REDIRECTS} redirects")
            seen.add(target)
            url = target
        raise AssertionError("unreachable")

    def _refuse_encoding(self, key: str, response: urllib3.BaseHTTPResponse) -> None:
        """A body in a Content-Encoding (gzip, ...) is not the bytes as stored, and
        might inflate to any size: never decoded, refused."""
        encoded = encodings(response.headers)
        if encoded:
            self._unexpected(key, response, f"a body in Content-Encoding {', '.join(encoded)}")

    def _fail(self, action: str, key: str, reason: str) -> NoReturn:
        # from None: urllib3's own messages carry the URL with its query string.
        raise StoreError(f"{action} {key!r} at {self._shown}: {reason}") from None

    def _unexpected(self, key: str, response: urllib3.BaseHTTPResponse, what: str) -> NoReturn:
        self._fail("reading", key, f"{what} ({status_text(response.status)})")

    def _head(self, key: str) -> urllib3.HTTPHeaderDict | None:
        def read(response: urllib3.BaseHTTPResponse) -> urllib3.HTTPHeaderDict:
            if response.status != HTTPStatus.OK:
                self._unexpected(key, response, "unexpected answer to HEAD")
            return response.headers

        return self._request(key, "HEAD", read)

    # -- reading -----------------------------------------------------------------------

    def get(self, key: str, *, limit: int | None = None) -> bytes | None:
        most = BODY_LIMIT if limit is None else limit
        return self._request(key, "GET", lambda response: self._whole(key, response, most))

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
                return self._window(key, response, start, length)
            self._unexpected(key, response, "unexpected answer to a range request")

        return self._request(key, "GET", read, {"Range": header})

    def _partial(
        self, key: str, response: urllib3.BaseHTTPResponse, start: int, length: int
    ) -> bytes:
        """The body of a 206 answer to the range ``start``/``length`` (a suffix range
        when ``start`` < 0), checked to be that range."""
        match = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", "").strip())
        if match is None:
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
        size = body_length(response.headers)
        if size is not None and size != count:  # one of the two headers lies
            raise Passing(f"a Content-Length of {size} for a range of {count} bytes")
        data = b"".join(pieces(response, count))  # at most what was asked for
        if len(data) != count:
            raise Passing(f"{len(data)} of {count} bytes before the connection ended")
        return data

    def _window(
        self, key: str, response: urllib3.BaseHTTPResponse, start: int, length: int
    ) -> bytes:
        """The window ``start``/``length`` (a suffix when ``start`` < 0, wanted whole)
        of a whole value sent by a server that ignored Range: what lies before it is
        read and dropped, what follows is not read at all, so memory stays bounded by
        ``length`` (and a piece). Nothing past ``SKIP_LIMIT`` bytes is read."""
        size = body_length(response.headers)
        if start < 0 and size is not None:
            start = max(size + start, 0)
        elif start < 0:
            # A suffix of a body of unknown length: the last -start bytes, kept as it
            # goes by (deleting a bytearray's head moves no memory).
            tail = bytearray()
            seen = 0
            for piece in pieces(response, SKIP_LIMIT + 1):
                seen += len(piece)
                tail += piece
                del tail[: max(len(tail) + start, 0)]
            if seen > SKIP_LIMIT:
                self._unexpected(key, response, self._skipping("of unknown length"))
            return bytes(tail)
        if size is not None and start >= size:
            return b""
        end = start + length if size is None else min(start + length, size)
        if end > SKIP_LIMIT:
            self._unexpected(key, response, self._skipping(f"up to byte {end}"))
        kept = bytearray()
        position = 0
        for piece in pieces(response, end):
            if position + len(piece) > start:
                kept += piece[max(start - position, 0) :]
            position += len(piece)
        if size is not None and position != end:
            raise Passing(f"{position} of {size} bytes before the connection ended")
        return bytes(kept)

    @staticmethod
    def _skipping(what: str) -> str:
        return f"Range ignored, and the whole value {what} is more than {SKIP_LIMIT} bytes"

    def size(self, key: str) -> int | None:
        headers = self._head(key)
        if headers is None:
            return None
        size = body_length(headers)
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
            size = body_length(response.headers)
            if size is not None:
                return size
            counted = sum(map(len, pieces(response, SKIP_LIMIT + 1)))
            if counted > SKIP_LIMIT:
                self._unexpected(key, response, self._skipping("of unknown length"))
            return counted

        return self._request(key, "GET", read, {"Range": "bytes=0-0"})

    def contains(self, key: str) -> bool:
        return self._head(key) is not None

    def mtime(self, key: str) -> float | None:
        headers = self._head(key)
        return None if headers is None else _modified(headers)

    def list_dir(self, prefix: str) -> Listing:
        return Listing((), ())  # HTTP has no listing; ``listable`` says so

    def scan(self, prefix: str) -> Iterator[tuple[str, int]]:
        return iter(())

    # -- versions ----------------------------------------------------------------------

    def cache_identity(self) -> str:
        """What names this store in a disk cache: the URL shown, and a digest of its
        query string (which may choose what is served, and may be a secret)."""
        if not self._query:
            return self._shown
        return f"{self._shown}?{hashlib.sha256(self._query.encode()).hexdigest()[:32]}"

    def stat(self, key: str) -> Version | None:
        """One HEAD. An answer with neither ETag nor Last-Modified names no version:
        its tag is one no other read will ever match."""
        headers = self._head(key)
        if headers is None:
            return None
        size = body_length(headers)
        version = _version(headers, size)
        if version is not None:
            return version
        size = self.size(key) if size is None else size
        return Version(f"unversioned:{secrets.token_hex(8)}", None, size)

    def fetch(
        self, key: str, *, limit: int | None = None, unless: Version | None = None
    ) -> Fetched | None:
        """One GET, with If-None-Match when ``unless`` is an ETag: 304 is
        ``UNCHANGED``. Without an ETag the body travels, and the version read is
        compared with ``unless``."""
        most = BODY_LIMIT if limit is None else limit

        def read(response: urllib3.BaseHTTPResponse) -> Fetched:
            if response.status == HTTPStatus.NOT_MODIFIED:
                return UNCHANGED  # type: ignore[no-any-return]
            size = body_length(response.headers)
            return Fetched(self._whole(key, response, most), _version(response.headers, size))

        found = self._request(key, "GET", read, _unless(unless))
        if found is None or found is UNCHANGED:
            return found
        if unless is not None and found.version is not None and found.version == unless:
            return UNCHANGED  # type: ignore[no-any-return]
        return found

    def _whole(self, key: str, response: urllib3.BaseHTTPResponse, most: int) -> bytes:
        """The body of a 200 answer, at most ``most`` bytes (refused from the headers
        where they say more)."""
        if response.status != HTTPStatus.OK:
            self._unexpected(key, response, "unexpected answer")
        size = body_length(response.headers)
        if size is not None and size > most:
            raise InvalidValueError(f"reading {key!r}: {size} bytes, more than {most}")
        data = b"".join(pieces(response, most + 1 if size is None else size))
        if size is not None and len(data) != size:
            raise Passing(f"{len(data)} of {size} bytes before the connection ended")
        if len(data) > most:
            raise InvalidValueError(f"reading {key!r}: more than {most} bytes")
        expected = checksums.from_headers(response.headers.items())
        if expected is not None and not expected.matches(data):
            raise Passing(checksums.mismatch(expected))
        return data

    def fetch_ranges(
        self, key: str, ranges: list[tuple[int, int]], *, unless: Version | None = None
    ) -> tuple[list[bytes], Version | None] | None:
        """One GET per range (If-None-Match on the first, where ``unless`` is an
        ETag); ranges that need the size first take it from a HEAD. Answers of
        different versions (the value replaced meanwhile) are read again."""
        check_ranges(ranges)
        for _ in range(TRIES):
            found = self._versioned_ranges(key, ranges, unless)
            if found is not _CHANGED:
                return found  # type: ignore[no-any-return]
        self._fail("reading", key, "the value kept changing")

    def _versioned_ranges(
        self, key: str, ranges: list[tuple[int, int]], unless: Version | None
    ) -> object:
        plain = [length > 0 and start >= -length for start, length in ranges]
        seen: Version | None = None
        if not all(plain):  # a window that needs the size first
            stated = self.stat(key)
            if stated is None:
                return None
            if unless is not None and stated == unless:
                return UNCHANGED
            seen = stated
        out = []
        for (start, length), simple in zip(ranges, plain, strict=True):
            if not simple:
                assert seen is not None and seen.size is not None
                offset, count = resolve_range(start, length, seen.size)
                start, length = offset, count
                if count == 0:
                    out.append(b"")
                    continue
            found = self._range_version(key, start, length, unless if not out else None)
            if found is None or found is UNCHANGED:
                return found
            data, version = found
            if seen is not None and version != seen:
                return _CHANGED
            seen = version
            out.append(data)
        if unless is not None and seen is not None and seen == unless:
            return UNCHANGED
        return out, seen

    def _range_version(
        self, key: str, start: int, length: int, unless: Version | None
    ) -> tuple[bytes, Version | None] | None:
        """One range (``length`` > 0, a suffix covering what is wanted) and the
        version of the value it was read from."""
        header = f"bytes={start}-{start + length - 1}" if start >= 0 else f"bytes={start}"

        def read(response: urllib3.BaseHTTPResponse) -> tuple[bytes, Version | None]:
            status = response.status
            match = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", "").strip())
            total = None
            if match is not None and match.group(3) != "*":
                total = int(match.group(3))
            if status == HTTPStatus.NOT_MODIFIED:
                return UNCHANGED  # type: ignore[no-any-return]
            if status == HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE:
                return b"", _version(response.headers, total)
            if status == HTTPStatus.PARTIAL_CONTENT:
                data = self._partial(key, response, start, length)
                return data, _version(response.headers, total)
            if status == HTTPStatus.OK:
                version = _version(response.headers, body_length(response.headers))
                return self._window(key, response, start, length), version
            self._unexpected(key, response, "unexpected answer to a range request")

        return self._request(key, "GET", read, {"Range": header, **_unless(unless)})

    # -- writing: refused (WriteRefusingStore) ----------------------------------------

    def refusal(self) -> str:
        return f"{self._shown} is served over HTTP: read-only"


_CHANGED = object()  # ranges of one request came from different versions


def _unless(version: Version | None) -> dict[str, str]:
    """If-None-Match for a version that is an ETag (one made of a date and a size
    is compared after the answer instead)."""
    if version is None or not version.tag.startswith(('"', 'W/"')):
        return {}
    return {"If-None-Match": version.tag}


def _modified(headers: urllib3.HTTPHeaderDict) -> float | None:
    """Last-Modified in seconds; None when absent or malformed (a server's bad date
    is no reason to fail a stat)."""
    stamp = headers.get("Last-Modified")
    if stamp is None:
        return None
    try:
        when = email.utils.parsedate_to_datetime(stamp)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    seconds = when.timestamp()
    return seconds if seconds > 0 else None


def _version(headers: urllib3.HTTPHeaderDict, size: int | None) -> Version | None:
    """The version an answer names: its ETag, else its Last-Modified with the
    value's ``size``; None when it names neither."""
    etag = headers.get("ETag", "").strip()
    modified = _modified(headers)
    if etag and etag.isascii() and len(etag) <= 256:
        return Version(etag, modified, size)
    if modified is not None and size is not None:
        return Version(f"modified:{modified!r}:{size}", modified, size)
    return None
