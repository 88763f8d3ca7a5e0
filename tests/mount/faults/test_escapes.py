"""Hostile stores through a real mount: nothing outside the store is served, changed
or removed, and no special file blocks or floods the daemon.

The store's directory holds links out of it and a FIFO where chunks should be. What
the mount must do:

- a chunk that is a symlink (to a file outside, or to /dev/zero) reads as EIO,
  never as the target's bytes; the array's other chunks and other arrays still read;
- with dimension_separator "/", a chunk-row directory that is a symlink to a
  directory outside makes writes of that row fail at fsync (EIO), and neither data
  nor fill-value writes nor a shrink change or delete the file outside;
- ``ln -s a store/b`` does not show array ``a`` a second time as ``b``;
- a chunk that is a FIFO reads as EIO at once instead of hanging a decode thread,
  and the mount keeps serving.

Every array is uint32/int32 without a compressor, chunks of 4 KiB (one page each:
the kernel reads pages, so a good chunk never shares a page with a hostile one).
Mounts reading hostile content cap the daemon's address space.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

from tests.support.mounting import Mounted, expect_eio, mounted, read_range
from tests.support.stores import v2_zarray

CHUNK = 1024  # int32 elements: 4 KiB
CHUNKS = 4
MEMORY_LIMIT = 2 << 30
PROMPT = 10.0  # seconds a hostile read may take before it counts as hanging
SECRET = np.full(CHUNK, 0x5EC2E7, dtype="<i4").tobytes()  # a valid chunk if followed


def write_array(directory: Path, data: np.ndarray, **extra: object) -> None:
    """A v2 array of uncompressed chunks of CHUNK elements along the first axis,
    each row of chunks its own directory if ``dimension_separator`` is "/"."""
    directory.mkdir(parents=True)
    chunks = [CHUNK, *data.shape[1:]] if data.ndim == 1 else [1, data.shape[1]]
    doc = v2_zarray(list(data.shape), chunks, "<i4", **extra)
    (directory / ".zarray").write_text(json.dumps(doc))
    separator = extra.get("dimension_separator", ".")
    step = chunks[0]
    for i in range(data.shape[0] // step):
        key = str(i) if data.ndim == 1 else separator.join([str(i), "0"])
        path = directory / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(np.ascontiguousarray(data[i * step : (i + 1) * step]).tobytes())


def arange(n: int, start: int = 0) -> np.ndarray:
    return np.arange(start, start + n, dtype="<i4")


def make_store(tmp_path: Path) -> tuple[Path, Path]:
    """(store, outside): a group with a good 1-D array "good" and a directory
    beside the store holding a file "0" of SECRET bytes."""
    store = tmp_path / "store"
    store.mkdir()
    (store / ".zgroup").write_text('{"zarr_format": 2}')
    write_array(store / "good", arange(CHUNK * CHUNKS, 7))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "0").write_bytes(SECRET)
    return store, outside


def snapshot(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def assert_serving(m: Mounted, store: Path) -> None:
    assert m.process.poll() is None, f"the daemon exited:\n{m.log()}"
    expected = arange(CHUNK * CHUNKS, 7).tobytes()
    assert (m / "good" / "array.raw").read_bytes() == expected


@pytest.mark.parametrize("target", ["outside-file", "dev-zero"])
def test_a_symlinked_chunk_reads_as_eio(tmp_path: Path, target: str) -> None:
    store, outside = make_store(tmp_path)
    data = arange(CHUNK * CHUNKS)
    write_array(store / "a", data)
    (store / "a" / "0").unlink()
    (store / "a" / "0").symlink_to(outside / "0" if target == "outside-file" else "/dev/zero")
    with mounted(store, memory_limit=MEMORY_LIMIT) as m:
        raw = m / "a" / "array.raw"
        expect_eio(raw, 0, 4096)
        with pytest.raises(OSError) as info:
            raw.read_bytes()
        assert info.value.errno == errno.EIO
        for i in range(1, CHUNKS):
            assert read_range(raw, i * 4096, 4096) == data[i * CHUNK : (i + 1) * CHUNK].tobytes()
        expect_eio(raw, 0, 4096)  # still: the link is not followed on a retry either
        assert_serving(m, store)
    assert (outside / "0").read_bytes() == SECRET


@pytest.mark.parametrize("write", ["data", "fill", "shrink"])
def test_a_symlinked_chunk_row_is_not_written_through(tmp_path: Path, write: str) -> None:
    """dimension_separator "/": row 1's directory links to ``outside``; storing that
    row fails and the file "0" outside stays as it was (content and existence)."""
    store, outside = make_store(tmp_path)
    rows = 4
    data = np.arange(rows * CHUNK, dtype="<i4").reshape(rows, CHUNK)
    write_array(store / "b", data, dimension_separator="/")
    for name in os.listdir(store / "b" / "1"):
        (store / "b" / "1" / name).unlink()
    (store / "b" / "1").rmdir()
    (store / "b" / "1").symlink_to(outside, target_is_directory=True)
    before = snapshot(outside)
    with mounted(store, memory_limit=MEMORY_LIMIT) as m:
        raw = m / "b" / "array.raw"
        fd = os.open(raw, os.O_RDWR)
        try:
            if write == "shrink":
                os.ftruncate(fd, 4096)  # row 1 and after are beyond the end
                with contextlib.suppress(OSError):  # refusing to delete is fine too
                    os.fsync(fd)
            else:
                row = np.full(CHUNK, 99 if write == "data" else 0, dtype="<i4").tobytes()
                assert os.pwrite(fd, row, 4096) == 4096
                with pytest.raises(OSError):
                    os.fsync(fd)
                assert m.process.poll() is None
                assert os.pread(fd, 4096, 4096) == row, "the written row is kept (dirty)"
        finally:
            with contextlib.suppress(OSError):  # close reports the failed store again
                os.close(fd)
        assert snapshot(outside) == before
        assert_serving(m, store)
    assert snapshot(outside) == before, "the final flush at unmount went through the link"
    assert (store / "b" / "1").is_symlink()
    assert (store / "b" / "0" / "0").read_bytes() == data[0].tobytes()


def test_a_symlinked_array_is_not_shown_twice(tmp_path: Path) -> None:
    """``ln -s a store/b``: two names for one array would serve stale data under one
    of them after a write through the other."""
    store, _ = make_store(tmp_path)
    write_array(store / "a", arange(CHUNK))
    (store / "b").symlink_to("a", target_is_directory=True)
    with mounted(store) as m:
        names = os.listdir(m.path)
        assert "a" in names and "good" in names
        assert "b" not in names
        assert not os.path.exists(m / "b")
        assert not os.path.exists(m / "b" / "array.raw")


def test_a_fifo_chunk_reads_as_eio_without_hanging(tmp_path: Path) -> None:
    store, _ = make_store(tmp_path)
    data = arange(CHUNK * CHUNKS)
    write_array(store / "f", data)
    fifo = store / "f" / "0"
    fifo.unlink()
    os.mkfifo(fifo)
    try:
        with mounted(store, memory_limit=MEMORY_LIMIT) as m:
            raw = m / "f" / "array.raw"
            cat = subprocess.run(["cat", str(raw)], capture_output=True, timeout=PROMPT)
            assert cat.returncode != 0
            assert b"Input/output error" in cat.stderr, cat.stderr
            assert cat.stdout == b""
            result: list[BaseException | bytes] = []

            def read() -> None:
                try:
                    result.append(read_range(raw, 0, 4096))
                except OSError as e:
                    result.append(e)

            thread = threading.Thread(target=read, daemon=True)
            thread.start()
            thread.join(PROMPT)
            assert not thread.is_alive(), "a second read of the FIFO chunk hangs"
            assert isinstance(result[0], OSError) and result[0].errno == errno.EIO
            assert read_range(raw, 4096, 4096) == data[CHUNK : 2 * CHUNK].tobytes()
            assert_serving(m, store)
    finally:
        release(fifo)


def release(fifo: Path) -> None:
    """Unblock a reader stuck opening the FIFO (the old behaviour), if there is one."""
    with contextlib.suppress(OSError):
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
