"""A read-only store over a .zip archive as zarr-python's ZipStore writes it: each
key is a member's name ("a/0.0", "zarr.json"); directories may lack entries.

The archive is untrusted. Its central directory is indexed once at open by a
parser of our own, read in bounded pieces: it reads what zipfile reads (zip64
records and extra fields, data prepended to the archive) but can refuse too many
members (MAX_MEMBERS) before holding them all. A corrupt central directory
refuses the archive with one StoreError. Names, as a filesystem would see them:
one with an empty, "." or ".." component, a leading "/", a backslash or a NUL,
or over 4096 bytes (PATH_MAX: no mount could name it) is no key, never followed;
of duplicates the last wins, as zipfile and zarr-python read them (zarr-python
"overwrites" a key by appending a member); a name that also prefixes others ("a"
beside "a/0") is a prefix only, as a directory store's directory is no value.

Reads are ``os.pread``s of one descriptor (no shared file position, so worker
threads need no lock) of the member's own local header and data. Compressed
members (deflate, bzip2, LZMA) are inflated in bounded steps, never past their
declared size, which ``get`` checks against its limit before reading. A bad
member (CRC, local header, truncated or corrupt data, encrypted, unknown method)
raises InvalidValueError, which the chunk layer reports as that chunk being bad;
such a member is still a key (listed, scanned), never taken for a missing one.
"""

from __future__ import annotations

import bz2
import contextlib
import errno
import lzma
import os
import stat
import struct
import zlib
from bisect import bisect_left
from collections.abc import Iterator
from datetime import datetime
from typing import Any, NamedTuple

from zarrfs.errors import InvalidValueError, StoreError
from zarrfs.stores.base import Listing, WriteRefusingStore, check_ranges, resolve_range
from zarrfs.stores.fileio import CLOEXEC, pread_exactly

MAX_MEMBERS = 10_000_000
MAX_NAME = 4096

_END = struct.Struct("<4s4H2LH")  # end of central directory record
_LOCATOR = struct.Struct("<4sLQL")  # zip64 end of central directory locator
_END64 = struct.Struct("<4sQ2H2L4Q")  # zip64 end of central directory record
_CENTRAL = struct.Struct("<4s4B4HL2L5H2L")  # central directory file header
_LOCAL = struct.Struct("<4s2B4HL2L2H")  # local file header
_END_SIG, _LOCATOR_SIG, _END64_SIG = b"PK\x05\x06", b"PK\x06\x07", b"PK\x06\x06"
_CENTRAL_SIG, _LOCAL_SIG = b"PK\x01\x02", b"PK\x03\x04"

_STORED, _DEFLATED, _BZIP2, _LZMA = 0, 8, 12, 14
_ENCRYPTED, _UTF8 = 0x0001, 0x0800
# Methods of APPNOTE.TXT 4.4.5 (and WinZip's AES) zarrfs does not read, named in errors.
_METHODS = {
    1: "shrunk",
    6: "imploded",
    9: "deflate64",
    18: "IBM TERSE",
    19: "IBM LZ77",
    93: "zstd",
    94: "MP3",
    95: "xz",
    96: "JPEG",
    97: "WavPack",
    98: "PPMd",
    99: "AES encrypted",
}
_FULL32 = 0xFFFFFFFF  # a 32-bit field whose value is in the zip64 extra field
_PIECE = 1 << 20  # the central directory and compressed data are read in these


class _Member(NamedTuple):
    offset: int  # of the local header, in the file
    compressed: int
    size: int
    crc: int
    method: int
    flags: int
    dos_time: int  # DOS date << 16 | DOS time


class _BadArchive(Exception):
    """The archive as a whole cannot be read (at open only)."""


class ZipStore(WriteRefusingStore):
    read_only = True
    remote = False
    listable = True

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        try:
            # O_NONBLOCK: a FIFO named like an archive must not block the open.
            self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | CLOEXEC)
        except OSError as e:
            raise StoreError(f"opening {self.path!r}: {e.strerror}", e.errno or errno.EIO) from e
        try:
            st = os.fstat(self._fd)
            if not stat.S_ISREG(st.st_mode):
                raise _BadArchive("not a regular file")
            self._mtime = st.st_mtime
            self._members, self._names, self._data_end = _index(self._fd, st.st_size)
        except (_BadArchive, OSError) as e:
            self.close()
            reason = e.strerror if isinstance(e, OSError) else str(e)
            raise StoreError(f"opening {self.path!r}: not a readable zip archive: {reason}") from e
        except BaseException:
            self.close()
            raise

    def describe(self) -> str:
        return self.path

    def close(self) -> None:
        fd, self._fd = getattr(self, "_fd", -1), -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        with contextlib.suppress(OSError):
            self.close()

    # -- reading -----------------------------------------------------------------------

    def _member(self, key: str) -> _Member | None:
        """The member that is ``key``'s value; InvalidValueError if it may not be read."""
        member = self._members.get(key)
        reason = None if member is None else _refusal(member)
        if reason is not None:
            raise InvalidValueError(f"reading {key!r}: {reason}")
        return member

    def _pread(self, key: str, offset: int, count: int) -> bytes:
        try:
            return pread_exactly(self._fd, offset, count)
        except OSError as e:
            raise StoreError(f"reading {key!r}: {e.strerror}", e.errno or errno.EIO) from e

    def _data_start(self, key: str, member: _Member) -> int:
        """Where the member's data begins: after its local header, whose extra field
        may differ from the central directory's (zip64 sizes are often local only).
        The local name must be the central one: a central entry pointing at another
        member's header is caught."""
        name = key.encode("utf-8" if member.flags & _UTF8 else "cp437")
        if member.offset < 0:
            raise InvalidValueError(f"reading {key!r}: local header before the archive")
        header = self._pread(key, member.offset, _LOCAL.size + len(name))
        if len(header) < _LOCAL.size or header[:4] != _LOCAL_SIG:
            raise InvalidValueError(f"reading {key!r}: no local header at {member.offset}")
        name_length, extra_length = _LOCAL.unpack_from(header)[-2:]
        if name_length != len(name) or header[_LOCAL.size :] != name:
            raise InvalidValueError(f"reading {key!r}: local header names another member")
        start = member.offset + _LOCAL.size + name_length + extra_length
        if start + member.compressed > self._data_end:
            raise InvalidValueError(f"reading {key!r}: data runs past the archive's members")
        return start

    def get(self, key: str, *, limit: int | None = None) -> bytes | None:
        member = self._member(key)
        if member is None:
            return None
        if limit is not None and member.size > limit:
            raise InvalidValueError(
                f"reading {key!r}: {member.size} bytes, more than the limit of {limit}"
            )
        start = self._data_start(key, member)
        if member.method != _STORED:
            return b"".join(self._inflate(key, member, start, member.size))
        data = self._pread(key, start, member.size)
        if len(data) < member.size:
            raise InvalidValueError(f"reading {key!r}: truncated (the archive shrank)")
        _check_crc(key, member, zlib.crc32(data))
        return data

    def get_ranges(self, key: str, ranges: list[tuple[int, int]]) -> list[bytes] | None:
        """A stored member: one pread per range of just its bytes (no CRC: that needs
        the whole value). A compressed one: inflated from its start to the furthest
        range's end, keeping only the ranges' bytes, so memory stays within what
        ``check_ranges`` allowed; the CRC is checked if that reaches the value's end."""
        check_ranges(ranges)
        member = self._member(key)
        if member is None:
            return None
        spans = [resolve_range(s, n, member.size) for s, n in ranges]
        end = max((offset + count for offset, count in spans if count), default=0)
        if end == 0:
            return [b"" for _ in spans]
        data_start = self._data_start(key, member)
        if member.method == _STORED:
            out = [self._pread(key, data_start + offset, count) for offset, count in spans]
            if any(len(part) < count for part, (_, count) in zip(out, spans)):
                raise InvalidValueError(f"reading {key!r}: truncated (the archive shrank)")
            return out
        parts = [bytearray() for _ in spans]
        position = 0
        for piece in self._inflate(key, member, data_start, end):
            stop = position + len(piece)
            for (offset, count), part in zip(spans, parts):
                low, high = max(offset, position), min(offset + count, stop)
                if low < high:
                    part += piece[low - position : high - position]
            position = stop
        return [bytes(part) for part in parts]

    def _inflate(self, key: str, member: _Member, start: int, count: int) -> Iterator[bytes]:
        """The first ``count`` (at most the declared size) bytes of a compressed
        member, in pieces of at most _PIECE bytes: each step asks the decompressor
        for no more than is still wanted, so a bomb costs no memory beyond that."""
        end = start + member.compressed
        failure = f"reading {key!r}: corrupt compressed data"
        try:
            decompressor, position = self._decompressor(key, member, start)
        except (lzma.LZMAError, ValueError) as e:
            raise InvalidValueError(f"{failure} ({e})") from e
        pending = b""  # input the decompressor handed back (zlib's unconsumed_tail)
        have = crc = 0
        while have < count and not decompressor.eof:
            if not pending:
                if position >= end:
                    break
                pending = self._pread(key, position, min(_PIECE, end - position))
                if not pending:
                    break
                position += len(pending)
            try:
                piece = decompressor.decompress(pending, min(_PIECE, count - have))
            except (zlib.error, lzma.LZMAError, OSError, EOFError, ValueError) as e:
                raise InvalidValueError(f"{failure} ({e})") from e
            # bz2 and lzma keep unused input themselves and return less than asked
            # only once they need more: no input is lost by reading on.
            pending = getattr(decompressor, "unconsumed_tail", b"")
            have += len(piece)
            crc = zlib.crc32(piece, crc)
            yield piece
        if have < count:
            raise InvalidValueError(f"{failure} (ends after {have} of {count} bytes)")
        if count == member.size:
            _check_crc(key, member, crc)

    def _decompressor(self, key: str, member: _Member, start: int) -> tuple[Any, int]:
        """A decompressor for the member's data and where its stream begins."""
        if member.method == _DEFLATED:
            return zlib.decompressobj(-zlib.MAX_WBITS), start
        if member.method == _BZIP2:
            return bz2.BZ2Decompressor(), start
        # LZMA: version (2 bytes), properties' length (2 bytes, 5 for LZMA1) and the
        # properties (lc/lp/pb byte, dictionary size) precede a raw LZMA1 stream.
        header = self._pread(key, start, 9)
        if member.compressed < 9 or len(header) < 9 or header[2:4] != b"\x05\x00":
            raise ValueError("bad LZMA header")
        lclppb, dictionary = header[4], int.from_bytes(header[5:9], "little")
        if lclppb >= 9 * 5 * 5:
            raise ValueError("bad LZMA properties")
        # liblzma allocates the whole dictionary up front; a stream can refer back
        # no further than it has produced, so the value's size is always enough.
        dictionary = max(min(dictionary, member.size), 4096)
        lzma1 = {"id": lzma.FILTER_LZMA1, "dict_size": dictionary}
        lzma1.update(lc=lclppb % 9, lp=lclppb // 9 % 5, pb=lclppb // 45)
        return lzma.LZMADecompressor(lzma.FORMAT_RAW, filters=[lzma1]), start + 9

    def size(self, key: str) -> int | None:
        member = self._member(key)
        return None if member is None else member.size

    def contains(self, key: str) -> bool:
        return key in self._members

    def mtime(self, key: str) -> float | None:
        """The member's DOS timestamp (local time, as zipfile writes it), or the
        archive's modification time where that is no valid date."""
        member = self._members.get(key)
        if member is None:
            return None
        date, time = member.dos_time >> 16, member.dos_time & 0xFFFF
        day = ((date >> 9) + 1980, (date >> 5) & 0xF, date & 0x1F)
        try:
            return datetime(*day, time >> 11, (time >> 5) & 0x3F, (time & 0x1F) * 2).timestamp()
        except (ValueError, OverflowError, OSError):
            return self._mtime

    def list_dir(self, prefix: str) -> Listing:
        """Keys and sub-prefixes below ``prefix``, implicit directories included. A
        sub-prefix's names are skipped by one bisection, so a directory of a million
        chunks costs its parent's listing one lookup."""
        base = _base(prefix)
        keys: list[str] = []
        prefixes: list[str] = []
        names = self._names
        i = bisect_left(names, base)
        while i < len(names) and names[i].startswith(base):
            head, slash, _ = names[i][len(base) :].partition("/")
            if slash:
                prefixes.append(head)
                # "0" follows "/": every name under base/head/ sorts before base/head0.
                i = bisect_left(names, f"{base}{head}0", i)
                continue
            if head:  # else the directory entry of ``prefix`` itself ("a/")
                keys.append(head)
            i += 1
        return Listing(tuple(keys), tuple(prefixes))

    def scan(self, prefix: str) -> Iterator[tuple[str, int]]:
        """Sizes from the central directory: nothing is read. Members that ``get``
        refuses without reading (encrypted, unknown method) are keys here too, with
        their declared sizes: they are stored values a reader cannot have, which
        ``zarrfs check`` must report, not count as missing."""
        base = _base(prefix)
        names = self._names
        i = bisect_left(names, base)
        while i < len(names) and names[i].startswith(base):
            member = self._members.get(names[i])
            if member is not None:
                yield names[i][len(base) :], member.size
            i += 1

    # -- writing: an archive is read-only (WriteRefusingStore) ---------------------------

    def refusal(self) -> str:
        return f"{self.path}: a zip archive is read-only"


def _base(prefix: str) -> str:
    """``prefix`` as the start of the names below it ("" or "a/b/")."""
    relative = "/".join(part for part in prefix.split("/") if part)
    return f"{relative}/" if relative else ""


def _refusal(member: _Member) -> str | None:
    """Why a member may not be read, if that shows without reading it."""
    if member.flags & _ENCRYPTED:
        return "encrypted member"
    if member.method not in (_STORED, _DEFLATED, _BZIP2, _LZMA):
        known = _METHODS.get(member.method)
        name = f" ({known})" if known else ""
        return f"compression method {member.method}{name} is not supported"
    if member.method == _STORED and member.compressed != member.size:
        return "stored member whose sizes differ"
    return None


def _check_crc(key: str, member: _Member, crc: int) -> None:
    if crc != member.crc:
        raise InvalidValueError(f"reading {key!r}: bad CRC-32 (corrupt member)")


def _key(raw: bytes, flags: int) -> tuple[str, bool] | None:
    """(key, whether it is a directory entry) of a member name; None for a name
    that is no key (see the module's docstring)."""
    if len(raw) > MAX_NAME:
        return None
    try:  # ASCII is the same in both encodings, and its codec the fastest
        name = raw.decode("ascii" if raw.isascii() else "utf-8" if flags & _UTF8 else "cp437")
    except UnicodeDecodeError:
        return None
    directory = name.endswith("/")
    body = name[:-1] if directory else name
    if "\\" in body or "\0" in body or {"", ".", ".."} & set(body.split("/")):
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
        raise _BadArchive("no end of central directory record")
    _, _, _, _, members, directory_size, offset, _ = _END.unpack_from(tail, at)
    location = tail_start + at
    if location >= _LOCATOR.size + _END64.size:
        locator = pread_exactly(fd, location - _LOCATOR.size, _LOCATOR.size)
        signature, disk, _, disks = _LOCATOR.unpack(locator)
        if signature == _LOCATOR_SIG:
            if disk != 0 or disks > 1:
                raise _BadArchive("split across several files")
            position = location - _LOCATOR.size - _END64.size
            record = _END64.unpack(pread_exactly(fd, position, _END64.size))
            if record[0] == _END64_SIG:
                members, directory_size, offset = record[7:10]
                location = position
    if directory_size > location:
        raise _BadArchive("bad central directory size")
    start = location - directory_size
    return members, directory_size, start, start - offset


def _index(fd: int, file_size: int) -> tuple[dict[str, _Member], list[str], int]:
    """Members by key; the sorted keys and directory entries ("a/b/"); where the
    members' data ends (the central directory's start)."""
    declared, size, start, shift = _end_record(fd, file_size)
    if declared > MAX_MEMBERS:
        raise _BadArchive(f"{declared} members, more than {MAX_MEMBERS}")
    members: dict[str, _Member] = {}
    directories: set[str] = set()
    for count, (raw, fields, extra) in enumerate(_entries(fd, start, size), 1):
        if count > MAX_MEMBERS:  # the end record's count may lie
            raise _BadArchive(f"more than {MAX_MEMBERS} members")
        flags, method, time, date, crc, compressed, length = fields[5:12]
        offset = fields[18]
        if _FULL32 in (length, compressed, offset):
            length, compressed, offset = _zip64(extra, length, compressed, offset)
        named = _key(raw, flags)
        if named is None:
            continue
        if named[1]:
            directories.add(f"{named[0]}/")
            continue
        # Offsets count from the archive's start: data prepended to it (as to a
        # self-extracting archive) shifts them as much as the central directory.
        member = _Member(offset + shift, compressed, length, crc, method, flags, date << 16 | time)
        members[named[0]] = member
    names = sorted({*members, *directories})
    # A key that also prefixes other names ("a" beside "a/0") is a prefix only.
    shadowed = {key for key in members if _has_under(names, f"{key}/")}
    for key in shadowed:
        del members[key]
    return members, [name for name in names if name not in shadowed], start


def _has_under(names: list[str], base: str) -> bool:
    i = bisect_left(names, base)
    return i < len(names) and names[i].startswith(base)


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
                raise _BadArchive("corrupt zip64 extra field") from None
            return length, compressed, offset
        extra = extra[4 + field_size :]
    raise _BadArchive("missing zip64 extra field")


def _entries(fd: int, start: int, size: int) -> Iterator[tuple[bytes, tuple[Any, ...], bytes]]:
    """(name, header fields, extra field) of each central directory entry, read in
    pieces of _PIECE bytes: the directory itself may be gigabytes."""
    buffer, at, position, end = b"", 0, start, start + size

    def take(n: int) -> bytes:
        nonlocal buffer, at, position
        if len(buffer) - at < n:
            more = pread_exactly(fd, position, max(min(max(n, _PIECE), end - position), 0))
            position += len(more)
            buffer, at = buffer[at:] + more, 0
            if len(buffer) < n:
                raise _BadArchive("truncated central directory")
        at += n
        return buffer[at - n : at]

    consumed = 0
    while consumed < size:
        fields = _CENTRAL.unpack(take(_CENTRAL.size))
        if fields[0] != _CENTRAL_SIG:
            raise _BadArchive("bad central directory entry")
        name_length, extra_length, comment_length = fields[12:15]
        raw, extra = take(name_length), take(extra_length)
        take(comment_length)
        consumed += _CENTRAL.size + name_length + extra_length + comment_length
        yield raw, fields, extra
