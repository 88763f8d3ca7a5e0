"""A small, fast S3-compatible server for benchmarks and tests: one local directory
served as one bucket on 127.0.0.1, path-style (http://127.0.0.1:PORT/BUCKET/KEY).

moto serves one request at a time (a lock in its dispatcher) and bounds any client
that reads from it at some 150-200 MiB/s; this server is here so that a benchmark
measures the clients instead. It answers:

- GET /BUCKET/KEY, with a single Range (``bytes=a-b``, ``bytes=a-``, ``bytes=-n``):
  200, or 206 with Content-Range, or 416 InvalidRange for a range that starts at or
  past the end (as S3 and moto do: several ranges, or a range that cannot be parsed,
  get the whole object with 200); HEAD alike, without the body; If-Match on a GET
  (412 for another version), then If-None-Match (304 for the current one);
- PUT /BUCKET/KEY (a Content-Length body, no multipart upload), with S3's
  conditional writes: ``If-None-Match: *`` (412 PreconditionFailed where the key
  exists) and ``If-Match: ETAG`` (412 for another version, 404 NoSuchKey for
  none), checked and applied atomically; DELETE /BUCKET/KEY (204, missing or not)
  and DeleteObjects (POST /BUCKET?delete, as obstore deletes);
- GET /BUCKET?list-type=2 (ListObjectsV2: prefix, delimiter, max-keys (at most
  1000), continuation-token, start-after, encoding-type=url), in S3's XML, with
  CommonPrefixes, KeyCount, IsTruncated and NextContinuationToken; HEAD /BUCKET;
- anything else (other POSTs, other buckets' or sub-resource requests): 501
  NotImplemented, or 404 NoSuchBucket / NoSuchKey;
- with ``--faults``, the fault injection of scripts/s3_faults.py (tests).

Keys are file paths relative to the directory ("a/b/c" is DIR/a/b/c); directories
are no objects, only prefixes; "." and ".." components, symbolic links to files, and
directories that resolve out of the directory are refused (and not listed). A PUT
writes a file beside the others (in DIR/.s3_server-uploads, never listed) and renames
it into place, so a reader sees the old object or the new one; a key cannot be both
an object and a prefix here (400). Signatures (SigV4 or none) are not checked, as
moto does not by default. ETag is a digest of the file's size, mtime and inode, not
of its bytes; a PUT gives each file it writes an mtime of its own (so a new ETag).

Design: the parent binds one listening socket and forks ``--workers`` processes
(default: one per CPU); each accepts from it (the kernel hands each connection to
one of them) and serves each connection in a thread, HTTP/1.1 keep-alive, bodies
by os.sendfile (the kernel copies; the GIL is released), TCP_NODELAY. The parent
prints the endpoint URL on stdout once the socket listens, then waits; SIGTERM or
SIGINT to it (or to the process group) ends every worker. A worker whose parent
dies gets SIGKILL (prctl PR_SET_PDEATHSIG).

    python scripts/s3_server.py DIR [--bucket NAME] [--port 0] [--workers N] [--faults]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import ctypes
import email.utils
import errno
import fcntl
import functools
import hashlib
import os
import signal
import socket
import stat
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote
from xml.etree import ElementTree
from xml.sax.saxutils import escape

from s3_faults import Faults

XMLNS = "http://s3.amazonaws.com/doc/2006-03-01/"
MAX_KEYS = 1000
DISCARD_LIMIT = 1 << 20  # request bodies up to this are read and dropped, larger ones close
SENDFILE_CHUNK = 1 << 30
PUT_LIMIT = 5 << 30  # S3's limit of a single PUT
STAGING = ".s3_server-uploads"  # in the directory: PUT bodies before their rename


class Bucket:
    """The directory served, and what the handlers need to know of it."""

    def __init__(self, name: str, root: Path) -> None:
        self.name = name
        self.root = root.resolve()


# -- objects -----------------------------------------------------------------------------


def _file(bucket: Bucket, key: str) -> str | None:
    """The path of object ``key`` in the directory, or None where the key cannot be
    one (an empty, "." or ".." component, or a directory that resolves out of it)."""
    parts = key.split("/")
    if "" in parts or "." in parts or ".." in parts or "\0" in key or parts[0] == STAGING:
        return None
    directory = _directory(str(bucket.root), tuple(parts[:-1]))
    return None if directory is None else os.path.join(directory, parts[-1])


@functools.lru_cache(maxsize=4096)
def _directory(root: str, parts: tuple[str, ...]) -> str | None:
    """The real path of directory ``root/parts...`` when it lies inside ``root``
    (cached: resolving costs a system call per component, at every request)."""
    real = os.path.realpath(os.path.join(root, *parts))
    return real if real == root or real.startswith(root + os.sep) else None


def etag(st: os.stat_result) -> str:
    digest = hashlib.md5(f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}".encode()).hexdigest()
    return f'"{digest}"'


_last_mtime = [0]


def _unique_mtime() -> tuple[int, int]:
    """(atime, mtime) in ns for a file a PUT writes: never one given before, so that
    its ETag differs from every earlier object's even where an inode is reused."""
    _last_mtime[0] = max(time.time_ns(), _last_mtime[0] + 1000)
    return _last_mtime[0], _last_mtime[0]


def _stat(path: str) -> os.stat_result | None:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None


@contextlib.contextmanager
def _bucket_lock(bucket: Bucket) -> Any:
    """Conditions are checked and writes applied one at a time, across the workers."""
    staging = bucket.root / STAGING
    staging.mkdir(exist_ok=True)
    fd = os.open(staging / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def http_date(seconds: float) -> str:
    return email.utils.formatdate(seconds, usegmt=True)


def iso_date(seconds: float) -> str:
    t = time.gmtime(seconds)
    millis = int(seconds * 1000) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{millis:03d}Z"


def parse_range(header: str | None, size: int) -> tuple[int, int] | str | None:
    """The inclusive (first, last) byte of a single ``Range`` header for an object of
    ``size`` bytes; None for the whole object (no header, several ranges, one that
    cannot be parsed, or a suffix range of an empty object: as S3 and moto answer);
    "unsatisfiable" for a range that starts at or past the end (416)."""
    if not header:
        return None
    unit, _, spec = header.strip().partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first_text, dash, last_text = spec.strip().partition("-")
    if not dash:
        return None
    try:
        first = int(first_text) if first_text.strip() else None
        last = int(last_text) if last_text.strip() else None
    except ValueError:
        return None
    if (first is not None and first < 0) or (last is not None and last < 0):
        return None
    if first is None:  # a suffix range: the last ``last`` bytes
        if last is None:
            return None
        if last == 0:
            return "unsatisfiable"
        if size == 0:
            return None
        return size - min(last, size), size - 1
    if first >= size:
        return "unsatisfiable"
    last = size - 1 if last is None else min(last, size - 1)
    if first > last:
        return None
    return first, last


# -- listing -----------------------------------------------------------------------------


def _has_file(directory: str) -> bool:
    """Whether a regular file lies anywhere under ``directory`` (S3 has no empty
    "directories": a prefix exists only through a key under it)."""
    try:
        with os.scandir(directory) as entries:
            subdirectories = []
            for entry in entries:
                if entry.is_file(follow_symlinks=False):
                    return True
                if entry.is_dir(follow_symlinks=False):
                    subdirectories.append(entry.path)
    except OSError:
        return False
    return any(_has_file(d) for d in subdirectories)


def _walk(directory: str, base: str) -> list[tuple[str, os.stat_result]]:
    """Every regular file under ``directory`` as (key, stat), its key ``base`` + the
    path below; symbolic links to directories are not followed."""
    found = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                key = base + entry.name
                if entry.is_dir(follow_symlinks=False):
                    found += _walk(entry.path, key + "/")
                elif entry.is_file(follow_symlinks=False):
                    with contextlib.suppress(OSError):
                        found.append((key, entry.stat()))
    except OSError:
        pass
    return found


def list_entries(
    bucket: Bucket, prefix: str, delimiter: str
) -> list[tuple[str, os.stat_result | None]]:
    """Every key under ``prefix`` (key, stat) and every common prefix (prefix, None)
    of a listing with ``delimiter``, unique and sorted as S3 sorts (UTF-8 bytes)."""
    parts = prefix.split("/")
    if "." in parts or ".." in parts or "\0" in prefix:
        return []
    directory_part, _, name_start = prefix.rpartition("/")
    base = directory_part + "/" if directory_part else ""
    if directory_part and "" in directory_part.split("/"):
        return []  # "a//b": no file path has an empty component
    directory = os.path.join(bucket.root, *directory_part.split("/")) if base else str(bucket.root)
    entries: list[tuple[str, os.stat_result | None]] = []
    # One directory level with "/": files are keys, directories holding a file
    # prefixes; otherwise every file below, grouped by the delimiter afterwards.
    one_level = delimiter == "/"
    try:
        with os.scandir(directory) as listed:
            for entry in listed:
                if not entry.name.startswith(name_start) or (not base and entry.name == STAGING):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    below = base + entry.name + "/"
                    if not one_level:
                        entries += _walk(entry.path, below)
                    elif _has_file(entry.path):
                        entries.append((below, None))
                elif entry.is_file(follow_symlinks=False):
                    with contextlib.suppress(OSError):
                        entries.append((base + entry.name, entry.stat()))
    except OSError:
        return []
    if not one_level and delimiter:
        grouped: dict[str, os.stat_result | None] = {}
        for key, st in entries:
            cut = key.find(delimiter, len(prefix))
            if cut < 0:
                grouped[key] = st
            else:
                grouped.setdefault(key[: cut + len(delimiter)], None)
        entries = list(grouped.items())
    entries.sort(key=lambda e: e[0].encode("utf-8", "surrogateescape"))
    return entries


def _after(entries: list[tuple[str, Any]], marker: str) -> list[tuple[str, Any]]:
    wanted = marker.encode("utf-8", "surrogateescape")
    return [e for e in entries if e[0].encode("utf-8", "surrogateescape") > wanted]


def list_objects_v2(bucket: Bucket, query: dict[str, str]) -> bytes:
    prefix = query.get("prefix", "")
    delimiter = query.get("delimiter", "")
    url = query.get("encoding-type", "") == "url"
    try:
        max_keys = max(0, min(MAX_KEYS, int(query.get("max-keys", MAX_KEYS))))
    except ValueError:
        max_keys = MAX_KEYS
    token = query.get("continuation-token")
    start_after = query.get("start-after", "")
    entries = list_entries(bucket, prefix, delimiter)
    if token is not None:
        try:
            marker = base64.urlsafe_b64decode(token.encode()).decode("utf-8", "surrogateescape")
        except (ValueError, UnicodeDecodeError):
            marker = ""
        entries = _after(entries, marker)
    elif start_after:
        entries = _after(entries, start_after)
    page, truncated = entries[:max_keys], len(entries) > max_keys

    def text(value: str) -> str:
        return escape(quote(value, safe="/") if url else value)

    out = [
        '<?xml version="1.0" encoding="UTF-8"?>\n',
        f'<ListBucketResult xmlns="{XMLNS}">',
        f"<Name>{escape(bucket.name)}</Name>",
        f"<Prefix>{text(prefix)}</Prefix>",
    ]
    if delimiter:
        out.append(f"<Delimiter>{text(delimiter)}</Delimiter>")
    out.append(f"<MaxKeys>{max_keys}</MaxKeys>")
    if url:
        out.append("<EncodingType>url</EncodingType>")
    out.append(f"<KeyCount>{len(page)}</KeyCount>")
    if token is not None:
        out.append(f"<ContinuationToken>{escape(token)}</ContinuationToken>")
    if start_after:
        out.append(f"<StartAfter>{text(start_after)}</StartAfter>")
    out.append(f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>")
    if truncated:
        last = page[-1][0].encode("utf-8", "surrogateescape")
        out.append(
            f"<NextContinuationToken>{base64.urlsafe_b64encode(last).decode()}"
            "</NextContinuationToken>"
        )
    for name, st in page:
        if st is None:
            continue
        tag = etag(st).replace('"', "&quot;")
        out.append(
            f"<Contents><Key>{text(name)}</Key>"
            f"<LastModified>{iso_date(st.st_mtime)}</LastModified>"
            f"<ETag>{tag}</ETag>"
            f"<Size>{st.st_size}</Size><StorageClass>STANDARD</StorageClass></Contents>"
        )
    for name, st in page:
        if st is None:
            out.append(f"<CommonPrefixes><Prefix>{text(name)}</Prefix></CommonPrefixes>")
    out.append("</ListBucketResult>")
    return "".join(out).encode("utf-8", "surrogateescape")


# -- HTTP --------------------------------------------------------------------------------

HEAD_LIMIT = 64 << 10  # a request head longer than this is refused (431), the connection closed
REASONS = {
    100: "Continue",
    200: "OK",
    204: "No Content",
    206: "Partial Content",
    304: "Not Modified",
    400: "Bad Request",
    404: "Not Found",
    411: "Length Required",
    412: "Precondition Failed",
    416: "Range Not Satisfiable",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}
SERVER = "zarrfs-bench-s3"


class _Clock:
    """The Date header's text, formatted once a second (not once a request)."""

    second = -1
    text = ""

    @classmethod
    def now(cls) -> str:
        second = int(time.time())
        if second != cls.second:
            cls.text, cls.second = http_date(second), second
        return cls.text


class Connection:
    """One client connection: requests read and answered one after the other
    (HTTP/1.1 keep-alive) until the client closes it or asks to."""

    bucket: Bucket  # set on the class by serve()
    faults: Faults | None = None  # with --faults
    requests = 0  # of this process, for the request ids

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        self.close = False
        # Set by each request:
        self.method = ""
        self.headers: dict[str, str] = {}

    def serve(self) -> None:
        while not self.close:
            head = self._head()
            if head is None:
                return
            self._request(head)

    def _head(self) -> bytes | None:
        """The next request's head (without the blank line), or None at the end."""
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            if len(self.buffer) > HEAD_LIMIT:
                self.method, self.close = "GET", True
                self._error(431, "RequestHeaderSectionTooLarge", "the request head is too long")
                return None
            data = self.sock.recv(1 << 16)
            if not data:
                return None
            self.buffer += data
        head, self.buffer = self.buffer[:end], self.buffer[end + 4 :]
        return head

    def _request(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        while lines and not lines[0]:  # blank lines before a request are allowed
            lines.pop(0)
        request = lines[0].split(" ") if lines else []
        self.headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            self.headers[name.strip().lower()] = value.strip()
        if len(request) != 3 or not request[2].startswith("HTTP/1."):
            self.method, self.close = "GET", True
            self._error(400, "BadRequest", "not an HTTP/1.x request line")
            return
        self.method, target, version = request
        connection = self.headers.get("connection", "").lower()
        self.close = connection == "close" or (version == "HTTP/1.0" and connection != "keep-alive")
        Connection.requests += 1
        faults = self.faults
        if faults is not None and target.split("?")[0] == "/_faults":
            body = self._small_body()
            self._send(200, faults.control(body) if self.method == "POST" else faults.report())
            return
        if faults is not None and faults.take("echo_error", target):
            # An error page quoting the request, as some servers and proxies send.
            self.close = self.close or self.method in ("PUT", "POST")  # its body unread
            if not self.close:
                self._body()
            quoted = "".join(f"{n}: {v}\n" for n, v in self.headers.items())
            self._error(400, "InvalidRequest", f"the request was:\n{quoted}")
            return
        if self.method == "PUT":
            self._object_request(target, self._put)
            return
        if self.method == "POST" and target.endswith(("?delete", "?delete=")):
            self._delete_objects(target, self._small_body())
            return
        if not self._body():
            self.close = True
        if self.method in ("GET", "HEAD"):
            self._read(target)
        elif self.method == "DELETE":
            self._object_request(target, self._delete)
        else:
            self._error(501, "NotImplemented", f"{self.method} is not served here")

    def _small_body(self) -> bytes:
        try:
            size = min(max(int(self.headers.get("content-length", "0")), 0), DISCARD_LIMIT)
        except ValueError:
            size = 0
        while len(self.buffer) < size:
            data = self.sock.recv(1 << 16)
            if not data:
                break
            self.buffer += data
        body, self.buffer = self.buffer[:size], self.buffer[size:]
        return body

    def _body(self) -> bool:
        """Reads and drops a small request body; False where the connection cannot go
        on (a chunked or large body, or one the client waits for "100 Continue" to
        send: the answer comes first and the connection closes)."""
        if "transfer-encoding" in self.headers:
            return False
        try:
            size = int(self.headers.get("content-length", "0"))
        except ValueError:
            return False
        if size == 0:
            return True
        expecting = self.headers.get("expect", "").lower() == "100-continue"
        if expecting or not 0 < size <= DISCARD_LIMIT:
            return False
        while len(self.buffer) < size:
            data = self.sock.recv(1 << 16)
            if not data:
                return False
            self.buffer += data
        self.buffer = self.buffer[size:]
        return True

    # -- answers -----------------------------------------------------------------------

    def _headers(self, status: int, headers: list[str], more: bool) -> None:
        """The status line and headers in one send (MSG_MORE when a body follows)."""
        text = (
            f"HTTP/1.1 {status} {REASONS.get(status, '')}\r\nDate: {_Clock.now()}\r\n"
            f"Server: {SERVER}\r\nx-amz-request-id: {os.getpid():X}{Connection.requests:08X}\r\n"
            + "".join(h + "\r\n" for h in headers)
            + ("Connection: close\r\n\r\n" if self.close else "\r\n")
        )
        self.sock.sendall(text.encode("latin-1"), socket.MSG_MORE if more else 0)

    def _send(self, status: int, body: bytes, content_type: str = "application/xml") -> None:
        send = bool(body) and self.method != "HEAD"
        headers = [f"Content-Type: {content_type}", f"Content-Length: {len(body)}"]
        self._headers(status, headers, send)
        if send:
            self.sock.sendall(body)

    def _error(self, status: int, code: str, message: str, **extra: str) -> None:
        if self.method == "HEAD":
            self._send(status, b"")
            return
        fields = "".join(f"<{k}>{escape(v)}</{k}>" for k, v in extra.items())
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{escape(message)}</Message>{fields}"
            f"<RequestId>{os.getpid():X}{Connection.requests:08X}</RequestId></Error>"
        )
        self._send(status, body.encode("utf-8", "surrogateescape"))

    @staticmethod
    def _target(target: str) -> tuple[str, str, dict[str, str]]:
        """(bucket name, key, query) of a request target."""
        path, _, query_text = target.partition("?")
        if path.startswith(("http://", "https://")):  # an absolute-form target
            path = "/" + path.split("/", 3)[3] if path.count("/") >= 3 else "/"
        path = unquote(path, errors="surrogateescape")
        query = {k: v[-1] for k, v in parse_qs(query_text, keep_blank_values=True).items()}
        name, _, key = path.lstrip("/").partition("/")
        return name, key, query

    def _object_request(self, target: str, handler: Any) -> None:
        """A PUT or DELETE of one object: ``handler(key, path)``."""
        name, key, query = self._target(target)
        if name != self.bucket.name:
            self.close = self.close or self.method == "PUT"  # its body is not read
            self._error(404, "NoSuchBucket", "The specified bucket does not exist", BucketName=name)
            return
        path = _file(self.bucket, key) if key else None
        if set(query) - {"x-id"} or path is None:
            self.close = self.close or self.method == "PUT"
            self._error(501 if key else 400, "NotImplemented", "not an object this server writes")
            return
        handler(key, path)

    def _read(self, target: str) -> None:
        name, key, query = self._target(target)
        if not name:
            self._list_buckets()
            return
        if name != self.bucket.name:
            self._error(404, "NoSuchBucket", "The specified bucket does not exist", BucketName=name)
            return
        if not key:
            if self.method == "HEAD" and not query:
                self._send(200, b"")
            elif query.get("list-type") == "2":
                self._send(200, list_objects_v2(self.bucket, query))
            else:
                self._error(501, "NotImplemented", "only ListObjectsV2 (list-type=2) is served")
            return
        if set(query) - {"x-id"}:
            # Sub-resources (?acl, ?tagging, ?partNumber, ...) are not served.
            self._error(501, "NotImplemented", "object sub-resources are not served")
            return
        self._object(key)

    # -- writing -----------------------------------------------------------------------

    def _put(self, key: str, path: str) -> None:
        faults = self.faults
        if "transfer-encoding" in self.headers or "aws-chunked" in self.headers.get(
            "content-encoding", ""
        ):
            self.close = True
            self._error(501, "NotImplemented", "chunked uploads are not served")
            return
        try:
            size = int(self.headers["content-length"])
        except (KeyError, ValueError):
            self.close = True
            self._error(411, "MissingContentLength", "a PUT needs a Content-Length")
            return
        if not 0 <= size <= PUT_LIMIT:
            self.close = True
            self._error(400, "EntityTooLarge", "at most 5 GiB in one PUT")
            return
        if self.headers.get("expect", "").lower() == "100-continue":
            self.sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        staged = self._receive(size)
        if staged is None:
            self.close = True
            return
        try:
            if faults is not None:
                faults.count("puts")
                failure = faults.take("put_error", key)
                if failure is not None:
                    status = int(failure.get("status", 503))
                    self._error(status, str(failure.get("code", "SlowDown")), "injected")
                    return
                if faults.take("hold_put", key) is not None:
                    faults.count("held")
                    faults.wait_release()
                    status, headers = self._apply(key, path, staged)
                    faults.count("late_outcomes", status)
                    with contextlib.suppress(OSError):  # the client has long given up
                        self._answer_write(key, status, headers)
                    return
            status, headers = self._apply(key, path, staged)
            self._answer_write(key, status, headers)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(staged)

    def _receive(self, size: int) -> str | None:
        """The request body in a new file of the staging directory (its path), or None
        where the client went away first."""
        staging = self.bucket.root / STAGING
        staging.mkdir(exist_ok=True)
        fd, staged = tempfile.mkstemp(dir=staging)
        with os.fdopen(fd, "wb") as out:
            taken = self.buffer[:size]
            self.buffer = self.buffer[size:]
            out.write(taken)
            left = size - len(taken)
            while left > 0:
                data = self.sock.recv(min(left, 1 << 20))
                if not data:
                    os.unlink(staged)
                    return None
                out.write(data)
                left -= len(data)
        return staged

    def _apply(self, key: str, path: str, staged: str) -> tuple[int, list[str]]:
        """The staged body put in place if the request's preconditions hold, all under
        the bucket's lock; (status, headers)."""
        with _bucket_lock(self.bucket):
            current = _stat(path)
            match = self.headers.get("if-match")
            if self.headers.get("if-none-match", "").strip() == "*" and current is not None:
                return 412, ["If-None-Match"]
            if match is not None:
                if current is None:
                    return 404, []
                if match.strip() not in ("*", etag(current)):
                    return 412, ["If-Match"]
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                if os.path.isdir(path):
                    raise IsADirectoryError(path)
                os.utime(staged, ns=_unique_mtime())
                os.replace(staged, path)
            except OSError:
                return 400, []
            return 200, [f"ETag: {etag(os.stat(path))}"]

    def _answer_write(self, key: str, status: int, headers: list[str]) -> None:
        if status == 200:
            self._headers(200, [*headers, "Content-Length: 0"], False)
        elif status == 412:
            message = "At least one of the pre-conditions you specified did not hold"
            self._error(412, "PreconditionFailed", message, Condition=headers[0])
        elif status == 404:
            self._error(404, "NoSuchKey", "The specified key does not exist.", Key=key)
        else:
            self._error(400, "InvalidArgument", "the key collides with a prefix or an object")

    def _delete_objects(self, target: str, body: bytes) -> None:
        """DeleteObjects (POST /BUCKET?delete), as obstore deletes even one key."""
        name, _, _ = self._target(target)
        if name != self.bucket.name:
            self._error(404, "NoSuchBucket", "The specified bucket does not exist", BucketName=name)
            return
        try:
            keys = [k.text or "" for k in ElementTree.fromstring(body).iter(f"{{{XMLNS}}}Key")]
            keys += [k.text or "" for k in ElementTree.fromstring(body).iter("Key")]
        except ElementTree.ParseError:
            self._error(400, "MalformedXML", "not a Delete document")
            return
        out = ['<?xml version="1.0" encoding="UTF-8"?>\n', f'<DeleteResult xmlns="{XMLNS}">']
        for key in keys:
            path = _file(self.bucket, key)
            if path is not None:
                self._unlink(path)
            out.append(f"<Deleted><Key>{escape(key)}</Key></Deleted>")
        out.append("</DeleteResult>")
        self._send(200, "".join(out).encode("utf-8", "surrogateescape"))

    def _delete(self, key: str, path: str) -> None:
        self._unlink(path)
        self._headers(204, [], False)

    def _unlink(self, path: str) -> None:
        if self.faults is not None:
            self.faults.count("deletes")
        with _bucket_lock(self.bucket):
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                os.unlink(path)
            # S3 has no empty prefixes: the directories left empty go too.
            directory = os.path.dirname(path)
            while directory != str(self.bucket.root):
                try:
                    os.rmdir(directory)
                except OSError:
                    break
                directory = os.path.dirname(directory)

    def _list_buckets(self) -> None:
        created = iso_date(self.bucket.root.stat().st_mtime)
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<ListAllMyBucketsResult xmlns="{XMLNS}"><Owner><ID>bench</ID></Owner><Buckets>'
            f"<Bucket><Name>{escape(self.bucket.name)}</Name>"
            f"<CreationDate>{created}</CreationDate></Bucket>"
            "</Buckets></ListAllMyBucketsResult>"
        )
        self._send(200, body.encode("utf-8", "surrogateescape"))

    def _object(self, key: str) -> None:
        path = _file(self.bucket, key)
        fd = -1
        if path is not None:
            with contextlib.suppress(OSError):
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            st = os.fstat(fd) if fd >= 0 else None
            if st is None or not stat.S_ISREG(st.st_mode):
                self._error(404, "NoSuchKey", "The specified key does not exist.", Key=key)
                return
            size = st.st_size
            span = parse_range(self.headers.get("range"), size)
            if span == "unsatisfiable":
                if self.method == "HEAD":
                    self._headers(
                        416, ["Content-Length: 0", f"Content-Range: bytes */{size}"], False
                    )
                    return
                self._error(
                    416,
                    "InvalidRange",
                    "The requested range is not satisfiable",
                    RangeRequested=self.headers.get("range", ""),
                    ActualObjectSize=str(size),
                )
                return
            wanted = self.headers.get("if-match")
            if wanted is not None and wanted.strip() not in ("*", etag(st)):
                message = "At least one of the pre-conditions you specified did not hold"
                self._error(412, "PreconditionFailed", message, Condition="If-Match")
                return
            unless = self.headers.get("if-none-match")
            if unless is not None and unless.strip() in ("*", etag(st)):
                # As S3: the version the client holds is current, so no body.
                self._headers(304, [f"ETag: {etag(st)}", "Content-Length: 0"], False)
                return
            first, last = (0, size - 1) if span is None else span
            count = last - first + 1
            headers = [
                "Content-Type: binary/octet-stream",
                f"Content-Length: {count}",
                f"Last-Modified: {http_date(st.st_mtime)}",
                f"ETag: {etag(st)}",
                "Accept-Ranges: bytes",
            ]
            if span is not None:
                headers.append(f"Content-Range: bytes {first}-{last}/{size}")
            body = self.method == "GET" and count > 0
            faults = self.faults if body else None
            if faults is not None:
                faults.count("gets")
                if faults.take("get_stall", key) is not None:
                    faults.count("stalled")
                    faults.wait_release()
            self._headers(206 if span is not None else 200, headers, body)
            if faults is not None:
                self._faulty_body(faults, key, fd, first, count)
            elif body:
                self._sendfile(fd, first, count)
        finally:
            if fd >= 0:
                os.close(fd)

    def _faulty_body(self, faults: Faults, key: str, fd: int, offset: int, count: int) -> None:
        """A GET's body as the faults set say: trickled, cut short, or corrupted."""
        trickle = faults.take("get_trickle", key)
        cut = faults.take("get_truncate", key)
        corrupt = faults.take("get_corrupt", key)
        if trickle is None and cut is None and corrupt is None:
            self._sendfile(fd, offset, count)
            return
        data = bytearray(os.pread(fd, count, offset))
        if corrupt is not None and data:
            data[len(data) // 2] ^= 0xFF
        if cut is not None:
            data = data[: int(cut.get("after", 0))]
        if trickle is not None:
            rate = max(int(trickle.get("rate", 1)), 1)
            piece = max(rate // 10, 1)
            for start in range(0, len(data), piece):
                self.sock.sendall(data[start : start + piece])
                time.sleep(piece / rate)
        else:
            self.sock.sendall(data)
        if cut is not None:  # the promised length never comes: the connection ends
            self.close = True
            self.sock.shutdown(socket.SHUT_RDWR)

    def _sendfile(self, fd: int, offset: int, count: int) -> None:
        out = self.sock.fileno()
        while count > 0:
            sent = os.sendfile(out, fd, offset, min(count, SENDFILE_CHUNK))
            if sent == 0:  # the file shrank: the answer cannot be completed
                raise ConnectionAbortedError("file shrank while sent")
            offset += sent
            count -= sent


# -- processes ---------------------------------------------------------------------------


def _connection(conn: socket.socket) -> None:
    try:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        Connection(conn).serve()
    except OSError:
        pass  # the client went away
    finally:
        with contextlib.suppress(OSError):
            conn.close()


def _worker(listener: socket.socket, parent: int) -> None:
    """Accepts connections forever, each one served by a thread."""
    with contextlib.suppress(Exception):  # Linux: die with the parent
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before that
        return
    while True:
        try:
            conn, _ = listener.accept()
        except InterruptedError:
            continue
        except OSError as e:
            if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                time.sleep(0.05)
                continue
            if e.errno == errno.ECONNABORTED:
                continue
            raise
        threading.Thread(target=_connection, args=(conn,), daemon=True).start()


def serve(root: Path, bucket: str, port: int, workers: int, host: str = "127.0.0.1") -> int:
    Connection.bucket = Bucket(bucket, root)
    listener = socket.create_server((host, port), backlog=512)
    pids: list[int] = []
    parent = os.getpid()
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _worker(listener, parent)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        pids.append(pid)
    bound = listener.getsockname()[1]
    listener.close()  # the workers hold it

    def stop(signum: int, frame: Any) -> None:
        raise _Stop  # out of os.waitpid, which Python would otherwise resume

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    code = 0
    try:
        print(f"http://{host}:{bound}", flush=True)
        while pids:
            pid, _ = os.waitpid(-1, 0)
            if pid in pids:  # a worker died: the server is broken, stop it all
                pids.remove(pid)
                code = 1
                break
    except (_Stop, ChildProcessError, BrokenPipeError):
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in pids:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
    return code


class _Stop(Exception):
    """SIGTERM or SIGINT reached the parent."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="the directory served as the bucket")
    parser.add_argument("--bucket", default="bucket", help="the bucket's name (default bucket)")
    parser.add_argument("--port", type=int, default=0, help="default: a free port")
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="worker processes (default: one per CPU)",
    )
    parser.add_argument(
        "--faults",
        action="store_true",
        help="serve POST /_faults (scripts/s3_faults.py, for tests; implies --workers 1)",
    )
    args = parser.parse_args()
    if not args.root.is_dir():
        parser.error(f"{args.root} is not a directory")
    if args.workers < 1:
        parser.error("--workers must be >= 1")
    if args.faults:
        Connection.faults = Faults()
        args.workers = 1
    return serve(args.root, args.bucket, args.port, args.workers)


if __name__ == "__main__":
    sys.exit(main())
