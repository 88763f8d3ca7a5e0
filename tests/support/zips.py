"""Zip archives built byte by byte, so that every field can lie (declared sizes,
CRCs, offsets, zip64 fields, comments), and the ``open_zip`` fixture: a ZipStore
factory whose stores are closed after the test."""

from __future__ import annotations

import bz2
import os
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from zarrfs.stores.zipstore import ZipStore

STORED, DEFLATED, BZIP2 = 0, 8, 12
LOCAL = struct.Struct("<4s2B4HL2L2H")
CENTRAL = struct.Struct("<4s4B4HL2L5H2L")
END = struct.Struct("<4s4H2LH")
FULL32 = 0xFFFFFFFF


@dataclass
class Entry:
    """One member as the archive declares it. ``data`` is what is stored; the other
    fields default to the truth about it (``value``: the bytes it inflates to)."""

    name: str
    data: bytes
    method: int = STORED
    size: int | None = None  # declared uncompressed size
    crc: int | None = None
    compressed: int | None = None  # declared compressed size
    flags: int = 0
    zip64: bool = False  # sizes and offset in a zip64 extra field of the central entry
    offset: int | None = None  # where the central entry says its local header is
    local: bool = True  # write a local header and data (False: a central entry only)
    comment: int = 0  # bytes of comment after the central entry (written as a hole)


def member(name: str, value: bytes, method: int = STORED, **fields: object) -> Entry:
    """An honest member holding ``value``; ``fields`` override what it declares."""
    if method == DEFLATED:
        compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
        data = compressor.compress(value) + compressor.flush()
    elif method == BZIP2:
        data = bz2.compress(value, 9)
    else:
        data = value
    entry = Entry(name, data, method, len(value), zlib.crc32(value))
    for key, value_ in fields.items():
        setattr(entry, key, value_)
    return entry


def deflated_zeros(mib: int) -> bytes:
    """A raw deflate stream of ``mib`` MiB of zeros (about 1 KiB per MiB)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    zeros = bytes(1 << 20)
    return b"".join(compressor.compress(zeros) for _ in range(mib)) + compressor.flush()


def zeros_crc(nbytes: int) -> int:
    crc, zeros = 0, bytes(1 << 20)
    for start in range(0, nbytes, len(zeros)):
        crc = zlib.crc32(zeros[: min(len(zeros), nbytes - start)], crc)
    return crc


def local_header(entry: Entry) -> bytes:
    """The local header ``build`` writes before the entry's data, its name included."""
    name = entry.name.encode()
    crc = zlib.crc32(entry.data) if entry.crc is None else entry.crc
    size = len(entry.data) if entry.size is None else entry.size
    header = LOCAL.pack(
        b"PK\x03\x04", 20, 0, entry.flags, entry.method, 0, 0x21, crc & FULL32,
        len(entry.data) & FULL32, size & FULL32, len(name), 0,
    )  # fmt: skip
    return header + name


def build(path: Path, entries: list[Entry], *, declared_members: int | None = None) -> Path:
    """The archive: local headers and data in order, then the central directory (with
    holes for comments: a sparse file), then the end record."""
    offsets = []
    with open(path, "wb") as f:
        for entry in entries:
            offsets.append(f.tell())
            if not entry.local:
                continue
            f.write(local_header(entry) + entry.data)
        start = f.tell()
        for entry, offset in zip(entries, offsets):
            name = entry.name.encode()
            crc = zlib.crc32(entry.data) if entry.crc is None else entry.crc
            size = len(entry.data) if entry.size is None else entry.size
            compressed = len(entry.data) if entry.compressed is None else entry.compressed
            offset = offset if entry.offset is None else entry.offset
            extra = b""
            if entry.zip64:
                extra = struct.pack("<HH3Q", 1, 24, size, compressed, offset)
                size = compressed = offset = FULL32
            fields = (entry.flags, entry.method, 0, 0x21, crc & FULL32, compressed, size)
            lengths = (len(name), len(extra), entry.comment)
            header = CENTRAL.pack(b"PK\x01\x02", 20, 3, 20, 0, *fields, *lengths, 0, 0, 0, offset)
            f.write(header + name + extra)
            if entry.comment:
                f.seek(entry.comment, os.SEEK_CUR)
        directory = f.tell() - start
        count = len(entries) if declared_members is None else declared_members
        f.write(END.pack(b"PK\x05\x06", 0, 0, count, count, directory, start, 0))
    return path


def central_only(path: Path, count: int, comment: int) -> Path:
    """``count`` central entries of empty stored members, each followed by a comment of
    ``comment`` bytes written as a hole: a directory of gigabytes costing nothing on disk."""
    entries = [member(f"k/{i}", b"", comment=comment) for i in range(count)]
    return build(path, entries)


def patch_central(path: Path, name: str, offset: int, value: bytes) -> Path:
    """Overwrite bytes at ``offset`` of the (last) central directory entry of ``name``."""
    data = bytearray(path.read_bytes())
    end = data.rindex(b"PK\x05\x06")
    count, _, at = struct.unpack_from("<H2L", data, end + 10)
    found = None
    for _ in range(count):
        lengths = struct.unpack_from("<3H", data, at + 28)
        if data[at + 46 : at + 46 + lengths[0]] == name.encode():
            found = at
        at += 46 + sum(lengths)
    assert found is not None, name
    data[found + offset : found + offset + len(value)] = value
    path.write_bytes(data)
    return path


@pytest.fixture
def open_zip() -> Iterator[Callable[[Path], ZipStore]]:
    """ZipStore factory; every store it made is closed after the test."""
    stores: list[ZipStore] = []

    def make(path: Path) -> ZipStore:
        stores.append(ZipStore(str(path)))
        return stores[-1]

    yield make
    for store in stores:
        store.close()
