"""A fake of Google Cloud Storage's XML API on 127.0.0.1: what obstore's GCS client
sends, answered as GCS answers it.

No emulator on PyPI serves obstore: gcp-storage-emulator (measured with 2026.7.19)
answers a PUT without ETag, a GET without Last-Modified, and HEAD, DELETE and the
XML listing with 501 (docs/semantics.md, "Google Cloud Storage and Azure"). This
fake serves, for buckets made with ``create_bucket``:

- GET and HEAD /BUCKET/OBJECT (the name percent-encoded, "/" as %2F), a single
  Range (``bytes=a-b``, ``bytes=a-``, ``bytes=-n``; 416 InvalidRange past the end),
  If-Match, ``?generation=N``; ETag (the MD5 of the bytes), Last-Modified,
  x-goog-generation, and the object's x-goog-meta-* user metadata;
- PUT /BUCKET/OBJECT with x-goog-if-generation-match (0: the object must not
  exist; 412 PreconditionFailed otherwise), checked and applied under one lock,
  its x-goog-meta-* headers kept as the object's user metadata;
- DELETE /BUCKET/OBJECT (204, 404 NoSuchKey for none);
- GET /BUCKET?list-type=2 (prefix, delimiter, max-keys, continuation-token);
- 404 NoSuchBucket for other buckets. ``authorized`` records each request's
  Authorization header (None for unsigned requests).
"""

from __future__ import annotations

import email.utils
import hashlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape

import pytest


@dataclass
class Blob:
    data: bytes
    generation: int
    modified: float
    metadata: dict[str, str] = field(default_factory=dict)  # x-goog-meta-NAME: NAME

    @property
    def etag(self) -> str:
        return '"' + hashlib.md5(self.data, usedforsecurity=False).hexdigest() + '"'


class GcsServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.buckets: dict[str, dict[str, Blob]] = {}
        self.generation = int(time.time() * 1e6)
        self.authorized: list[str | None] = []
        self.puts = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def create_bucket(self, name: str) -> None:
        with self.lock:
            self.buckets.setdefault(name, {})

    def put(
        self, bucket: str, name: str, data: bytes, metadata: dict[str, str] | None = None
    ) -> int:
        """Another writer: the object replaced (a new generation), with ``metadata``."""
        with self.lock:
            return self._store(self.buckets[bucket], name, data, metadata or {})

    def metadata(self, bucket: str, name: str) -> dict[str, str]:
        with self.lock:
            blob = self.buckets[bucket].get(name)
            return {} if blob is None else dict(blob.metadata)

    def get(self, bucket: str, name: str) -> bytes | None:
        with self.lock:
            blob = self.buckets[bucket].get(name)
            return None if blob is None else blob.data

    def delete(self, bucket: str, name: str) -> None:
        with self.lock:
            self.buckets[bucket].pop(name, None)

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        with self.lock:
            return sorted(k for k in self.buckets[bucket] if k.startswith(prefix))

    def _store(
        self, objects: dict[str, Blob], name: str, data: bytes, metadata: dict[str, str]
    ) -> int:
        self.generation += 1
        objects[name] = Blob(data, self.generation, time.time(), metadata)
        return self.generation


_META = "x-goog-meta-"


def _http_date(stamp: float) -> str:
    return email.utils.formatdate(stamp, usegmt=True)


def _iso_date(stamp: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(stamp))


class _Handler(BaseHTTPRequestHandler):
    server: GcsServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, code: str) -> None:
        body = f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code></Error>"
        self._send(status, body.encode(), {"Content-Type": "application/xml"})

    def _target(self) -> tuple[dict[str, Blob] | None, str, dict[str, list[str]]]:
        parts = urlsplit(self.path)
        bucket, _, name = parts.path.lstrip("/").partition("/")
        self.server.authorized.append(self.headers.get("Authorization"))
        return self.server.buckets.get(unquote(bucket)), unquote(name), parse_qs(parts.query)

    def _headers(self, blob: Blob) -> dict[str, str]:
        return {
            "ETag": blob.etag,
            "Last-Modified": _http_date(blob.modified),
            "x-goog-generation": str(blob.generation),
            **{f"{_META}{name}": value for name, value in blob.metadata.items()},
        }

    def do_GET(self) -> None:
        with self.server.lock:
            objects, name, query = self._target()
            if objects is None:
                return self._error(404, "NoSuchBucket")
            if not name:
                return self._list(objects, query)
            blob = objects.get(name)
        generation = query.get("generation", [None])[0]
        if blob is None or generation not in (None, str(blob.generation)):
            return self._error(404, "NoSuchKey")
        if self.headers.get("If-Match") not in (None, blob.etag):
            return self._error(412, "PreconditionFailed")
        headers = self._headers(blob)
        wanted = self.headers.get("Range", "")
        if not wanted.startswith("bytes=") or "," in wanted:
            return self._send(200, blob.data, headers)
        first, _, last = wanted.removeprefix("bytes=").partition("-")
        size = len(blob.data)
        start = max(size - int(last), 0) if not first else int(first)
        end = size - 1 if not first or not last else min(int(last), size - 1)
        if start >= size:
            return self._error(416, "InvalidRange")
        headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        self._send(206, blob.data[start : end + 1], headers)

    do_HEAD = do_GET

    def do_PUT(self) -> None:
        data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.server.lock:
            objects, name, _ = self._target()
            if objects is None:
                return self._error(404, "NoSuchBucket")
            condition = self.headers.get("x-goog-if-generation-match")
            current = objects.get(name)
            if condition is not None and condition != str(current.generation if current else 0):
                return self._error(412, "PreconditionFailed")
            self.server.puts += 1
            metadata = {
                k.lower().removeprefix(_META): v
                for k, v in self.headers.items()
                if k.lower().startswith(_META)
            }
            self.server._store(objects, name, data, metadata)
            blob = objects[name]
        self._send(200, b"", self._headers(blob))

    def do_DELETE(self) -> None:
        with self.server.lock:
            objects, name, _ = self._target()
            if objects is None:
                return self._error(404, "NoSuchBucket")
            if objects.pop(name, None) is None:
                return self._error(404, "NoSuchKey")
        self._send(204)

    def _list(self, objects: dict[str, Blob], query: dict[str, list[str]]) -> None:
        prefix = query.get("prefix", [""])[0]
        delimiter = query.get("delimiter", [""])[0]
        limit = min(int(query.get("max-keys", ["1000"])[0]), 1000)
        after = query.get("continuation-token", [query.get("start-after", [""])[0]])[0]
        entries: list[tuple[str, Blob | None]] = []
        for key in sorted(k for k in objects if k.startswith(prefix)):
            rest = key[len(prefix) :]
            if delimiter and delimiter in rest:
                common = prefix + rest.split(delimiter, 1)[0] + delimiter
                if not entries or entries[-1][0] != common:
                    entries.append((common, None))
            else:
                entries.append((key, objects[key]))
        entries = [e for e in entries if e[0] > after]
        page, more = entries[:limit], len(entries) > limit
        xml = ["<?xml version='1.0' encoding='UTF-8'?><ListBucketResult>"]
        xml.append(f"<Prefix>{escape(prefix)}</Prefix><KeyCount>{len(page)}</KeyCount>")
        for key, blob in page:
            if blob is None:
                xml.append(f"<CommonPrefixes><Prefix>{escape(key)}</Prefix></CommonPrefixes>")
                continue
            xml.append(
                f"<Contents><Key>{escape(key)}</Key><Size>{len(blob.data)}</Size>"
                f"<LastModified>{_iso_date(blob.modified)}</LastModified>"
                f"<ETag>{escape(blob.etag)}</ETag></Contents>"
            )
        xml.append(f"<IsTruncated>{'true' if more else 'false'}</IsTruncated>")
        if more:
            xml.append(f"<NextContinuationToken>{escape(page[-1][0])}</NextContinuationToken>")
        xml.append("</ListBucketResult>")
        self._send(200, "".join(xml).encode(), {"Content-Type": "application/xml"})


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[GcsServer]:
    """The fake, serving in a thread of the test process."""
    server = GcsServer()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
