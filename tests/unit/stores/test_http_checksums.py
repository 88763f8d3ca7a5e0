"""The HTTP store checks a whole value against the checksum headers of its answer
(zarrfs/stores/checksums.py), through a proxy that changes bytes on the way."""

from __future__ import annotations

import base64
import errno
import hashlib
import zlib
from collections.abc import Iterator

import google_crc32c
import pytest

from tests.support.fault_proxy import FaultProxy
from tests.support.http_server import HttpServer
from zarrfs.errors import StoreError
from zarrfs.stores.http import HttpStore

VALUE = bytes(range(256)) * 64


def b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode()


FIELDS = {
    "content-md5": [("Content-MD5", b64(hashlib.md5(VALUE).digest()))],
    "x-amz-checksum-crc32c": [
        ("x-amz-checksum-crc32c", b64(google_crc32c.value(VALUE).to_bytes(4, "big")))
    ],
    "x-amz-checksum-crc32": [("x-amz-checksum-crc32", b64(zlib.crc32(VALUE).to_bytes(4, "big")))],
    "x-amz-checksum-sha256": [("x-amz-checksum-sha256", b64(hashlib.sha256(VALUE).digest()))],
    "x-goog-hash": [
        ("x-goog-hash", f"crc32c={b64(google_crc32c.value(VALUE).to_bytes(4, 'big'))}"),
        ("x-goog-hash", f"md5={b64(hashlib.md5(VALUE).digest())}"),
    ],
    "x-amz-meta-zarrfs-crc32c": [
        ("x-amz-meta-zarrfs-crc32c", b64(google_crc32c.value(VALUE).to_bytes(4, "big")))
    ],
}


@pytest.fixture
def proxied(
    http_server: HttpServer, fault_proxy: type[FaultProxy]
) -> Iterator[tuple[HttpServer, FaultProxy, HttpStore]]:
    (http_server.root / "k").write_bytes(VALUE)
    proxy = fault_proxy(("127.0.0.1", http_server.port), http=True)
    store = HttpStore(proxy.url, tries=3, retry_budget=5.0, timeout=(1.0, 2.0))
    yield http_server, proxy, store
    store.close()


@pytest.mark.parametrize("kind", sorted(FIELDS))
def test_a_byte_changed_on_the_way_is_eio(
    proxied: tuple[HttpServer, FaultProxy, HttpStore], kind: str
) -> None:
    """A failed try: tried again (3 tries here), then a StoreError (EIO) naming the
    key and the checksum; the first whole answer after that reads."""
    server, proxy, store = proxied
    server.fields["/k"] = FIELDS[kind]
    assert store.get("k") == VALUE  # the server's checksums are right
    proxy.flip("/k", times=None, at=4000)
    with pytest.raises(StoreError) as caught:
        store.get("k")
    assert caught.value.errno == errno.EIO
    message = str(caught.value)
    assert message.startswith(f"reading 'k' at {proxy.url}: the bytes received do not match")
    assert "(3 tries)" in message
    assert proxy.flips == 3
    proxy.passthrough()
    assert store.get("k") == VALUE


def test_a_byte_changed_once_is_tried_again(
    proxied: tuple[HttpServer, FaultProxy, HttpStore],
) -> None:
    server, proxy, store = proxied
    server.fields["/k"] = FIELDS["content-md5"]
    proxy.flip("/k", times=1)
    assert store.get("k") == VALUE
    assert proxy.flips == 1


def test_without_a_checksum_nothing_is_checked(
    proxied: tuple[HttpServer, FaultProxy, HttpStore],
) -> None:
    """The known limit: no checksum header (an ETag is no checksum), or one that
    cannot be parsed, and the bytes are taken as they arrive."""
    server, proxy, store = proxied
    proxy.flip("/k", times=None, at=7)
    for fields in ([], [("ETag", f'"{hashlib.md5(VALUE).hexdigest()}"')], [("Content-MD5", "?")]):
        server.fields["/k"] = fields
        value = store.get("k")
        assert value is not None and value[7] == VALUE[7] ^ 0xFF


def test_ranges_are_not_checked(proxied: tuple[HttpServer, FaultProxy, HttpStore]) -> None:
    """A checksum header of the whole value (GCS sends x-goog-hash with a 206) says
    nothing of a range of it."""
    server, proxy, store = proxied
    server.fields["/k"] = FIELDS["x-goog-hash"]
    proxy.flip("/k", times=None, at=0)
    assert store.get_range("k", 10, 5) == bytes([VALUE[10] ^ 0xFF]) + VALUE[11:15]
