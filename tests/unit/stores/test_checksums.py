"""The checksums that travel with values (zarrfs/stores/checksums.py): the CRC-32C
the S3 store sends, and the checksums read from S3 metadata and HTTP headers."""

from __future__ import annotations

import base64
import hashlib
import os
import time
import zlib

import numpy as np
import pytest

from zarrfs.stores import checksums
from zarrfs.stores.checksums import Expected, crc32c, from_attributes, from_headers

CHECK = b"123456789"  # the check value of CRC-32C (RFC 3720, B.4) is 0xE3069283


def b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode()


def test_crc32c_of_any_buffer_and_of_parts() -> None:
    assert crc32c(CHECK) == 0xE3069283
    assert crc32c(b"") == 0
    for form in (bytearray(CHECK), memoryview(CHECK), np.frombuffer(CHECK, dtype=np.uint8)):
        assert crc32c(form) == 0xE3069283
    parts = [b"1234", memoryview(b"56"), bytearray(b"789"), b""]
    assert crc32c(parts) == 0xE3069283
    assert crc32c(np.arange(4, dtype="<i4").reshape(2, 2)) == crc32c(
        np.arange(4, dtype="<i4").tobytes()
    )


def test_the_put_attributes_are_the_crc_as_s3_gives_it() -> None:
    """Base64 of the 4 bytes, big-endian: the form of x-amz-checksum-crc32c."""
    assert checksums.put_attributes(CHECK) == {"zarrfs-crc32c": b64(bytes.fromhex("e3069283"))}
    assert checksums.encode_crc(0) == "AAAAAA=="


def test_crc32c_is_cheap() -> None:
    """Measured, not asserted tightly: about 40 µs per MiB with google-crc32c's
    SSE4.2 code (the bound here only catches a fall back to pure Python)."""
    value = os.urandom(1 << 20)
    rounds = 50
    started = time.perf_counter()
    for _ in range(rounds):
        crc32c(memoryview(value))
    per_mib = (time.perf_counter() - started) / rounds
    assert per_mib < 2e-3


def test_the_checksum_of_s3_metadata() -> None:
    good = checksums.put_attributes(b"value")
    expected = from_attributes({**good, "Content-Type": "x"})
    assert expected == Expected("crc32c", crc32c(b"value").to_bytes(4, "big"), checksums.HEADER)
    assert expected.matches(b"value") and expected.matches(memoryview(b"value"))
    assert not expected.matches(b"valuf")
    assert from_attributes({}) is None  # written by another tool: nothing to check
    for bad in ("not base64!", "", b64(b"12345"), "AAAA=", "AAAA AAA="):
        assert from_attributes({"zarrfs-crc32c": bad}) is None, bad
    azure = checksums.put_attributes(b"value", checksums.AZURE_METADATA)
    assert azure == {"zarrfs_crc32c": good["zarrfs-crc32c"]}
    found = from_attributes(azure, checksums.AZURE_METADATA, checksums.AZURE_HEADER)
    assert found == Expected("crc32c", expected.digest, "x-ms-meta-zarrfs_crc32c")
    assert from_attributes(azure) is None  # another name


@pytest.mark.parametrize(
    ("name", "algorithm", "digest"),
    [
        ("x-amz-checksum-crc32c", "crc32c", crc32c(CHECK).to_bytes(4, "big")),
        ("X-Amz-Checksum-CRC32", "crc32", zlib.crc32(CHECK).to_bytes(4, "big")),
        ("x-amz-checksum-sha1", "sha1", hashlib.sha1(CHECK).digest()),
        ("x-amz-checksum-sha256", "sha256", hashlib.sha256(CHECK).digest()),
        ("Content-MD5", "md5", hashlib.md5(CHECK).digest()),
        ("x-amz-meta-zarrfs-crc32c", "crc32c", crc32c(CHECK).to_bytes(4, "big")),
        ("x-goog-meta-zarrfs-crc32c", "crc32c", crc32c(CHECK).to_bytes(4, "big")),
        ("x-ms-meta-zarrfs_crc32c", "crc32c", crc32c(CHECK).to_bytes(4, "big")),
    ],
)
def test_each_header_of_a_whole_body(name: str, algorithm: str, digest: bytes) -> None:
    expected = from_headers([("Content-Length", "9"), (name, b64(digest))])
    assert expected is not None
    assert (expected.algorithm, expected.digest) == (algorithm, digest)
    assert expected.source == name.lower()
    assert expected.matches(CHECK) and not expected.matches(b"123456780")


def test_x_goog_hash_in_one_field_or_several() -> None:
    crc, md5 = b64(crc32c(CHECK).to_bytes(4, "big")), b64(hashlib.md5(CHECK).digest())
    for fields in (
        [("x-goog-hash", f"crc32c={crc}, md5={md5}")],
        [("x-goog-hash", f"md5={md5}"), ("X-Goog-Hash", f"crc32c={crc}")],
    ):
        expected = from_headers(fields)
        assert expected is not None and expected.algorithm == "crc32c"
        assert expected.source == "x-goog-hash" and expected.matches(CHECK)
    only_md5 = from_headers([("x-goog-hash", f"md5={md5}")])  # a composite object has none
    assert only_md5 is not None and only_md5.algorithm == "md5" and only_md5.matches(CHECK)


def test_the_cheapest_checksum_is_taken() -> None:
    fields = [
        ("Content-MD5", b64(hashlib.md5(CHECK).digest())),
        ("x-amz-checksum-sha256", b64(hashlib.sha256(CHECK).digest())),
        ("x-amz-checksum-crc32", b64(zlib.crc32(CHECK).to_bytes(4, "big"))),
    ]
    expected = from_headers(fields)
    assert expected is not None and expected.algorithm == "crc32"


def test_what_is_no_checksum_of_the_body() -> None:
    """Nothing is guessed: a multipart upload's checksum of checksums, a field given
    twice with different values, a digest of the wrong size or not base64, an
    algorithm not known here, GCS's hash of a body it decompressed on the way (the
    hash is of the stored bytes), and the ETag (an MD5 only sometimes)."""
    crc = b64(crc32c(CHECK).to_bytes(4, "big"))
    sha = b64(hashlib.sha256(CHECK).digest())
    cases = [
        [("x-amz-checksum-crc32c", f"{crc}-3")],
        [("x-amz-checksum-sha256", sha), ("x-amz-checksum-type", "COMPOSITE")],
        [("Content-MD5", b64(hashlib.md5(CHECK).digest())), ("Content-MD5", b64(b"x" * 16))],
        [("Content-MD5", crc)],
        [("x-amz-checksum-crc32c", "%%%")],
        [("x-amz-checksum-crc64nvme", "AAAAAAAAAAA=")],
        [("x-goog-hash", "crc32c"), ("x-goog-hash", "sha512=AAAA")],
        [("x-goog-hash", f"crc32c={crc}"), ("x-goog-stored-content-encoding", "gzip")],
        [("ETag", f'"{hashlib.md5(CHECK).hexdigest()}"')],
        [],
    ]
    for fields in cases:
        assert from_headers(fields) is None, fields
    full = from_headers([("x-amz-checksum-sha256", sha), ("x-amz-checksum-type", "FULL_OBJECT")])
    assert full is not None and full.matches(CHECK)


def test_the_message_names_the_key_and_the_checksum_only() -> None:
    expected = Expected("crc32c", b"\x01\x02\x03\x04", checksums.HEADER)
    assert checksums.mismatch(expected) == (
        "the bytes received do not match the value's checksum (crc32c, x-amz-meta-zarrfs-crc32c)"
    )


def test_the_upload_checksum_setting() -> None:
    """SHA-256 unless the environment chooses one (obstore reads it) or asks for
    none, as AWS SDKs are told (``when_required``)."""
    assert checksums.upload_settings({}) == {"checksum_algorithm": "sha256"}
    assert checksums.upload_settings({"AWS_CHECKSUM_ALGORITHM": "crc64nvme"}) == {}
    assert checksums.upload_settings({"AWS_REQUEST_CHECKSUM_CALCULATION": "WHEN_REQUIRED"}) == {}
    assert checksums.upload_settings({"AWS_REQUEST_CHECKSUM_CALCULATION": "when_supported"}) == {
        "checksum_algorithm": "sha256"
    }
