"""The S3 store's checksums end to end, against moto behind a proxy that changes
bytes on the way (tests/support/fault_proxy.py): what every PUT sends, and what a
GET checks."""

from __future__ import annotations

import base64
import errno
import hashlib
import logging

import google_crc32c
import pytest

from tests.support.fault_proxy import FaultProxy
from tests.support.servers import Bucket
from zarrfs.errors import StoreError
from zarrfs.stores.s3 import S3Store

PREFIX = "p"
VALUE = bytes(range(256)) * 64


def crc_of(value: bytes) -> str:
    return base64.b64encode(google_crc32c.value(value).to_bytes(4, "big")).decode()


@pytest.fixture
def proxy(
    s3_bucket: Bucket, fault_proxy: type[FaultProxy], monkeypatch: pytest.MonkeyPatch
) -> FaultProxy:
    """A proxy in front of moto; the AWS endpoint is the proxy."""
    host, port = s3_bucket.endpoint.removeprefix("http://").rstrip("/").split(":")
    started = fault_proxy((host, int(port)), http=True)
    monkeypatch.setenv("AWS_ENDPOINT_URL", started.url.rstrip("/"))
    return started


def open_store(bucket: Bucket) -> S3Store:
    return S3Store(f"s3://{bucket.name}/{PREFIX}")


def metadata(bucket: Bucket, key: str) -> dict[str, str]:
    head = bucket.client.head_object(Bucket=bucket.name, Key=f"{PREFIX}/{key}")
    return dict(head["Metadata"])


def put_heads(proxy: FaultProxy) -> list[dict[str, str]]:
    heads = []
    for head in proxy.heads:
        line, *fields = head.decode("latin-1").split("\r\n")
        if line.startswith("PUT ") and "/.zarrfs" not in line:
            pairs = (f.partition(":") for f in fields if f)
            heads.append({name.strip().lower(): value.strip() for name, _, value in pairs})
    return heads


def test_every_put_carries_the_crc32c_of_its_value(s3_bucket: Bucket, proxy: FaultProxy) -> None:
    """As user metadata, x-amz-meta-zarrfs-crc32c: a value given whole (``set``)
    or in parts (``stage``: a shard's inner chunks and index)."""
    store = open_store(s3_bucket)
    store.set("a/zarr.json", b"{}")
    store.commit([store.stage("a/c/0", [VALUE[:100], memoryview(VALUE[100:]), b"tail"])])
    assert metadata(s3_bucket, "a/zarr.json") == {"zarrfs-crc32c": crc_of(b"{}")}
    assert metadata(s3_bucket, "a/c/0") == {"zarrfs-crc32c": crc_of(VALUE + b"tail")}
    sent = [head["x-amz-meta-zarrfs-crc32c"] for head in put_heads(proxy)]
    assert sent == [crc_of(b"{}"), crc_of(VALUE + b"tail")]


def test_every_put_sends_a_sha256_for_s3_to_verify(
    s3_bucket: Bucket, proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """x-amz-checksum-sha256 of the body (AWS refuses a body that does not match,
    400 BadDigest; moto does not check it), unless the environment says
    AWS_REQUEST_CHECKSUM_CALCULATION=when_required."""
    open_store(s3_bucket).set("k", VALUE)
    digest = base64.b64encode(hashlib.sha256(VALUE).digest()).decode()
    assert [head.get("x-amz-checksum-sha256") for head in put_heads(proxy)] == [digest]
    proxy.heads.clear()
    monkeypatch.setenv("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required")
    open_store(s3_bucket).set("k2", VALUE)
    heads = put_heads(proxy)
    assert len(heads) == 1 and "x-amz-checksum-sha256" not in heads[0]
    assert heads[0]["x-amz-meta-zarrfs-crc32c"] == crc_of(VALUE)  # this one always


def test_a_byte_changed_on_the_way_is_eio_naming_the_key(
    s3_bucket: Bucket, proxy: FaultProxy, caplog: pytest.LogCaptureFixture
) -> None:
    """Read again once, then a StoreError (EIO) whose message names the key and
    the checksum, and nothing of the bytes; the store logs nothing itself (the
    caller's one line is the message)."""
    store = open_store(s3_bucket)
    store.set("a/c/0", VALUE)
    proxy.flip("a/c/0", times=None, at=1000)
    for read in (store.get, store.get_buffer):
        with pytest.raises(StoreError) as caught:
            read("a/c/0")
        assert caught.value.errno == errno.EIO
        assert str(caught.value) == (
            f"reading s3://{s3_bucket.name}/{PREFIX}/a/c/0: the bytes received do not "
            "match the value's checksum (crc32c, x-amz-meta-zarrfs-crc32c) (2 tries)"
        )
    assert proxy.flips == 4
    assert not [r for r in caplog.records if r.name.startswith("zarrfs")]
    proxy.passthrough()
    assert store.get("a/c/0") == VALUE  # nothing remembered


def test_a_byte_changed_once_is_read_again_with_one_log_line(
    s3_bucket: Bucket, proxy: FaultProxy, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store(s3_bucket)
    store.set("a/c/0", VALUE)
    proxy.flip("a/c/0", times=1)
    with caplog.at_level(logging.WARNING, logger="zarrfs"):
        assert store.get("a/c/0") == VALUE
    assert proxy.flips == 1
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("zarrfs")]
    assert lines == [
        f"reading s3://{s3_bucket.name}/{PREFIX}/a/c/0: the bytes received do not match the "
        "value's checksum (crc32c, x-amz-meta-zarrfs-crc32c); "
        "read again: the second answer was served"
    ]


def test_a_stored_value_that_does_not_match_its_checksum_is_eio(s3_bucket: Bucket) -> None:
    """The bytes changed in the store itself (or by a tool that kept the metadata)."""
    s3_bucket.put(f"{PREFIX}/k", VALUE, Metadata={"zarrfs-crc32c": crc_of(b"other")})
    with pytest.raises(StoreError) as caught:
        open_store(s3_bucket).get("k")
    assert caught.value.errno == errno.EIO and "checksum" in str(caught.value)


def test_objects_without_the_checksum_are_not_checked(s3_bucket: Bucket, proxy: FaultProxy) -> None:
    """The known limit: an object written by another tool (no metadata, or one that
    cannot be parsed) reads as it arrives; the ETag is not taken for an MD5."""
    s3_bucket.put(f"{PREFIX}/plain", VALUE)
    s3_bucket.put(f"{PREFIX}/odd", VALUE, Metadata={"zarrfs-crc32c": "not a crc"})
    store = open_store(s3_bucket)
    proxy.flip("/p/", times=None, at=5)
    for key in ("plain", "odd"):
        value = store.get(key)
        assert value is not None and value != VALUE and len(value) == len(VALUE)
        assert value[5] == VALUE[5] ^ 0xFF


def test_ranges_are_not_checked(s3_bucket: Bucket, proxy: FaultProxy) -> None:
    """The checksum is of the whole object: a range of it (a shard's index or inner
    chunk) reads as it arrives; its own codecs may check it (docs/semantics.md)."""
    store = open_store(s3_bucket)
    store.set("shard", VALUE)
    proxy.flip("shard", times=None, at=0)
    assert store.get_range("shard", 100, 10) == bytes([VALUE[100] ^ 0xFF]) + VALUE[101:110]
    proxy.passthrough()
    assert store.get_range("shard", 100, 10) == VALUE[100:110]


def test_the_flip_proxy_changes_one_byte_of_the_body_only(
    s3_bucket: Bucket, proxy: FaultProxy
) -> None:
    """The fault itself: status, headers and length as sent; one byte inverted
    wherever the pieces of the answer are cut."""
    s3_bucket.put(f"{PREFIX}/raw", VALUE)
    store = open_store(s3_bucket)
    for at in (0, 1, 4095, len(VALUE) - 1):
        proxy.flip("raw", times=1, at=at)
        value = store.get("raw")
        assert value is not None
        expected = bytearray(VALUE)
        expected[at] ^= 0xFF
        assert value == bytes(expected)
    proxy.flip("raw", times=1, at=len(VALUE))  # past the body: nothing changed
    assert store.get("raw") == VALUE
    assert store.get("raw") == VALUE  # nor the next answer on the connection
