"""A full store filesystem: ENOSPC is reported, nothing is lost.

The store lives on a 1 MiB tmpfs (mounted here: the tests run as root) nearly filled
by a filler file. The array is uint8 without a compressor, written with random bytes,
so that every chunk needs exactly its 64 KiB and none fits in the space left. Storing
fails: ``fsync`` (or ``close`` of the handle that wrote) returns ENOSPC, the log says
so, the daemon keeps serving and reads still return the written bytes (the chunks stay
dirty). Once the filler is deleted, ``fsync`` succeeds and the chunks are in the store.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import zarr

from tests.support.mounting import Mounted, mounted
from tests.support.tmpfs import CHUNK_BYTES, CHUNKS, SHAPE, full_store, random_data


def assert_enospc(error: OSError, what: str) -> None:
    assert error.errno == errno.ENOSPC, f"{what}: {error!r} instead of ENOSPC"


def assert_still_serving(m: Mounted, fd: int | None, data: bytes) -> None:
    """The daemon answers, and reads (from the daemon, not the page cache) see the data."""
    assert m.process.poll() is None, f"the daemon exited ({m.process.returncode}):\n{m.log()}"
    assert "array.raw" in os.listdir(m.path)
    os.statvfs(m.path)
    reader = os.open(m / "array.raw", os.O_RDONLY)
    try:
        for handle in (reader,) if fd is None else (fd, reader):
            os.posix_fadvise(handle, 0, 0, os.POSIX_FADV_DONTNEED)
            assert os.pread(handle, len(data) + 1, 0) == data, "written bytes lost"
    finally:
        os.close(reader)
    log = m.log().lower()
    assert "no space left" in log or "enospc" in log, f"nothing about ENOSPC in the log:\n{log}"


def assert_chunks_stored(store: Path, data: bytes) -> None:
    """Without a compressor a stored chunk is its raw bytes: check them before unmount."""
    for i in range(SHAPE[0] // CHUNKS[0]):
        key = store / f"{i}.0"
        assert key.exists(), f"chunk {key.name} not stored after a successful fsync"
        assert key.read_bytes() == data[i * CHUNK_BYTES : (i + 1) * CHUNK_BYTES], key.name


def assert_zarr_reads(store: Path, data: bytes) -> None:
    assert zarr.open_array(str(store), mode="r")[...].tobytes() == data


def test_fsync_reports_enospc_then_succeeds_once_space_is_freed(tmp_path: Path) -> None:
    data = random_data()
    with full_store(tmp_path) as (store, filler):
        with mounted(store) as m:
            fd = os.open(m / "array.raw", os.O_RDWR)
            try:
                assert os.pwrite(fd, data, 0) == len(data)
                with pytest.raises(OSError) as info:
                    os.fsync(fd)
                assert_enospc(info.value, "fsync on a full store")
                assert_still_serving(m, fd, data)

                # Writing goes on into the cache meanwhile.
                patch = os.urandom(100)
                data = data[:5000] + patch + data[5100:]
                assert os.pwrite(fd, patch, 5000) == len(patch)
                assert os.pread(fd, 200, 4950) == data[4950:5150]

                filler.unlink()
                os.fsync(fd)
                assert_chunks_stored(store, data)
            finally:
                os.close(fd)
        assert_zarr_reads(store, data)


def test_close_reports_enospc_and_keeps_the_chunks_dirty(tmp_path: Path) -> None:
    data = random_data()
    with full_store(tmp_path) as (store, filler):
        with mounted(store) as m:
            fd = os.open(m / "array.raw", os.O_RDWR)
            closed = False
            try:
                assert os.pwrite(fd, data, 0) == len(data)
                closed = True  # close releases the descriptor even when it fails
                with pytest.raises(OSError) as info:
                    os.close(fd)
                assert_enospc(info.value, "close of the handle that wrote, on a full store")
            finally:
                if not closed:
                    os.close(fd)
            assert_still_serving(m, None, data)

            # fsync flushes the file's dirty chunks, whichever handle wrote them.
            filler.unlink()
            fd = os.open(m / "array.raw", os.O_RDWR)
            try:
                os.fsync(fd)
                assert_chunks_stored(store, data)
            finally:
                os.close(fd)
        assert_zarr_reads(store, data)
