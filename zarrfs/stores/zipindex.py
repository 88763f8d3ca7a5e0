"""The central directory of a zip archive, read once and indexed in little memory.

The archive is untrusted, and its central directory is the one part of it read
whole, at open: so everything about that read is bounded. At most MAX_MEMBERS
entries (the end record's count may lie: they are counted as they are read) and
MAX_DIRECTORY bytes of them (comments and extra fields of 64 KiB each could make it
terabytes, all zeros of a sparse file), read in pieces of a MiB. The index keeps,
per member, its name and a 37-byte row (numpy), not a Python object per field: a
few million members cost a few hundred MiB, not gigabytes.

It reads what zipfile reads (zip64 records and extra fields, data prepended to the
archive). Names, as a filesystem would see them: one with an empty, "." or ".."
component, a leading "/", a backslash or a NUL, or over 4096 bytes (PATH_MAX: no
mount could name it) is no key; of duplicates the last wins, as zipfile and
zarr-python read them; a name that also prefixes others ("a" beside "a/0") is a
prefix only, as a directory store's directory is no value.

Every local header the directory points at is remembered (sorted offsets): a
member's data must end before the next one begins, as zipfile checks since Python
3.12. Overlapping members are how a small archive holds terabytes (each member's
data quoting the next ones'); such a member is refused (zipstore.py).
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from zarrfs.stores.fileio import pread_exactly

MAX_MEMBERS = 4_000_000
MAX_NAME = 4096
MAX_DIRECTORY = 1 << 30

_END = struct.Struct("<4s4H2LH")  # end of central directory record
_LOCATOR = struct.Struct("<4sLQL")  # zip64 end of central directory locator
_END64 = struct.Struct("<4sQ2H2L4Q")  # zip64 end of central directory record
_CENTRAL = struct.Struct("<4s4B4HL2L5H2L")  # central directory file header
_END_SIG, _LOCATOR_SIG, _END64_SIG = b"PK\x05\x06", b"PK\x06\x07", b"PK\x06\x06"
_CENTRAL_SIG = b"PK\x01\x02"

UTF8 = 0x0800
_FULL32 = 0xFFFFFFFF  # a 32-bit field whose value is in the zip64 extra field
_PIECE = 1 << 20  # the central directory is read in these
_SHORT_READ = 4096  # or, after a comment at least this long, entry by entry
_FAR = 1 << 62  # an offset no file reaches (a zip64 value past int64)

_ROW = np.dtype(
    [
        ("offset", "<i8"),
        ("compressed", "<u8"),
        ("size", "<u8"),
        ("crc", "<u4"),
        ("time", "<u4"),
        ("method", "<u2"),
        ("flags", "<u2"),
        ("directory", "u1"),  # 1: a directory entry ("a/b/"), no member
    ]
)
_PACKED_ROW = struct.Struct("<qQQIIHHB")  # a _ROW as bytes
assert _PACKED_ROW.size == _ROW.itemsize


class Member(NamedTuple):
    offset: int  # of the local header, in the file
    compressed: int
    size: int
    crc: int
    method: int
    flags: int
    dos_time: int  # DOS date << 16 | DOS time
    limit: int  # where the next local header (or the central directory) begins


class BadArchive(Exception):
    """The archive as a whole cannot be read (at open only)."""


class Index:
    """Members by name: ``names`` sorted (keys and directory entries "a/b/"),
    ``rows`` parallel to them; ``starts``: every local header's offset, sorted."""

    def __init__(self, names: list[str], rows: np.ndarray, starts: np.ndarray, end: int) -> None:
        self.names = names
        self._rows = rows
        self._starts = starts
        self.data_end = end  # the central directory's start

    def member(self, key: str) -> Member | None:
        names = self.names
        i = bisect_left(names, key)
        if i == len(names) or names[i] != key:
            return None
        return self.member_at(i)

    def member_at(self, i: int) -> Member | None:
        """The member named ``names[i]``; None for a directory entry."""
        row = self._rows[i]
        if row["directory"]:
            return None
        offset = int(row["offset"])
        following = int(np.searchsorted(self._starts, offset, side="right"))
        limit = int(self._starts[following]) if following < len(self._starts) else self.data_end
        return Member(
            offset,
            int(row["compressed"]),
            int(row["size"]),
            int(row["crc"]),
            int(row["method"]),
            int(row["flags"]),
            int(row["time"]),
            min(limit, self.data_end),
        )


def _key(raw: bytes, flags: int) -> tuple[str, bool] | None:
    """(key, whether it is a directory entry) of a member name; None for a name
    that is no key (see the module's docstring)."""
    if len(raw) > MAX_NAME:
        return None
    try:  # ASCII is the same in both encodings, and its codec the fastest
        name = raw.decode("ascii" if raw.isascii() else "utf-8" if flags & UTF8 else "cp437")
    except UnicodeDecodeError:
        return None
    directory = name.endswith("/")
    body = name[:-1] if directory else name
    padded = f"/{body}/"  # each component between slashes: none empty, "." or ".."
    if "//" in padded or "/./" in padded or "/../" in padded or "\\" in body or "\0" in body:
        return None
    return body, directory


def _end_record(fd: int, file_size: int) -> tuple[int, int, int, int]:
    """(members, central directory size, its start in the file, and how far that
    is from where the archive says), found as zipfile finds them: the end record
    last in the file or before a comment of at most 64 KiB, zip64 records before."""
    tail_start = max(file_size - _END.size - 0xFFFF, 0)
    tail = pread_exactly(fd, tail_start, file_size - tail_start)
    at = len(tail) - _END.size
    # Without a comment the record is last: look there first, as its own fields
    # might hold the signature.
    if at >= 0 and (tail[at : at + 4] != _END_SIG or tail[-2:] != b"\0\0"):
        at = tail.rfind(_END_SIG, 0, at + 4)
    if at < 0:
        raise BadArchive("no end of central directory record")
    _, _, _, _, members, directory_size, offset, _ = _END.unpack_from(tail, at)
    location = tail_start + at
    if location >= _LOCATOR.size + _END64.size:
        locator = pread_exactly(fd, location - _LOCATOR.size, _LOCATOR.size)
        signature, disk, _, disks = _LOCATOR.unpack(locator)
        if signature == _LOCATOR_SIG:
            if disk != 0 or disks > 1:
                raise BadArchive("split across several files")
            position = location - _LOCATOR.size - _END64.size
            record = _END64.unpack(pread_exactly(fd, position, _END64.size))
            if record[0] == _END64_SIG:
                members, directory_size, offset = record[7:10]
                location = position
    if directory_size > location:
        raise BadArchive("bad central directory size")
    start = location - directory_size
    return members, directory_size, start, start - offset


def read_index(fd: int, file_size: int) -> Index:
    """The index of the archive open as ``fd``; BadArchive when it cannot be read."""
    declared, size, start, shift = _end_record(fd, file_size)
    if declared > MAX_MEMBERS:
        raise BadArchive(f"{declared} members, more than {MAX_MEMBERS}")
    if size > MAX_DIRECTORY:
        raise BadArchive(f"a central directory of {size} bytes, more than {MAX_DIRECTORY}")
    names: list[str] = []
    rows = bytearray()  # _ROW records, packed as they are read
    starts = array("q")  # every entry's local header, keys or not
    pack = _PACKED_ROW.pack
    for count, (raw, fields, extra) in enumerate(_entries(fd, start, size), 1):
        if count > MAX_MEMBERS:  # the end record's count may lie
            raise BadArchive(f"more than {MAX_MEMBERS} members")
        flags, method, time, date, crc, compressed, length = fields[5:12]
        offset = fields[18]
        if _FULL32 in (length, compressed, offset):
            length, compressed, offset = _zip64(extra, length, compressed, offset)
        # Offsets count from the archive's start: data prepended to it (as to a
        # self-extracting archive) shifts them as much as the central directory.
        offset = min(offset + shift, _FAR)
        starts.append(offset)
        named = _key(raw, flags)
        if named is None:
            continue
        name, directory = named
        names.append(f"{name}/" if directory else name)
        rows += pack(offset, compressed, length, crc, date << 16 | time, method, flags, directory)
    return _sorted_index(names, rows, starts, start)


def _sorted_index(names: list[str], packed: bytearray, starts: array[int], end: int) -> Index:
    rows = np.frombuffer(packed, dtype=_ROW)
    # Stable: of equal names the later entry stays later, and the last of each run
    # (the archive's last member of that name) is kept.
    by_name = np.array(names, dtype=object)
    names.clear()
    order = np.argsort(by_name, kind="stable")
    ordered: list[str] = by_name[order].tolist()
    del by_name
    rows = rows[order]  # a copy: the packed rows are freed
    keep = [i + 1 == len(ordered) or ordered[i] != ordered[i + 1] for i in range(len(ordered))]
    # A key that also prefixes other names ("a" beside "a/0") is a prefix only.
    parents = _parents(ordered)
    for i, name in enumerate(ordered):
        if keep[i] and name in parents:
            keep[i] = False
    if not all(keep):
        ordered = [name for name, kept in zip(ordered, keep) if kept]
        rows = rows[np.array(keep, dtype=bool)]
    # Sorted, duplicates kept: the next header after an offset is the first larger one.
    return Index(ordered, rows, np.sort(np.frombuffer(starts, dtype=np.int64)), end)


def _parents(names: list[str]) -> set[str]:
    """Every directory the names lie in ("a" and "a/b" for "a/b/c"; "a/b" for the
    directory entry "a/b/")."""
    parents: set[str] = set()
    for name in names:
        head = name[:-1] if name.endswith("/") else name.rpartition("/")[0]
        while head and head not in parents:
            parents.add(head)
            head = head.rpartition("/")[0]
    return parents


def _zip64(extra: bytes, length: int, compressed: int, offset: int) -> tuple[int, int, int]:
    """The values of the fields that are 0xFFFFFFFF, from the zip64 extra field
    (which holds those alone, in this order)."""
    while len(extra) >= 4:
        kind, field_size = struct.unpack_from("<HH", extra)
        if kind == 0x0001:
            data = extra[4 : 4 + field_size]
            found = iter(v for (v,) in struct.iter_unpack("<Q", data[: len(data) // 8 * 8]))
            try:
                length = next(found) if length == _FULL32 else length
                compressed = next(found) if compressed == _FULL32 else compressed
                offset = next(found) if offset == _FULL32 else offset
            except StopIteration:
                raise BadArchive("corrupt zip64 extra field") from None
            return length, compressed, offset
        extra = extra[4 + field_size :]
    raise BadArchive("missing zip64 extra field")


def _entries(fd: int, start: int, size: int) -> Iterator[tuple[bytes, tuple[Any, ...], bytes]]:
    """(name, header fields, extra field) of each central directory entry, read in
    pieces of _PIECE bytes; comments are skipped, and long ones (of a sparse file's
    holes) left unread: after one, the next read is of the next entry alone."""
    buffer, at, position, end = b"", 0, start, start + size
    ahead = _PIECE

    def refill(n: int) -> None:
        """At least ``n`` bytes in the buffer from ``at`` on."""
        nonlocal buffer, at, position
        more = pread_exactly(fd, position, max(min(max(n, ahead), end - position), 0))
        position += len(more)
        buffer, at = buffer[at:] + more, 0
        if len(buffer) < n:
            raise BadArchive("truncated central directory")

    unpack, header = _CENTRAL.unpack_from, _CENTRAL.size
    consumed = 0
    while consumed < size:
        if len(buffer) - at < header:
            refill(header)
        fields = unpack(buffer, at)
        if fields[0] != _CENTRAL_SIG:
            raise BadArchive("bad central directory entry")
        name_length, extra_length, comment_length = fields[12:15]
        whole = header + name_length + extra_length
        if len(buffer) - at < whole:
            refill(whole)
        names_at = at + header
        raw = buffer[names_at : names_at + name_length]
        extra = buffer[names_at + name_length : at + whole]
        at += whole
        consumed += whole + comment_length
        ahead = _PIECE if comment_length < _SHORT_READ else _SHORT_READ
        if comment_length <= len(buffer) - at:
            at += comment_length
        else:  # skipped unread
            position += comment_length - (len(buffer) - at)
            buffer, at = b"", 0
            if position > end:
                raise BadArchive("truncated central directory")
        yield raw, fields, extra
