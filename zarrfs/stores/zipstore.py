"""A read-only store over a .zip archive as zarr-python's ZipStore writes it: each
key is a member's name ("a/0.0", "zarr.json"); directories may lack entries.

The archive is untrusted. Its central directory is indexed once at open, within
bounds of members, bytes and memory (zipindex.py, which also says which names are
keys); a corrupt central directory refuses the archive with one StoreError.

Reads are ``os.pread``s of one descriptor (no shared file position, so worker
threads need no lock) of the member's own local header and data, which must end
before the next member's local header begins (overlapping members are refused, as
zipfile refuses them). Compressed members (deflate, bzip2, LZMA) are inflated in
bounded steps, never past their declared size, which ``get`` checks against its
limit before reading; a range of one is inflated from its start, at most
MAX_INFLATED bytes into it. A bad member (CRC, local header, overlapping,
truncated or corrupt data, encrypted, unknown method) raises InvalidValueError,
which the chunk layer reports as that chunk being bad; such a member is still a
key (listed, scanned), never taken for a missing one.
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
from typing import Any

from zarrfs.errors import InvalidValueError, StoreError
from zarrfs.stores.base import Listing, WriteRefusingStore, check_ranges, resolve_range
from zarrfs.stores.fileio import CLOEXEC, pread_exactly
from zarrfs.stores.zipindex import UTF8 as _UTF8
from zarrfs.stores.zipindex import BadArchive, Member, read_index

# How far into a compressed member a range read inflates (its whole value, for a
# shard index at its end): a declared size may lie, and a few KiB of bzip2 inflate
# to gigabytes, so this bounds the time of one read.
MAX_INFLATED = 256 << 20

_LOCAL = struct.Struct("<4s2B4HL2L2H")  # local file header
_LOCAL_SIG = b"PK\x03\x04"

_STORED, _DEFLATED, _BZIP2, _LZMA = 0, 8, 12, 14
_ENCRYPTED = 0x0001
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
_PIECE = 1 << 20  # compressed data is read in these


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
                raise BadArchive("not a regular file")
            self._mtime = st.st_mtime
            self._index = read_index(self._fd, st.st_size)
        except (BadArchive, OSError) as e:
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

    def _member(self, key: str) -> Member | None:
        """The member that is ``key``'s value; InvalidValueError if it may not be read."""
        member = self._index.member(key)
        reason = None if member is None else _refusal(member)
        if reason is not None:
            raise InvalidValueError(f"reading {key!r}: {reason}")
        return member

    def _pread(self, key: str, offset: int, count: int) -> bytes:
        try:
            return pread_exactly(self._fd, offset, count)
        except OSError as e:
            raise StoreError(f"reading {key!r}: {e.strerror}", e.errno or errno.EIO) from e

    def _data_start(self, key: str, member: Member) -> int:
        """Where the member's data begins: after its local header, whose extra field
        may differ from the central directory's (zip64 sizes are often local only).
        The local name must be the central one: a central entry pointing at another
        member's header is caught. The data must end before the next local header:
        members that overlap are refused."""
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
        if start + member.compressed > self._index.data_end:
            raise InvalidValueError(f"reading {key!r}: data runs past the archive's members")
        if start + member.compressed > member.limit:
            raise InvalidValueError(
                f"reading {key!r}: its data overlaps the next member (a zip bomb's trick)"
            )
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
        if member.method != _STORED and end > MAX_INFLATED:
            raise InvalidValueError(
                f"reading {key!r}: bytes up to {end} of a compressed member, "
                f"more than {MAX_INFLATED} inflated for one read"
            )
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

    def _inflate(self, key: str, member: Member, start: int, count: int) -> Iterator[bytes]:
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

    def _decompressor(self, key: str, member: Member, start: int) -> tuple[Any, int]:
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
        return self._index.member(key) is not None

    def mtime(self, key: str) -> float | None:
        """The member's DOS timestamp (local time, as zipfile writes it), or the
        archive's modification time where that is no valid date."""
        member = self._index.member(key)
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
        names = self._index.names
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
        names = self._index.names
        i = bisect_left(names, base)
        while i < len(names) and names[i].startswith(base):
            member = self._index.member_at(i)
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


def _refusal(member: Member) -> str | None:
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


def _check_crc(key: str, member: Member, crc: int) -> None:
    if crc != member.crc:
        raise InvalidValueError(f"reading {key!r}: bad CRC-32 (corrupt member)")
