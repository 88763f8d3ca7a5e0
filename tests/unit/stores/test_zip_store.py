"""The zip store (zarrfs/stores/zipstore.py): the Store contract over stored,
deflated, bzip2, LZMA and zip64 archives; archives zarr-python 3 writes (v3 with
shards, v2) read key by key and through the chunk layer; and hostile archives.

Decisions these tests pin down:

- a file that is missing, not a zip or truncated fails at construction with one
  StoreError of one line naming the file; so does a corrupt central directory or
  one of more than MAX_MEMBERS members;
- a stored member is read by preads of its own local header and data only, a
  range of it by a pread of just that range;
- a bad CRC, a bad local header, truncated or corrupt compressed data, an
  encrypted member, or a declared size over ``get``'s limit raise
  InvalidValueError (the chunk layer's "bad chunk"), the last before any read;
- names with "." or ".." or empty components, absolute names, backslashes and
  names over 4096 bytes are no keys: neither listed, scanned nor readable;
- of duplicate names the last member wins (as zipfile and zarr-python read them);
  a name that is also a prefix of others is a prefix only.
"""

from __future__ import annotations

import json
import os
import struct
import threading
import tracemalloc
import warnings
import zipfile
import zlib
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio
import zarr

from tests.support.store_contract import VALUES, MakeStore, StoreContract
from tests.support.zips import patch_central
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.read.reading import read_array_bytes
from zarrfs.errors import ChunkError, InvalidValueError, ReadOnlyError, StoreError
from zarrfs.formats.metadata.v2 import parse_array
from zarrfs.formats.metadata.v3 import parse_node
from zarrfs.formats.model import ArrayMeta
from zarrfs.stores import zipindex, zipstore
from zarrfs.stores.zipstore import ZipStore

COMPRESSIONS = {
    "stored": zipfile.ZIP_STORED,
    "deflated": zipfile.ZIP_DEFLATED,
    "bzip2": zipfile.ZIP_BZIP2,
    "lzma": zipfile.ZIP_LZMA,
}


def write_zip(
    path: Path,
    values: dict[str, bytes],
    compression: int = zipfile.ZIP_STORED,
    *,
    zip64: bool = False,
    comment: bytes = b"",
) -> Path:
    """``values`` as members of a new archive. ``zip64``: every member's local
    header and central entry carry zip64 sizes and offsets, and the archive ends
    with zip64 records (zipfile writes them only past 2 GiB or 65535 members,
    unless its limits are lowered as here)."""
    saved = zipfile.ZIP64_LIMIT, zipfile.ZIP_FILECOUNT_LIMIT
    if zip64:
        zipfile.ZIP64_LIMIT, zipfile.ZIP_FILECOUNT_LIMIT = -1, 0
    try:
        with zipfile.ZipFile(path, "w", compression, allowZip64=True) as archive:
            archive.comment = comment
            for name, value in values.items():
                info = zipfile.ZipInfo(name, date_time=(2021, 6, 7, 8, 9, 10))
                info.compress_type = compression
                with archive.open(info, "w", force_zip64=zip64) as member:
                    member.write(value)
    finally:
        zipfile.ZIP64_LIMIT, zipfile.ZIP_FILECOUNT_LIMIT = saved
    return path


class TestZipStore(StoreContract):
    WRITABLE = False

    @pytest.fixture(params=[*COMPRESSIONS, "zip64-stored", "zip64-deflated"])
    def make_store(
        self, request: pytest.FixtureRequest, tmp_path: Path, open_zip: Callable[[Path], ZipStore]
    ) -> MakeStore:
        kind: str = request.param
        zip64 = kind.startswith("zip64-")
        compression = COMPRESSIONS[kind.removeprefix("zip64-")]

        def make(values: dict[str, bytes]) -> ZipStore:
            path = write_zip(tmp_path / "store.zip", values, compression, zip64=zip64)
            if zip64:
                data = path.read_bytes()
                assert b"PK\x06\x06" in data and b"PK\x06\x07" in data  # zip64 end records
            return open_zip(path)

        return make


# -- archives zarr-python writes ----------------------------------------------------------


def every_member(path: Path) -> dict[str, bytes]:
    """The oracle: each name as zipfile reads it (of duplicates, the last)."""
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def written_by_zarr(path: Path, zarr_format: int, compression: int) -> np.ndarray:
    data = np.arange(40 * 30, dtype="<i4").reshape(40, 30)
    options: dict[str, Any] = {"chunks": (5, 6), "fill_value": -1}
    if zarr_format == 3:
        options["shards"] = (10, 12)  # 4 x 2 inner chunks; edge shards overhang
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python on rewriting a member
        store = zarr.storage.ZipStore(path, mode="w", compression=compression)
        group = zarr.open_group(store, mode="w", zarr_format=zarr_format)
        array = group.create_array("a", shape=data.shape, dtype="<i4", **options)
        array[...] = data
        # zarr-python "overwrites" by appending a member of the same name: the
        # archive now holds two of a chunk (v2) or shard (v3), the last one current
        data[:5, :6] *= -1
        array[:5, :6] = data[:5, :6]
        store.close()
    return data


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_archives_zarr_python_writes(
    tmp_path: Path, open_zip: Callable[[Path], ZipStore], zarr_format: int, compression: int
) -> None:
    path = tmp_path / "z.zip"
    data = written_by_zarr(path, zarr_format, compression)
    members = every_member(path)
    with zipfile.ZipFile(path) as archive:
        assert len(archive.namelist()) == len(members) + 1  # one duplicate
    store = open_zip(path)
    for key, value in members.items():
        assert store.get(key) == value, key
        assert store.size(key) == len(value) and store.contains(key)
        assert store.get_range(key, -3, 3) == value[-3:]
    assert dict(store.scan("")) == {k: len(v) for k, v in members.items()}
    assert "a" in store.list_dir("").prefixes

    # ... and through the chunk layer: v3 inner chunks by byte ranges of the shards
    cache = ChunkCache(store, 1 << 24, threads=1)
    meta: Any
    if zarr_format == 3:
        meta = parse_node("a", members["a/zarr.json"])
        assert isinstance(meta, ArrayMeta) and meta.shards is not None
    else:
        meta = parse_array("a", members["a/.zarray"], None)
    got = trio.run(read_array_bytes, cache, meta, 0, data.nbytes)
    assert bytes(got) == data.tobytes()


def test_a_bad_chunk_is_a_chunk_error(tmp_path: Path, open_zip: Callable[[Path], ZipStore]) -> None:
    path = tmp_path / "z.zip"
    written_by_zarr(path, 2, zipfile.ZIP_STORED)
    store = open_zip(corrupt_member(path, "a/0.0"))
    with pytest.raises(InvalidValueError, match="CRC"):
        store.get("a/0.0")
    meta = parse_array("a", store.get("a/.zarray") or b"", None)
    cache = ChunkCache(store, 1 << 24, threads=1)

    async def read() -> None:
        await cache.get(meta, (0, 0))

    with pytest.raises(ChunkError, match="CRC"):
        trio.run(read)
    assert trio.run(cache.get, meta, (0, 1)) is not None  # its neighbours are fine


# -- reads touch only the member's own bytes ---------------------------------------------


def member_span(path: Path, name: str) -> tuple[int, int, int]:
    """(local header offset, data offset, data end) of a member."""
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(name)
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        header = f.read(30)
    name_length, extra_length = struct.unpack("<2H", header[26:30])
    data = info.header_offset + 30 + name_length + extra_length
    return info.header_offset, data, data + info.compress_size


def test_a_stored_member_is_read_by_preads_of_its_own_bytes(
    tmp_path: Path, open_zip: Callable[[Path], ZipStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_zip(tmp_path / "s.zip", {"x": b"before", "a/0.0": VALUES["a/0.0"], "y": b"after"})
    store = open_zip(path)
    header, data, end = member_span(path, "a/0.0")
    reads: list[tuple[int, int]] = []
    pread = os.pread

    def counting(fd: int, count: int, offset: int) -> bytes:
        reads.append((offset, count))
        return pread(fd, count, offset)

    monkeypatch.setattr(os, "pread", counting)
    assert store.get("a/0.0") == VALUES["a/0.0"]
    assert all(header <= offset and offset + count <= end for offset, count in reads), reads
    assert (data, end - data) in reads

    reads.clear()
    value = VALUES["a/0.0"]
    assert store.get_ranges("a/0.0", [(10, 5), (-4, 4)]) == [value[10:15], value[-4:]]
    assert (data + 10, 5) in reads and (end - 4, 4) in reads
    assert all(header <= offset and offset + count <= end for offset, count in reads), reads
    assert sum(count for _, count in reads) == 30 + len("a/0.0") + 5 + 4

    reads.clear()
    assert store.size("a/0.0") == 1024 and store.contains("a/0.0")
    assert dict(store.scan("")) and store.list_dir("a").keys == ("0.0",)
    assert reads == []  # the central directory answers these


def test_local_extra_field_differs_from_central(
    tmp_path: Path, open_zip: Callable[[Path], ZipStore]
) -> None:
    """force_zip64 puts a zip64 extra field in the local header only: the data
    starts after the local header's own extra field."""
    path = tmp_path / "z.zip"
    with zipfile.ZipFile(path, "w", allowZip64=True) as archive:
        with archive.open("k", "w", force_zip64=True) as member:
            member.write(b"value")
        info = archive.getinfo("k")
    header, data, _ = member_span(path, "k")
    assert data - header - 30 - 1 > len(info.extra)
    assert open_zip(path).get("k") == b"value"


# -- bad archives fail at construction -------------------------------------------------


def one_line_error(path: Path) -> StoreError:
    with pytest.raises(StoreError) as caught:
        ZipStore(str(path))
    message = str(caught.value)
    assert "\n" not in message and str(path) in message, message
    return caught.value


def test_bad_archives_fail_at_construction(tmp_path: Path) -> None:
    assert one_line_error(tmp_path / "missing.zip").errno == 2
    (tmp_path / "dir.zip").mkdir()
    one_line_error(tmp_path / "dir.zip")
    os.mkfifo(tmp_path / "fifo.zip")  # refused at once, not waited on
    assert "not a regular file" in str(one_line_error(tmp_path / "fifo.zip"))
    (tmp_path / "empty.zip").write_bytes(b"")
    assert "not a readable zip" in str(one_line_error(tmp_path / "empty.zip"))
    (tmp_path / "noise.zip").write_bytes(np.random.default_rng(1).bytes(100_000))
    assert "not a readable zip" in str(one_line_error(tmp_path / "noise.zip"))

    whole = write_zip(tmp_path / "whole.zip", VALUES).read_bytes()
    for cut in (len(whole) // 2, len(whole) - 1, len(whole) - 23):
        (tmp_path / "cut.zip").write_bytes(whole[:cut])
        one_line_error(tmp_path / "cut.zip")
    # the central directory's first entry broken; and its size larger than the file
    directory = whole.index(b"PK\x01\x02")
    (tmp_path / "bad.zip").write_bytes(whole[:directory] + b"XX" + whole[directory + 2 :])
    one_line_error(tmp_path / "bad.zip")
    end = whole.rindex(b"PK\x05\x06")
    huge = whole[: end + 12] + struct.pack("<L", 1 << 30) + whole[end + 16 :]
    (tmp_path / "huge.zip").write_bytes(huge)
    one_line_error(tmp_path / "huge.zip")


def test_too_many_members_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_zip(tmp_path / "z.zip", VALUES)
    monkeypatch.setattr(zipindex, "MAX_MEMBERS", len(VALUES) - 1)
    assert "members" in str(one_line_error(path))
    # a central directory that lies about its count is counted as it is read
    data = bytearray(path.read_bytes())
    end = data.rindex(b"PK\x05\x06")
    data[end + 8 : end + 12] = struct.pack("<2H", 1, 1)
    path.write_bytes(data)
    assert "members" in str(one_line_error(path))


@pytest.mark.parametrize("zip64", [False, True], ids=["zip32", "zip64"])
def test_empty_archive_comment_and_prepended_data(
    tmp_path: Path, open_zip: Callable[[Path], ZipStore], zip64: bool
) -> None:
    empty = open_zip(write_zip(tmp_path / "e.zip", {}, zip64=zip64))
    assert empty.list_dir("") == zipstore.Listing((), ()) and not list(empty.scan(""))
    comment = b"a comment after the end record" * 100
    path = write_zip(tmp_path / "z.zip", VALUES, zipfile.ZIP_DEFLATED, zip64=zip64, comment=comment)
    assert path.read_bytes().endswith(comment)
    assert (b"PK\x06\x06" in path.read_bytes()) == zip64
    assert open_zip(path).get("a/0.0") == VALUES["a/0.0"]
    # as a self-extracting archive: the offsets count from after the prefix
    (tmp_path / "sfx.zip").write_bytes(b"#!/bin/sh\nexit 0\n" * 100 + path.read_bytes())
    store = open_zip(tmp_path / "sfx.zip")
    assert {key: store.get(key) for key in VALUES} == VALUES


# -- bad members are bad values ----------------------------------------------------------


def corrupt_member(path: Path, name: str) -> Path:
    """The member's CRC in the central directory no longer matches its data."""
    with zipfile.ZipFile(path) as archive:
        crc = archive.getinfo(name).CRC
    return patch_central(path, name, 16, struct.pack("<L", crc ^ 1))


@pytest.mark.parametrize("kind", list(COMPRESSIONS))
def test_a_bad_crc_is_an_invalid_value(
    tmp_path: Path, open_zip: Callable[[Path], ZipStore], kind: str
) -> None:
    path = write_zip(tmp_path / "z.zip", VALUES, COMPRESSIONS[kind])
    store = open_zip(corrupt_member(path, "a/0.0"))
    with pytest.raises(InvalidValueError, match="CRC"):
        store.get("a/0.0")
    # a whole-value range is checked too (it inflates to the end); a part cannot be
    if kind != "stored":
        with pytest.raises(InvalidValueError, match="CRC"):
            store.get_range("a/0.0", 0, 1024)
    assert store.get_range("a/0.0", 0, 4) == VALUES["a/0.0"][:4]
    assert store.get("z.json") == VALUES["z.json"]


@pytest.mark.parametrize("kind", ["deflated", "bzip2", "lzma"])
def test_corrupt_or_truncated_compressed_data(
    tmp_path: Path, open_zip: Callable[[Path], ZipStore], kind: str
) -> None:
    value = np.random.default_rng(2).bytes(50_000)
    path = write_zip(tmp_path / "z.zip", {"k": value, "after": b"x"}, COMPRESSIONS[kind])
    data = member_span(path, "k")[1]
    whole = path.read_bytes()
    garbled = whole[: data + 20] + bytes(100) + whole[data + 120 :]
    (tmp_path / "garbled.zip").write_bytes(garbled)
    with pytest.raises(InvalidValueError, match=r"corrupt|CRC"):
        open_zip(tmp_path / "garbled.zip").get("k")
    # the declared compressed size cut short: the stream ends before the value does
    with zipfile.ZipFile(path) as archive:
        compressed = archive.getinfo("k").compress_size
    short = patch_central(path, "k", 20, struct.pack("<L", compressed // 2))
    with pytest.raises(InvalidValueError, match="ends after"):
        open_zip(short).get("k")


def test_declared_size_over_the_limit_is_refused_before_reading(
    tmp_path: Path, open_zip: Callable[[Path], ZipStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_zip(tmp_path / "z.zip", VALUES, zipfile.ZIP_DEFLATED)
    store = open_zip(path)
    monkeypatch.setattr(os, "pread", lambda *args: pytest.fail("read"))
    with pytest.raises(InvalidValueError, match="limit"):
        store.get("a/0.0", limit=1023)


def deflated_member(path: Path, stream: bytes, size: int, crc: int) -> Path:
    """An archive of one member "bomb" whose data is the raw deflate ``stream``
    and whose central entry declares ``size`` and ``crc``."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("bomb", b"", zipfile.ZIP_STORED)
    data = path.read_bytes()
    directory = data.index(b"PK\x01\x02")
    local, central = bytearray(data[:directory]), bytearray(data[directory:])
    struct.pack_into("<H", local, 8, zipfile.ZIP_DEFLATED)
    struct.pack_into("<H", central, 10, zipfile.ZIP_DEFLATED)
    struct.pack_into("<3L", central, 16, crc, len(stream), size)
    end = central.index(b"PK\x05\x06")
    struct.pack_into("<L", central, end + 16, len(local) + len(stream))
    path.write_bytes(bytes(local) + stream + bytes(central))
    return path


def test_a_bomb_is_inflated_in_bounded_steps(
    tmp_path: Path, open_zip: Callable[[Path], ZipStore]
) -> None:
    """64 MiB of zeros deflate to 64 KiB. Declared as 1000 bytes (with their CRC),
    those are the value and nothing past them is inflated; declared whole, a read
    of its last bytes inflates all of it but never holds more than a step."""
    whole = 64 << 20
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    stream = b"".join(compressor.compress(bytes(1 << 20)) for _ in range(whole >> 20))
    stream += compressor.flush()
    short = open_zip(deflated_member(tmp_path / "short.zip", stream, 1000, zlib.crc32(bytes(1000))))
    crc = 0
    for _ in range(whole >> 20):
        crc = zlib.crc32(bytes(1 << 20), crc)
    bomb = open_zip(deflated_member(tmp_path / "bomb.zip", stream, whole, crc))
    tracemalloc.start()
    try:
        assert short.get("bomb") == bytes(1000) and short.size("bomb") == 1000
        assert short.get_range("bomb", -10, 10) == bytes(10)
        assert bomb.get_range("bomb", -10, 10) == bytes(10)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak
    with pytest.raises(InvalidValueError, match="limit"):
        bomb.get("bomb", limit=1 << 20)


def test_encrypted_and_unknown_methods_are_refused(
    tmp_path: Path, open_zip: Callable[[Path], ZipStore]
) -> None:
    path = write_zip(tmp_path / "z.zip", VALUES)
    patch_central(path, "a/0.0", 8, struct.pack("<H", 1))  # flag: encrypted
    patch_central(path, "z.json", 10, struct.pack("<H", 93))  # method: zstd
    store = open_zip(path)
    for key, reason in (("a/0.0", "encrypted member"), ("z.json", r"method 93 \(zstd\)")):
        assert store.contains(key)
        for read in (store.get, store.size, lambda k: store.get_range(k, 0, 1)):
            with pytest.raises(InvalidValueError, match=reason):
                read(key)
    # Stored values nobody can read: keys still (zarrfs check reports them), never
    # taken for missing ones.
    assert dict(store.scan("")) == {key: len(value) for key, value in VALUES.items()}
    assert store.list_dir("").keys == (".zgroup", "z.json")


def test_an_entry_pointing_at_another_members_header(
    tmp_path: Path, open_zip: Callable[[Path], ZipStore]
) -> None:
    path = write_zip(tmp_path / "z.zip", {"first": b"secret", "second": b"value"})
    patch_central(path, "second", 42, struct.pack("<L", 0))  # the header of "first"
    with pytest.raises(InvalidValueError, match="another member"):
        open_zip(path).get("second")
    patch_central(path, "second", 42, struct.pack("<L", 3))  # no header at all
    with pytest.raises(InvalidValueError, match="no local header"):
        open_zip(path).get("second")
    patch_central(path, "second", 42, struct.pack("<L", 1 << 31))  # past the end
    with pytest.raises(InvalidValueError):
        open_zip(path).get_range("second", 0, 1)


# -- names --------------------------------------------------------------------------------


HOSTILE = [
    "../escape",
    "a/../../escape",
    "/absolute",
    "a\\b",
    "a/./b",
    "a//b",
    "./dot",
    "a/..",
    "x" * 4097,
]


def test_hostile_names_are_no_keys(tmp_path: Path, open_zip: Callable[[Path], ZipStore]) -> None:
    values = {name: b"hostile" for name in HOSTILE}
    values["a/ok"] = b"ok"
    store = open_zip(write_zip(tmp_path / "z.zip", values))
    assert dict(store.scan("")) == {"a/ok": 2}
    assert store.list_dir("") == zipstore.Listing((), ("a",))
    assert store.list_dir("a") == zipstore.Listing(("ok",), ())
    for name in HOSTILE:
        assert store.get(name) is None and not store.contains(name), name
        assert store.size(name) is None and store.get_range(name, 0, 1) is None
    for prefix in ("..", "/", "a/..", "."):
        assert set(dict(store.scan(prefix))) <= {"a/ok", "ok"}


def test_directory_entries_duplicates_and_shadowed_keys(
    tmp_path: Path, open_zip: Callable[[Path], ZipStore]
) -> None:
    path = tmp_path / "z.zip"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile on the duplicate name
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("empty/", b"")
            archive.writestr("a/", b"")
            archive.writestr("a/0", b"old")
            archive.writestr("a/0", b"new")
            archive.writestr("b", b"shadowed by b/c")
            archive.writestr("b/c", b"c")
    store = open_zip(path)
    assert store.get("a/0") == b"new" and store.size("a/0") == 3
    assert store.list_dir("") == zipstore.Listing((), ("a", "b", "empty"))
    assert store.list_dir("a") == zipstore.Listing(("0",), ())
    assert store.list_dir("empty/") == zipstore.Listing((), ())
    assert store.get("b") is None and not store.contains("b") and store.get("b/c") == b"c"
    assert store.get("empty") is None and store.get("empty/") is None
    assert dict(store.scan("")) == {"a/0": 3, "b/c": 1}


def test_names_that_sort_around_a_prefix(
    tmp_path: Path, open_zip: Callable[[Path], ZipStore]
) -> None:
    """Names "a-1" and "a.b" sort between "a" and "a/": the skip over a prefix's names
    must not skip them."""
    names = ["a-1", "a.b", "a/x", "a/y/z", "a0", "a\u00e9", "b", "\u00e9/k"]
    store = open_zip(write_zip(tmp_path / "z.zip", {n: n.encode() for n in names}))
    assert store.list_dir("") == zipstore.Listing(
        ("a-1", "a.b", "a0", "a\u00e9", "b"), ("a", "\u00e9")
    )
    assert store.list_dir("a") == zipstore.Listing(("x",), ("y",))
    assert all(store.get(n) == n.encode() for n in names)


# -- the rest ---------------------------------------------------------------------------


def test_read_only_and_describe(tmp_path: Path, open_zip: Callable[[Path], ZipStore]) -> None:
    path = write_zip(tmp_path / "z.zip", VALUES)
    store = open_zip(path)
    assert store.read_only and not store.remote and store.listable
    assert store.describe() == str(path)
    store.sync([])  # nothing to make durable
    with pytest.raises(ReadOnlyError):
        store.sync(["a/0.0"])
    with pytest.raises(ReadOnlyError):
        store.stage("a/0.0", [b"x"])
    assert path.read_bytes() == write_zip(tmp_path / "again.zip", VALUES).read_bytes()


def test_mtime(tmp_path: Path, open_zip: Callable[[Path], ZipStore]) -> None:
    path = write_zip(tmp_path / "z.zip", VALUES)
    patch_central(path, "z.json", 12, struct.pack("<2H", 0, 0))  # date 1980-00-00: invalid
    os.utime(path, (1_600_000_000, 1_600_000_000))
    store = open_zip(path)
    assert store.mtime("a/0.0") == datetime(2021, 6, 7, 8, 9, 10).timestamp()
    assert store.mtime("z.json") == 1_600_000_000
    assert store.mtime("missing") is None and store.mtime("a") is None


def test_concurrent_reads(tmp_path: Path, open_zip: Callable[[Path], ZipStore]) -> None:
    rng = np.random.default_rng(4)
    values = {f"c/{i}": rng.bytes(int(rng.integers(0, 200_000))) for i in range(40)}
    stores = [
        open_zip(write_zip(tmp_path / f"{kind}.zip", values, COMPRESSIONS[kind]))
        for kind in ("stored", "deflated")
    ]
    failures: list[BaseException] = []

    def reader(seed: int) -> None:
        order = np.random.default_rng(seed).permutation(len(values))
        try:
            for store in stores:
                for i in order:
                    key = f"c/{i}"
                    assert store.get(key) == values[key]
                    assert store.get_range(key, 100, 50) == values[key][100:150]
        except BaseException as e:
            failures.append(e)

    threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures[0]


def test_zarr_json_documents_survive(tmp_path: Path, open_zip: Callable[[Path], ZipStore]) -> None:
    """Non-ASCII names (zipfile flags them UTF-8) are keys as written."""
    group = json.dumps({"node_type": "group"}).encode()
    values = {"zarr.json": group, "gr\u00fcn/zarr.json": b"{}"}
    store = open_zip(write_zip(tmp_path / "z.zip", values))
    assert store.list_dir("").prefixes == ("gr\u00fcn",)
    assert store.get("gr\u00fcn/zarr.json") == b"{}"
