"""Hostile zip archives through a real mount, ``zarrfs check`` and ``zarrfs tree``.

The archives are built by tests/support/zips.py's ``build`` (every field may
lie). The daemon and the commands run with their address space capped (the
daemon's ``memory_limit``, RLIMIT_AS) and within a time bound. For each hostile
member: one EIO for the reads that need it and one log line naming it, never wrong
bytes; ``zarrfs check`` names it with the reason and exits 1; the rest of the
archive reads as it should. An archive that cannot be read as a whole is one
``zarrfs: error:`` line for every command.
"""

from __future__ import annotations

import bz2
import errno
import json
import os
import re
import subprocess
import time
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
import zarr

from tests.support.cli import assert_one_error_line, run_cli
from tests.support.mounting import mounted, peak_rss, read_range
from tests.support.zips import (
    BZIP2,
    DEFLATED,
    Entry,
    build,
    central_only,
    deflated_zeros,
    local_header,
    member,
    zeros_crc,
)
from zarrfs.stores import zipindex

MEMORY_CAP = 2 << 30
RSS_BOUND = 300 << 20
CHUNK = 4096
N_CHUNKS = 16


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """A command within a time bound and, as the daemon, the memory cap."""
    return run_cli(*args, timeout=timeout, memory_limit=MEMORY_CAP)


def chunk_value(i: int) -> bytes:
    return bytes((np.arange(CHUNK) * (i + 3) % 251).astype(np.uint8))


ZARRAY = {
    "zarr_format": 2,
    "shape": [N_CHUNKS * CHUNK],
    "chunks": [CHUNK],
    "dtype": "|u1",
    "compressor": None,
    "fill_value": 0,
    "order": "C",
    "filters": None,
}
# chunk → why a mount must refuse it (what ``zarrfs check`` says, in part)
BAD = {
    4: "more than the limit",  # a deflate bomb declaring its 64 MiB
    5: "CRC",  # a deflate bomb declaring 4096 bytes
    6: "CRC",  # a bzip2 bomb declaring 4096 bytes
    7: "encrypted member",
    8: "compression method 93 (zstd) is not supported",
    9: "overlaps the next member",  # its data runs into a/10's local header
    11: "more than the limit",  # a zip64 size of 2**62
    14: "no local header",  # a zip64 offset past any file
    15: "stored member whose sizes differ",
}


def hostile_chunks(path: Path) -> dict[int, bytes]:
    """Array "a" of 16 chunks of 4096 bytes, each member hostile in its own way or
    not; returns what each chunk must read as (the bad ones are absent)."""
    document = json.dumps(ZARRAY).encode()
    entries = [member(".zgroup", b'{"zarr_format": 2}'), member("a/.zarray", document)]
    # names that are no keys: never shown, never read
    for name in ("../evil/.zarray", "/abs/.zarray", "a/../../x/.zarray", "../a/13", "/a/13"):
        entries.append(member(name, document if name.endswith("y") else chunk_value(13)))
    expected: dict[int, bytes] = {}
    for i in range(N_CHUNKS):
        value, name = chunk_value(i), f"a/{i}"
        if i == 1:
            entries.append(member(name, value, DEFLATED))
        elif i == 2:
            entries.append(member(name, value, BZIP2))
        elif i == 4:
            entries.append(Entry(name, deflated_zeros(64), DEFLATED, size=64 << 20))
        elif i == 5:
            bomb = deflated_zeros(64)
            entries.append(Entry(name, bomb, DEFLATED, size=CHUNK, crc=zeros_crc(64 << 20)))
        elif i == 6:
            bomb = bz2.compress(bytes(64 << 20), 9)
            entries.append(Entry(name, bomb, BZIP2, size=CHUNK, crc=zeros_crc(64 << 20)))
        elif i == 7:
            entries.append(member(name, value, flags=1))
        elif i == 8:
            entries.append(member(name, value, method=93))
        elif i == 9:
            # 4096 - 34 bytes of its own, then a/10's local header: right CRC, wrong bytes
            following = local_header(member("a/10", chunk_value(10)))
            own = value[: CHUNK - len(following)]
            crc = zlib.crc32(own + following)
            entries.append(member(name, own, size=CHUNK, compressed=CHUNK, crc=crc))
        elif i == 11:
            entries.append(member(name, value, DEFLATED, zip64=True, size=1 << 62))
        elif i == 12:
            entries.append(member(name, b"old value, replaced" * 200 + bytes(96)))
            entries.append(member(name, value))  # the last of a name wins
            expected[i] = value
        elif i == 13:
            expected[i] = bytes(CHUNK)  # only under names that are no keys: fill value
        elif i == 14:
            entries.append(member(name, value, zip64=True, offset=1 << 63))
        elif i == 15:
            entries.append(member(name, value, compressed=CHUNK - 1))
        else:
            entries.append(member(name, value))
        if i not in BAD and i not in expected:
            expected[i] = value
    build(path, entries)
    return expected


def test_hostile_members_through_a_mount_check_and_tree(tmp_path: Path) -> None:
    archive = tmp_path / "hostile.zip"
    expected = hostile_chunks(archive)
    with mounted(archive, log_dir=tmp_path, memory_limit=MEMORY_CAP) as m:
        assert sorted(os.listdir(m.path)) == [".zarrfs", ".zgroup", "a", "group.nc"]
        raw = m / "a" / "array.raw"
        start = time.monotonic()
        with pytest.raises(OSError) as whole:
            raw.read_bytes()
        assert whole.value.errno == errno.EIO
        for i in range(N_CHUNKS):
            if i in BAD:
                with pytest.raises(OSError) as info:
                    read_range(raw, i * CHUNK, CHUNK)
                assert info.value.errno == errno.EIO, i
            else:
                assert read_range(raw, i * CHUNK, CHUNK) == expected[i], i
        assert time.monotonic() - start < 30
        assert m.process.poll() is None, "the daemon keeps serving"
        peak = peak_rss(m.process)
        log = m.log()
    assert peak < RSS_BOUND, f"peak RSS {peak >> 20} MiB"
    for i in range(N_CHUNKS):
        lines = [line for line in log.splitlines() if re.search(rf"chunk 'a/{i}'", line)]
        assert (len(lines) == 1) == (i in BAD), (i, lines)
        if i in BAD:
            assert BAD[i] in lines[0], (i, lines[0])

    start = time.monotonic()
    checked = run("check", str(archive))
    assert time.monotonic() - start < 30
    assert checked.returncode == 1, checked.stdout + checked.stderr
    corrupt = sorted(line for line in checked.stdout.splitlines() if line.startswith("corrupt:"))
    assert [line.split(": ", 2)[1] for line in corrupt] == sorted(f"a/{i}" for i in BAD)
    for line in corrupt:
        i = int(line.split(": ", 2)[1].removeprefix("a/"))
        assert BAD[i] in line, line
    assert f"/a: {N_CHUNKS} chunks: {N_CHUNKS - 1} present, 1 missing, {len(BAD)} corrupt" in (
        checked.stdout
    )

    drawn = run("tree", str(archive))
    assert (drawn.returncode, drawn.stderr) == (0, "")
    assert drawn.stdout.splitlines() == [
        "/",
        f"└── a ({N_CHUNKS * CHUNK},) |u1 chunks=({CHUNK},) codecs=[]",
    ]


def test_a_compressed_shard_that_lies_about_its_size(tmp_path: Path) -> None:
    """A sharded array in a deflated archive whose one shard is a bomb declaring 1 TiB:
    its index (at the shard's end) is not inflated for; each read of it is one EIO at
    once, the other shards read, ``zarrfs check`` names it."""
    source = tmp_path / "source.zarr"
    # two shards of 64 whole rows: 12 KiB each, three pages of array.raw
    data = np.arange(128 * 48, dtype="<i4").reshape(128, 48)
    array = zarr.create_array(
        str(source), shape=data.shape, chunks=(8, 12), shards=(64, 48), dtype="<i4"
    )
    array[...] = data
    entries = []
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        name = str(path.relative_to(source))
        if name == "c/1/0":
            bomb = deflated_zeros(64)
            entries.append(Entry(name, bomb, DEFLATED, size=1 << 40, crc=0, zip64=True))
        else:
            entries.append(member(name, path.read_bytes(), DEFLATED))
    archive = build(tmp_path / "sharded.zip", entries)
    shard = 64 * 48 * 4
    with mounted(archive, log_dir=tmp_path, memory_limit=MEMORY_CAP) as m:
        raw = m / "array.raw"
        assert read_range(raw, 0, shard) == data[:64].tobytes()
        start = time.monotonic()
        for offset in (shard, shard + 5000, 2 * shard - 4):
            with pytest.raises(OSError) as info:
                read_range(raw, offset, 4)
            assert info.value.errno == errno.EIO
        assert time.monotonic() - start < 10
        assert m.process.poll() is None
        peak = peak_rss(m.process)
        log = m.log()
    assert peak < RSS_BOUND, f"peak RSS {peak >> 20} MiB"
    assert "inflated for one read" in log
    checked = run("check", str(archive))
    assert checked.returncode == 1, checked.stdout + checked.stderr
    corrupt = [line for line in checked.stdout.splitlines() if line.startswith("corrupt:")]
    assert len(corrupt) == 1 and corrupt[0].startswith("corrupt: c/1/0: shard index: ")
    assert "inflated for one read" in corrupt[0]


@pytest.mark.parametrize("compression", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA], ids=["bz2", "lzma"])
def test_bz2_and_lzma_archives_read_and_check(tmp_path: Path, compression: int) -> None:
    archive = tmp_path / "packed.zip"
    data = np.arange(60 * 40, dtype="<f4").reshape(60, 40)
    store = zarr.storage.ZipStore(str(archive), mode="w", compression=compression)
    group = zarr.open_group(store, mode="w")
    group.create_array("x", shape=data.shape, chunks=(16, 40), dtype="<f4")[...] = data
    store.close()
    with zipfile.ZipFile(archive) as z:
        assert {info.compress_type for info in z.infolist()} == {compression}
    with mounted(archive, log_dir=tmp_path, memory_limit=MEMORY_CAP) as m:
        assert (m / "x" / "array.raw").read_bytes() == data.tobytes()
    checked = run("check", str(archive))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "/x: 4 chunks: 4 present, 0 missing, 0 corrupt" in checked.stdout


def refused_archives(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Archives no command can open → (path, what the one error line says)."""
    whole = tmp_path / "whole.zip"
    hostile_chunks(whole)
    data = whole.read_bytes()
    cases = {}
    truncated = tmp_path / "truncated.zip"
    truncated.write_bytes(data[: len(data) // 2])
    cases["truncated"] = (truncated, "not a readable zip archive")
    cut_directory = tmp_path / "cut.zip"
    end = data.rindex(b"PK\x05\x06")
    cut_directory.write_bytes(data[: end - 10] + data[end:])
    cases["cut directory"] = (cut_directory, "not a readable zip archive")
    count = zipindex.MAX_DIRECTORY // (46 + 5 + 0xFFFF) + 1
    huge = central_only(tmp_path / "huge.zip", count, 0xFFFF)
    cases["huge directory"] = (huge, "more than")
    noise = tmp_path / "noise.zip"
    noise.write_bytes(np.random.default_rng(3).bytes(1 << 16))
    cases["noise"] = (noise, "not a readable zip archive")
    return cases


def test_archives_that_cannot_be_read_are_one_line_for_every_command(tmp_path: Path) -> None:
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    for name, (path, reason) in refused_archives(tmp_path).items():
        for args in (
            ("check", str(path)),
            ("tree", str(path)),
            ("mount", str(path), str(mountpoint)),
        ):
            start = time.monotonic()
            result = run(*args, timeout=30)
            assert time.monotonic() - start < 15, (name, args[0])
            line = assert_one_error_line(result, reason)
            assert str(path) in line, (name, line)
            assert not os.path.ismount(mountpoint)
