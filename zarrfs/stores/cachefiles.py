"""The files of the disk cache (stores/diskcache.py), as pure functions: what a file
holds and how it is checked, what it is named, which files an eviction removes.

A cache file is one entry: a value of a store (or a byte range of it, or only its
version), with what it is of and the version it was read at:

    MAGIC  u32 header length  header (JSON)  payload  CRC-32C of header and payload

The header names the store, the key, the part ("value", "stat" or "range:S:L"),
the version (tag, mtime, size), whether the key was missing, and the payload's
length. A file is served only if its length, magic, header and digest all check
and it is of the store, key and part asked for: a truncated, corrupt or misplaced
file is never served. The check is against damage (a crash, a bad disk, a file cut
or swapped), not against whoever may write the private directory: a CRC-32C catches
every change of up to 32 consecutive bits and any other with odds of 2**-32, at
some 50 µs per MiB (SHA-256 took 580: a tenth of a cached read's time). When an
entry was last validated against the store is the file's modification time, set
explicitly (so re-stamping writes no bytes); when it was last used, its access time,
also set explicitly (the LRU order).
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from zarrfs.stores.checksums import crc32c

MAGIC = b"ZARRFS-CACHE-2\n"  # (files of another format are dropped as corrupt)
_LENGTH = struct.Struct("<I")
_CRC = struct.Struct(">I")
DIGEST = _CRC.size
MAX_HEADER = 64 << 10  # a header longer than this is corrupt (keys are short)
OVERHEAD = len(MAGIC) + _LENGTH.size + DIGEST  # bytes of a file besides header and payload

VALUE = "value"
STAT = "stat"


class CorruptEntry(Exception):
    """A cache file that is not a whole, intact entry of what was asked for."""


def range_part(start: int, length: int) -> str:
    return f"range:{start}:{length}"


@dataclass(frozen=True)
class Entry:
    """What a cache file says of itself (its payload aside)."""

    store: str  # the store's identity (its public URL)
    key: str
    part: str  # VALUE, STAT or range_part(start, length)
    tag: str | None  # the version's tag; None: the store named none
    mtime: float | None = None
    size: int | None = None  # of the whole value, as the store said
    missing: bool = False  # the key did not exist
    length: int = 0  # of the payload


def encode(entry: Entry, payload: bytes | memoryview) -> list[bytes | memoryview]:
    """The file's bytes in parts (the payload is not copied)."""
    header = json.dumps(
        {
            "store": entry.store,
            "key": entry.key,
            "part": entry.part,
            "tag": entry.tag,
            "mtime": entry.mtime,
            "size": entry.size,
            "missing": entry.missing,
            "length": len(payload),
        },
        separators=(",", ":"),
    ).encode()
    return [MAGIC + _LENGTH.pack(len(header)) + header, payload, _digest(header, payload)]


def _digest(header: bytes, payload: bytes | memoryview) -> bytes:
    return _CRC.pack(crc32c([header, payload]))


def header_length(start: bytes) -> int:
    """The length of the header from a file's first ``OVERHEAD - DIGEST`` bytes."""
    if len(start) < len(MAGIC) + _LENGTH.size or not start.startswith(MAGIC):
        raise CorruptEntry("not a cache file")
    (length,) = _LENGTH.unpack_from(start, len(MAGIC))
    if length > MAX_HEADER:
        raise CorruptEntry("header too long")
    return length


def decode(data: bytes | memoryview, store: str, key: str, part: str) -> tuple[Entry, memoryview]:
    """The entry and its payload (a view of ``data``) of a whole file's bytes, if
    they are intact and of ``store``, ``key`` and ``part``; CorruptEntry otherwise."""
    view = memoryview(data)
    length = header_length(bytes(view[: len(MAGIC) + _LENGTH.size]))
    begin = len(MAGIC) + _LENGTH.size
    if len(view) < begin + length + DIGEST:
        raise CorruptEntry("cut short")
    header = bytes(view[begin : begin + length])
    entry = _parse(header)
    end = begin + length + entry.length
    if len(view) != end + DIGEST:
        raise CorruptEntry(f"{len(view)} bytes, its header says {end + DIGEST}")
    payload = view[begin + length : end]
    if _digest(header, payload) != view[end:]:
        raise CorruptEntry("checksum mismatch")
    if (entry.store, entry.key, entry.part) != (store, key, part):
        raise CorruptEntry("an entry of something else")
    return entry, payload


def _parse(header: bytes) -> Entry:
    try:
        fields = json.loads(header)
    except (ValueError, UnicodeDecodeError):
        raise CorruptEntry("header is not JSON") from None
    if not isinstance(fields, dict):
        raise CorruptEntry("header is not an object")
    kinds = {
        "store": (str,),
        "key": (str,),
        "part": (str,),
        "tag": (str, type(None)),
        "mtime": (int, float, type(None)),
        "size": (int, type(None)),
        "missing": (bool,),
        "length": (int,),
    }
    for name, allowed in kinds.items():
        value = fields.get(name)
        if name not in fields or not isinstance(value, allowed):
            raise CorruptEntry(f"header field {name!r}")
        if allowed[0] is int and isinstance(value, bool):
            raise CorruptEntry(f"header field {name!r}")
    if fields["length"] < 0 or (fields["size"] is not None and fields["size"] < 0):
        raise CorruptEntry("negative length")
    return Entry(**fields)


# -- names -------------------------------------------------------------------------------


def key_digest(store: str, key: str) -> str:
    """40 hex digits naming (store, key): every file of the key starts with them. The
    store's length leads, so no split of one text into a store and a key names
    another (both may hold any character, a NUL too)."""
    named = f"{len(store)}:{store}{key}"
    return hashlib.sha256(named.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def file_name(store: str, key: str, part: str) -> str:
    """The cache file of one part of a key: ``<digest>.<part>``, ":" spelled "_"
    (no "/", no leading "."; the header says exactly what it holds)."""
    return f"{key_digest(store, key)}.{part.replace(':', '_')}"


def bucket_of(name: str) -> str:
    """The sub-directory of a file (256 of them, so no directory grows huge)."""
    return name[:2]


# -- size -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CachedFile:
    name: str
    size: int  # bytes
    used: int  # last use (access time, nanoseconds)


def to_evict(files: Iterable[CachedFile], target: int) -> tuple[list[CachedFile], int]:
    """The least recently used files to remove so that the rest total at most
    ``target`` bytes, and what the rest total."""
    ordered = sorted(files, key=lambda f: (f.used, f.name))
    total = sum(f.size for f in ordered)
    out = []
    for f in ordered:
        if total <= target:
            break
        out.append(f)
        total -= f.size
    return out, total


def low_water(max_bytes: int) -> int:
    """What an eviction brings the cache down to: a tenth under its bound, so that
    not every new file starts one."""
    return max_bytes - max_bytes // 10
