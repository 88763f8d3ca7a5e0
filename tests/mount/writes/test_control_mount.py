"""The control directory ``.zarrfs/`` on real mounts: ``cat .zarrfs/stats`` and
``echo 1 > .zarrfs/flush`` as a user runs them."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.control import CHUNK_BYTES, CHUNKS, SHAPE, SIZE, STATS_KEYS, group_store, values
from tests.support.mounting import Mounted, mounted
from tests.support.tmpfs import full_store


def mount_stats(m: Mounted) -> dict[str, Any]:
    result = subprocess.run(
        ["cat", str(m / ".zarrfs/stats")], capture_output=True, check=True, timeout=30
    )
    return json.loads(result.stdout)


def echo_flush(m: Mounted) -> subprocess.CompletedProcess:
    """``echo 1 > .zarrfs/flush`` in bash (whose message names the errno; dash's
    says "I/O error" whatever failed)."""
    flush_path = m / ".zarrfs/flush"
    return subprocess.run(
        ["bash", "-c", f"echo 1 > '{flush_path}'"], capture_output=True, text=True, timeout=60
    )


# Writes the bytes of file argv[3] at offset argv[2] of argv[1], says so, and keeps
# the handle open until told to close it; then prints close's errno (0: stored).
_WRITER = """
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
with open(sys.argv[3], "rb") as f:
    os.pwrite(fd, f.read(), int(sys.argv[2]))
print("written", flush=True)
sys.stdin.readline()
try:
    os.close(fd)
except OSError as e:
    print(e.errno, flush=True)
else:
    print(0, flush=True)
"""


@contextmanager
def writer(path: Path, offset: int, data: bytes, tmp_path: Path) -> Iterator[None]:
    """``data`` written at ``offset`` by another process, whose handle stays open
    (its close would store the chunks) until the block ends. Not from this process:
    every process it starts (cat, bash) would inherit the descriptor and close it at
    exec, and the kernel sends a FUSE flush for each close of a descriptor."""
    source = tmp_path / "written.bin"
    source.write_bytes(data)
    process = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path), str(offset), str(source)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        assert process.stdout.readline().strip() == "written"
        yield
        process.stdin.write("close\n")
        process.stdin.flush()
        assert process.stdout.readline().strip() == "0", "close stored nothing more"
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


def uncached_read(path: Path) -> bytes:
    """All of ``path`` from the daemon, not from pages the kernel kept."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return os.pread(fd, os.fstat(fd).st_size + 1, 0)
    finally:
        os.close(fd)


def test_cat_stats_on_a_mount_follows_reads(tmp_path: Path) -> None:
    store = group_store(tmp_path / "s.zarr")
    with mounted(store, "--flush-interval", "3600", log_dir=tmp_path) as m:
        listed = subprocess.run(["ls", "-a", str(m.path)], capture_output=True, text=True)
        assert ".zarrfs" in listed.stdout.split()
        assert os.stat(m / ".zarrfs/stats").st_size == 0
        before = mount_stats(m)
        assert set(before) == STATS_KEYS and before["store"] == str(store)

        assert (m / "a/array.raw").read_bytes() == values(1).tobytes()
        after = mount_stats(m)
        assert after["bytes_read"] - before["bytes_read"] == SIZE
        assert after["chunks_decoded"] - before["chunks_decoded"] == SHAPE[0] // CHUNKS[0]

        assert uncached_read(m / "a/array.raw") == values(1).tobytes()
        again = mount_stats(m)
        assert again["bytes_read"] - after["bytes_read"] == SIZE
        assert again["cache_hits"] - after["cache_hits"] == SHAPE[0] // CHUNKS[0]
        assert again["cache_misses"] == after["cache_misses"]
        assert again["chunks_decoded"] == after["chunks_decoded"]

        # One handle, read twice from its start: a new text each time, not the
        # kernel's copy of the first.
        fd = os.open(m / ".zarrfs/stats", os.O_RDONLY)
        try:
            first = json.loads(os.pread(fd, 1 << 16, 0))
            uncached_read(m / "b/array.raw")
            second = json.loads(os.pread(fd, 1 << 16, 0))
        finally:
            os.close(fd)
        assert second["bytes_read"] - first["bytes_read"] == SIZE
        assert second["uptime_seconds"] >= first["uptime_seconds"]


def test_echo_to_flush_on_a_mount_stores_before_it_returns(tmp_path: Path) -> None:
    store = group_store(tmp_path / "s.zarr")
    chunk = store / "a" / "1.0"
    old = chunk.read_bytes()
    patch = b"\xab" * 100
    with mounted(store, "--flush-interval", "3600", log_dir=tmp_path) as m:
        with writer(m / "a/array.raw", CHUNK_BYTES + 10, patch, tmp_path):
            assert mount_stats(m)["dirty_chunks"] == 1
            assert chunk.read_bytes() == old
            done = echo_flush(m)
            assert done.returncode == 0, done.stderr
            assert chunk.read_bytes() == old[:10] + patch + old[110:]
            flushed = mount_stats(m)
            assert flushed["dirty_chunks"] == 0 and flushed["chunks_encoded"] == 1
            assert flushed["bytes_stored"] == CHUNK_BYTES
        assert (m / ".zarrfs/flush").read_bytes() == b""


def test_a_failing_flush_fails_the_echo_with_the_store_error(tmp_path: Path) -> None:
    data = np.random.default_rng(5).integers(0, 256, 64 * 1024, dtype="u1").tobytes()
    # An array at the store's root, on a tmpfs with less room than one chunk.
    with (
        full_store(tmp_path) as (store, filler),
        mounted(store, "--flush-interval", "3600", log_dir=tmp_path) as m,
    ):
        assert ".zarrfs" in os.listdir(m.path) and "array.raw" in os.listdir(m.path)
        with writer(m / "array.raw", 0, data, tmp_path):
            failed = echo_flush(m)
            assert failed.returncode != 0
            assert "No space left on device" in failed.stderr, failed.stderr
            control = os.open(m / ".zarrfs/flush", os.O_WRONLY | os.O_TRUNC)
            try:
                with pytest.raises(OSError) as info:
                    os.write(control, b"1")
                assert info.value.errno == errno.ENOSPC
            finally:
                os.close(control)
            counted = mount_stats(m)
            assert counted["errors"] == 2 and counted["store_failures"] == 2
            assert counted["dirty_chunks"] == 1 and counted["store_failing"] is True
            assert "No space left on device" in counted["last_store_error"]

            filler.unlink()
            done = echo_flush(m)
            assert done.returncode == 0, done.stderr
            assert (store / "0.0").read_bytes() == data
            stored = mount_stats(m)
            assert stored["dirty_chunks"] == 0 and stored["store_failing"] is False


def test_a_read_only_mount_refuses_flush_with_erofs(tmp_path: Path) -> None:
    store = group_store(tmp_path / "s.zarr")
    with mounted(store, "--read-only", log_dir=tmp_path) as m:
        assert sorted(os.listdir(m / ".zarrfs")) == ["flush", "refresh", "stats"]
        with pytest.raises(OSError) as info:
            os.open(m / ".zarrfs/flush", os.O_WRONLY | os.O_TRUNC)
        assert info.value.errno == errno.EROFS
        refused = echo_flush(m)
        assert refused.returncode != 0 and "Read-only file system" in refused.stderr
        assert (m / ".zarrfs/flush").read_bytes() == b""
        assert mount_stats(m)["read_only"] is True
