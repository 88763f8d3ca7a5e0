"""Checksums that travel with values, so that a byte changed between the store and
zarrfs is an error rather than a wrong element (docs/semantics.md, "Integrity").

The object stores (S3, GCS, Azure) send with every value they PUT the CRC-32C of
the value as user metadata (``x-amz-meta-zarrfs-crc32c``, ``x-goog-meta-zarrfs-crc32c``,
``x-ms-meta-zarrfs_crc32c``), in the form S3 gives its own CRC-32C checksums (base64
of the 4 bytes, big-endian), and check every whole value they GET whose answer
carries it. The HTTP store checks a whole value against the checksum
headers the server sends, where they are of the value's bytes: ``Content-MD5``,
``x-amz-checksum-*`` (not a multipart upload's checksum of checksums), ``x-goog-hash``
and the object stores' own metadata (a bucket written by zarrfs, read over HTTPS).

Pure: nothing here does I/O. A checksum that cannot be parsed, or of an algorithm
not known here (CRC64NVME), is no checksum: nothing is checked rather than
something guessed. An ETag is never taken for an MD5 (with SSE-KMS, or for a
multipart upload, it is none).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import google_crc32c
import numpy as np

# The user metadata name of the CRC-32C the object stores send with every value (S3
# keeps metadata names in lower case; obstore sends it as x-amz-meta-<name>, and for
# GCS as x-goog-meta-<name>). Azure's metadata names are C# identifiers, with no
# "-" (a PUT with one is refused: 400 InvalidMetadata): there, "_".
METADATA = "zarrfs-crc32c"
HEADER = f"x-amz-meta-{METADATA}"
GCS_HEADER = f"x-goog-meta-{METADATA}"
AZURE_METADATA = "zarrfs_crc32c"
AZURE_HEADER = f"x-ms-meta-{AZURE_METADATA}"

# The environment variables of the S3 upload checksum (AWS conventions): obstore
# reads AWS_CHECKSUM_ALGORITHM itself; AWS SDKs send checksums only where an
# operation needs one when AWS_REQUEST_CHECKSUM_CALCULATION is "when_required".
ALGORITHM_VARIABLE = "AWS_CHECKSUM_ALGORITHM"
CALCULATION_VARIABLE = "AWS_REQUEST_CHECKSUM_CALCULATION"

Buffer = Any  # anything with the buffer protocol (bytes, memoryview, obstore's Bytes)


def _bytes_view(part: Buffer) -> np.ndarray:
    """``part`` as a flat uint8 array, without a copy: google-crc32c takes only
    read-only buffers without a release hook (bytes, numpy arrays), never a
    memoryview or a bytearray."""
    return np.frombuffer(memoryview(part).cast("B"), dtype=np.uint8)


def crc32c(value: Buffer | Sequence[Buffer]) -> int:
    """The CRC-32C (Castagnoli) of a value, given whole or as a sequence of parts
    stored one after the other. About 40 µs per MiB (google-crc32c, SSE4.2)."""
    try:
        whole = memoryview(value)
    except TypeError:  # a sequence of parts
        pass
    else:
        return int(google_crc32c.value(_bytes_view(whole)))
    crc = 0
    for part in value:
        crc = int(google_crc32c.extend(crc, _bytes_view(part)))
    return crc


def _crc32(view: Buffer) -> int:
    return zlib.crc32(memoryview(view).cast("B"))


def encode_crc(crc: int) -> str:
    """A 32-bit CRC as S3 gives it (``x-amz-checksum-crc32c``): base64, big-endian."""
    return base64.b64encode(crc.to_bytes(4, "big")).decode("ascii")


def put_attributes(value: Buffer | Sequence[Buffer], name: str = METADATA) -> dict[str, str]:
    """The obstore ``attributes`` of a PUT of ``value``: its CRC-32C as user metadata
    ``name``."""
    return {name: encode_crc(crc32c(value))}


def upload_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """The S3 configuration of the checksum obstore sends with each PUT body
    (``x-amz-checksum-sha256``, which S3 verifies before it stores the object):
    SHA-256 unless the environment chooses (``AWS_CHECKSUM_ALGORITHM``, read by
    obstore) or asks for none (``AWS_REQUEST_CHECKSUM_CALCULATION=when_required``,
    for a server that refuses the header). The digest costs nothing more: a signed
    request hashes its body with SHA-256 anyway, and obstore uses it for both."""
    if environ.get(ALGORITHM_VARIABLE):
        return {}
    if environ.get(CALCULATION_VARIABLE, "").strip().lower() == "when_required":
        return {}
    return {"checksum_algorithm": "sha256"}


@dataclass(frozen=True)
class Expected:
    """A checksum a value must have: ``algorithm`` ("crc32c", "md5", ...), the
    ``digest`` as it is sent (the CRCs big-endian), and ``source``, the header or
    metadata it came from (for messages: never the digest, nor the bytes)."""

    algorithm: str
    digest: bytes
    source: str

    def matches(self, value: Buffer) -> bool:
        return _DIGESTS[self.algorithm](value) == self.digest


def _hashed(name: str) -> Callable[[Buffer], bytes]:
    def digest(value: Buffer) -> bytes:
        return hashlib.new(name, memoryview(value).cast("B"), usedforsecurity=False).digest()

    return digest


_DIGESTS: dict[str, Callable[[Buffer], bytes]] = {
    "crc32c": lambda v: crc32c(v).to_bytes(4, "big"),
    "crc32": lambda v: _crc32(v).to_bytes(4, "big"),
    "sha1": _hashed("sha1"),
    "sha256": _hashed("sha256"),
    "md5": _hashed("md5"),
}
_SIZES = {"crc32c": 4, "crc32": 4, "sha1": 20, "sha256": 32, "md5": 16}
# Cheapest first (µs per MiB here: crc32c 40, crc32 290, sha1 540, sha256 580,
# md5 1400): one checksum is checked, the cheapest the answer carries.
_ORDER = ("crc32c", "crc32", "sha1", "sha256", "md5")


def _decoded(algorithm: str, text: str) -> bytes | None:
    """The digest of a base64 checksum, None if it is not one of ``algorithm``."""
    text = text.strip()
    try:
        digest = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return digest if len(digest) == _SIZES[algorithm] else None


def from_attributes(
    attributes: Mapping[str, str], name: str = METADATA, source: str = HEADER
) -> Expected | None:
    """The checksum of an object's user metadata ``name`` (obstore's ``attributes``
    of a GET; ``source``, its header), None where it has none (written by another
    tool) or it cannot be parsed."""
    text = attributes.get(name)
    if not isinstance(text, str):
        return None
    digest = _decoded("crc32c", text)
    return None if digest is None else Expected("crc32c", digest, source)


def from_headers(headers: Iterable[tuple[str, str]]) -> Expected | None:
    """The cheapest checksum of the whole body among an HTTP answer's header fields
    (name, value pairs, a name given more than once included), None without one.

    A field given twice with different values, a value that is no base64 digest of
    its algorithm's size, an ``x-amz-checksum-*`` of a multipart upload (``-N``
    after it, or ``x-amz-checksum-type: COMPOSITE``: a checksum of the parts'
    checksums) are no checksum. ``x-goog-hash`` holds ``crc32c=...`` and
    ``md5=...`` items, in one field or several; it is of the object as stored, so
    not of a body GCS decompressed on the way (``x-goog-stored-content-encoding``)."""
    values: dict[str, set[str]] = {}
    for name, value in headers:
        values.setdefault(name.strip().lower(), set()).add(value.strip())
    found: dict[str, Expected] = {}

    def offer(algorithm: str, texts: set[str], source: str) -> None:
        digests = {_decoded(algorithm, text) for text in texts}
        digest = digests.pop() if len(digests) == 1 else None
        if digest is not None and algorithm not in found:
            found[algorithm] = Expected(algorithm, digest, source)

    for header in (HEADER, GCS_HEADER, AZURE_HEADER):
        if header in values:
            offer("crc32c", values[header], header)
    composite = any(v.upper() == "COMPOSITE" for v in values.get("x-amz-checksum-type", ()))
    for algorithm in ("crc32c", "crc32", "sha1", "sha256"):
        name = f"x-amz-checksum-{algorithm}"
        if name in values and not composite:
            offer(algorithm, values[name], name)
    goog: dict[str, set[str]] = {}
    stored = values.get("x-goog-stored-content-encoding", {"identity"})
    transcoded = any(v.lower() != "identity" for v in stored)
    for field in () if transcoded else values.get("x-goog-hash", ()):
        for item in field.split(","):
            algorithm, sep, text = item.strip().partition("=")
            if sep and algorithm.strip().lower() in ("crc32c", "md5"):
                goog.setdefault(algorithm.strip().lower(), set()).add(text.strip())
    for algorithm, texts in goog.items():
        offer(algorithm, texts, "x-goog-hash")
    if "content-md5" in values:
        offer("md5", values["content-md5"], "content-md5")
    return next((found[a] for a in _ORDER if a in found), None)


def mismatch(expected: Expected) -> str:
    """Why a value that does not match ``expected`` is refused: it names the
    checksum, never the digests or the bytes."""
    return (
        "the bytes received do not match the value's checksum "
        f"({expected.algorithm}, {expected.source})"
    )
