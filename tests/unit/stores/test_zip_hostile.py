"""Hostile zip archives, member by member, through the store (zarrfs/stores/zipstore.py,
zarrfs/stores/zipindex.py); tests/mount/faults/test_zip_hostile_mount.py takes the same
archives through a mount, ``zarrfs check`` and ``zarrfs tree``.

Each archive is built byte by byte (tests/support/zips.py), so that every field can lie:
declared sizes, CRCs, offsets, zip64 fields, comments. What the store must do:

- members whose data overlap the next local header are refused (they are how a
  small archive quotes itself into terabytes, and the bytes they return would be
  another member's header): InvalidValueError, the other members unharmed;
- a range read of a compressed member inflates at most MAX_INFLATED bytes into it:
  further is refused before anything is read (a declared size may lie);
- the central directory is read within MAX_DIRECTORY bytes (refused at once
  beyond), its comments skipped unread, and indexed in about 110 bytes a member.
"""

from __future__ import annotations

import os
import struct
import time
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.zips import (
    BZIP2,
    CENTRAL,
    DEFLATED,
    END,
    LOCAL,
    Entry,
    build,
    central_only,
    deflated_zeros,
    member,
    zeros_crc,
)
from zarrfs.errors import InvalidValueError, StoreError
from zarrfs.stores import zipindex, zipstore
from zarrfs.stores.zipstore import ZipStore


def test_the_builder_writes_what_zipfile_reads(tmp_path: Path) -> None:
    """Control: honest members, as zipfile reads them."""
    import zipfile

    values = {"a": b"alpha" * 100, "b/c": bytes(range(256)), "d": b""}
    entries = [member("a", values["a"], DEFLATED), member("b/c", values["b/c"], BZIP2)]
    entries.append(member("d", values["d"], zip64=True))
    path = build(tmp_path / "z.zip", entries)
    with zipfile.ZipFile(path) as archive:
        assert {n: archive.read(n) for n in archive.namelist()} == values
    store = ZipStore(str(path))
    assert {key: store.get(key) for key in values} == values


# -- overlapping members ---------------------------------------------------------------


def test_a_member_overlapping_the_next_is_refused(
    tmp_path: Path, open_zip: Callable[[Path], ZipStore]
) -> None:
    """ "a" declared 33 bytes longer, into the local header of "b/0", with the CRC of
    those bytes: a reader that does not check returns "b/0"'s header as "a"'s value."""
    a, b = b"A" * 31, b"B" * 64
    honest = build(tmp_path / "honest.zip", [member("a", a), member("b/0", b)])
    raw = honest.read_bytes()
    overlapped = raw[30 + 1 : 30 + 1 + 64]  # a's data, then b/0's local header
    assert overlapped[31:35] == b"PK\x03\x04"
    path = build(
        tmp_path / "overlap.zip",
        [member("a", a, size=64, compressed=64, crc=zlib.crc32(overlapped)), member("b/0", b)],
    )
    store = open_zip(path)
    for read in (store.get, lambda k: store.get_range(k, 0, 4), store.get_buffer):
        with pytest.raises(InvalidValueError, match="overlaps the next member"):
            read("a")
    assert store.get("b/0") == b
    assert store.contains("a") and dict(store.scan("")) == {"a": 64, "b/0": 64}


def test_a_member_quoting_another_is_refused_the_quoted_one_read(
    tmp_path: Path, open_zip: Callable[[Path], ZipStore]
) -> None:
    """The overlap of the zip bombs that quote themselves: the central directory
    names a member whose local header lies inside another member's data."""
    inner = member("in", b"inner value")
    inner_bytes = LOCAL.pack(
        b"PK\x03\x04", 20, 0, 0, 0, 0, 0x21, inner.crc or 0, 11, 11, 2, 0
    ) + b"in" + inner.data  # fmt: skip
    outer_value = b"head" + inner_bytes + b"tail"
    outer = member("out", outer_value)
    path = build(tmp_path / "quote.zip", [outer, Entry("in", b"", local=False, offset=0)])
    # point "in" at the copy inside "out" (its header starts 4 bytes into out's data)
    data = bytearray(path.read_bytes())
    central = data.rindex(b"PK\x01\x02")
    struct.pack_into("<3L", data, central + 16, inner.crc or 0, 11, 11)
    struct.pack_into("<L", data, central + 42, 30 + 3 + 4)
    path.write_bytes(bytes(data))
    store = open_zip(path)
    assert store.get("in") == b"inner value"
    with pytest.raises(InvalidValueError, match="overlaps"):
        store.get("out")


# -- compressed members: how far a read inflates ----------------------------------------


def test_a_range_far_into_a_compressed_member_is_refused_unread(
    tmp_path: Path, open_zip: Callable[[Path], ZipStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A member declaring 1 TiB (a zip64 size; its stream is 1 MiB of zeros): a suffix
    read (a shard index at the end) would inflate all it holds, each read again, for
    as long as the stream lasts. Refused before any byte is read."""
    stream = deflated_zeros(1)
    path = build(
        tmp_path / "far.zip",
        [Entry("s", stream, DEFLATED, size=1 << 40, crc=0, zip64=True), member("ok", b"fine")],
    )
    store = open_zip(path)
    assert store.size("s") == 1 << 40
    assert store.get_range("s", 0, 16) == bytes(16)  # the start is within reach
    monkeypatch.setattr(os, "pread", lambda *args: pytest.fail("read"))
    for start in (-16, zipstore.MAX_INFLATED):
        with pytest.raises(InvalidValueError, match="inflated for one read"):
            store.get_range("s", start, 16)
    with pytest.raises(InvalidValueError, match="limit"):
        store.get("s", limit=1 << 30)


def test_a_bomb_declared_small_stops_at_its_declared_size(
    tmp_path: Path, open_zip: Callable[[Path], ZipStore]
) -> None:
    """64 MiB of zeros declared as 4096 bytes with the CRC of all of them: inflated
    no further than 4096 bytes, whose CRC then fails."""
    stream = deflated_zeros(64)
    path = build(
        tmp_path / "bomb.zip",
        [Entry("b", stream, DEFLATED, size=4096, crc=zeros_crc(64 << 20))],
    )
    tracemalloc.start()
    try:
        with pytest.raises(InvalidValueError, match="CRC"):
            open_zip(path).get("b", limit=8192)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak


def test_lying_zip64_fields(tmp_path: Path, open_zip: Callable[[Path], ZipStore]) -> None:
    value = b"v" * 100
    path = build(
        tmp_path / "z64.zip",
        [
            member("huge", value, DEFLATED, zip64=True, size=1 << 62),
            member("far", value, zip64=True, offset=1 << 63),
            member("long", value, zip64=True, compressed=1 << 40, size=1 << 40),
            member("ok", value, zip64=True),
        ],
    )
    store = open_zip(path)
    assert store.get("ok") == value
    with pytest.raises(InvalidValueError, match="limit"):
        store.get("huge", limit=1 << 20)
    with pytest.raises(InvalidValueError, match=r"no local header|past the archive"):
        store.get("far")
    with pytest.raises(InvalidValueError, match=r"past the archive|overlaps"):
        store.get_range("long", 0, 10)


# -- the central directory ----------------------------------------------------------------


def test_comments_are_skipped_unread(
    tmp_path: Path, open_zip: Callable[[Path], ZipStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = central_only(tmp_path / "comments.zip", 1000, 0xFFFF)  # 64 MiB of comments
    read: list[int] = []
    pread = os.pread

    def counting(fd: int, count: int, offset: int) -> bytes:
        data = pread(fd, count, offset)
        read.append(len(data))
        return data

    monkeypatch.setattr(os, "pread", counting)
    store = open_zip(path)
    assert len(store.list_dir("k").keys) == 1000
    assert sum(read) < 8 << 20, sum(read)  # of 64 MiB


def test_a_central_directory_over_the_bound_is_refused_at_once(
    tmp_path: Path, open_zip: Callable[[Path], ZipStore]
) -> None:
    count = zipindex.MAX_DIRECTORY // (46 + 5 + 0xFFFF) + 1
    path = central_only(tmp_path / "huge.zip", count, 0xFFFF)
    assert path.stat().st_size > zipindex.MAX_DIRECTORY
    start = time.monotonic()
    with pytest.raises(StoreError, match=r"central directory of \d+ bytes, more than"):
        open_zip(path)
    assert time.monotonic() - start < 1


def test_a_lying_member_count_is_refused_at_once(
    tmp_path: Path, open_zip: Callable[[Path], ZipStore]
) -> None:
    path = build(tmp_path / "count.zip", [member("a", b"x")], declared_members=0xFFFF)
    assert open_zip(path).get("a") == b"x"  # a 16-bit count is no bound: entries are counted
    data = bytearray(path.read_bytes())
    end = data.rindex(b"PK\x05\x06")
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, end, 1)
    record = struct.pack(
        "<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, 1 << 40, 1 << 40,
        *struct.unpack_from("<2L", data, end + 12),
    )  # fmt: skip
    path.write_bytes(bytes(data[:end]) + record + locator + bytes(data[end:]))
    with pytest.raises(StoreError, match=f"{1 << 40} members, more than"):
        open_zip(path)


def many_members(path: Path, count: int) -> Path:
    """``count`` stored one-byte members "c/0", "c/1", ...: realistic rows (sizes,
    CRCs and offsets that are no small integers)."""
    local, central = bytearray(), bytearray()
    for i in range(count):
        name, value = f"c/{i}".encode(), bytes([i % 251])
        crc = zlib.crc32(value)
        offset = len(local)
        local += LOCAL.pack(b"PK\x03\x04", 20, 0, 0, 0, 0, 0x21, crc, 1, 1, len(name), 0)
        local += name + value
        central += CENTRAL.pack(
            b"PK\x01\x02", 20, 3, 20, 0, 0, 0, 0, 0x21, crc, 1, 1, len(name), 0, 0, 0, 0, 0,
            offset,
        ) + name  # fmt: skip
    end = END.pack(b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, len(central), len(local), 0)
    path.write_bytes(bytes(local + central) + end)
    return path


def test_the_index_holds_little_per_member(tmp_path: Path) -> None:
    """About 110 bytes a member held (a name and a row of 37 bytes), so MAX_MEMBERS
    fits a daemon's memory; a dict of Python objects per field took 300 and more."""
    count = 50_000
    path = many_members(tmp_path / "many.zip", count)
    tracemalloc.start()
    try:
        store = ZipStore(str(path))
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 140 * count, held / count
    assert peak < 220 * count, peak / count
    assert store.get("c/12345") == bytes([12345 % 251])
    assert store.get_range("c/7", -1, 1) == b"\x07"
    assert len(store.list_dir("c").keys) == count
    store.close()
