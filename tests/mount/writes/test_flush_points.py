"""When written chunks reach the store: at fsync/fdatasync, at close (before close
returns), at the flush interval and the dirty budget while the file stays open, at
SIGTERM/SIGINT before the daemon exits, and at ``zarrfs umount`` before it returns."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

import numpy as np
import pytest

from tests.support.model import ArrayModel
from tests.support.mounting import mounted, zarrfs_command
from tests.support.writes import (
    NO_FLUSH,
    ROWS_C,
    SPECS,
    Template,
    assert_store_holds,
    assert_zarray_kept,
    chunk_files,
    model_of,
    opened,
    read_store,
)

# -- flush points --------------------------------------------------------------------------


def scattered_writes(
    model: ArrayModel, rng: np.random.Generator, count: int
) -> list[tuple[int, bytes]]:
    writes = []
    for _ in range(count):
        length = int(rng.integers(1, 3000))
        offset = int(rng.integers(0, len(model) - length))
        writes.append((offset, rng.bytes(length)))
    return writes


@pytest.mark.parametrize("sync", [os.fsync, os.fdatasync], ids=["fsync", "fdatasync"])
def test_fsync_stores_dirty_chunks(
    template: Template, tmp_path: Path, sync: Callable[[int], None]
) -> None:
    store = template.copy(tmp_path)
    name = "f8_large_f"
    model = model_of(template, name)
    rng = np.random.default_rng(11)
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m, opened(m / name / "array.raw") as fd:
        for round_ in range(2):
            for offset, data in scattered_writes(model, rng, 25):
                os.pwrite(fd, data, offset)
                model.write(offset, data)
            sync(fd)
            assert_store_holds(store / name, model.array(), f"after {sync.__name__} {round_}")


def test_close_returns_after_the_chunks_are_stored(template: Template, tmp_path: Path) -> None:
    store = template.copy(tmp_path)
    name = "f8_large_f"
    model = model_of(template, name)
    rng = np.random.default_rng(12)
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m:
        raw = m / name / "array.raw"
        with opened(raw) as first, opened(raw, os.O_WRONLY) as second:
            for i, (offset, data) in enumerate(scattered_writes(model, rng, 30)):
                os.pwrite(first if i % 2 else second, data, offset)
                model.write(offset, data)
        assert_store_holds(store / name, model.array(), "after both closes")
        with open(raw, "r+b") as f:  # Python's buffered file: written at close
            f.seek(12345)
            f.write(b"\xff" * 70000)
        model.write(12345, b"\xff" * 70000)
        assert_store_holds(store / name, model.array(), "after the buffered file's close")


def test_flush_interval_stores_while_the_file_is_open(template: Template, tmp_path: Path) -> None:
    store = template.copy(tmp_path)
    name = "f8_large_f"
    model = model_of(template, name)
    rng = np.random.default_rng(13)
    with (
        mounted(store, "--flush-interval", "1", log_dir=tmp_path) as m,
        opened(m / name / "array.raw") as fd,
    ):
        for offset, data in scattered_writes(model, rng, 20):
            os.pwrite(fd, data, offset)
            model.write(offset, data)
        written = time.monotonic()
        expected = model.array().tobytes()
        while read_store(store / name).tobytes() != expected:
            assert time.monotonic() - written < 15, "not stored 15 s after the writes"
            time.sleep(0.2)


def test_dirty_budget_stores_while_the_file_is_open(template: Template, tmp_path: Path) -> None:
    """4 MiB written with a 1 MiB budget and no other flush point: most of it is stored."""
    store = template.copy(tmp_path)
    spec = SPECS["budget_f4"]
    rng = np.random.default_rng(14)
    data = rng.standard_normal(spec.shape).astype("<f4")  # no element equals the fill 0.0
    rows, cols = spec.chunks
    n_chunks = math.prod(-(-n // c) for n, c in zip(spec.shape, spec.chunks))
    budget_chunks = 2**20 // spec.chunk_bytes
    with mounted(store, "--write-cache-size", "1M", *NO_FLUSH, log_dir=tmp_path) as m:
        with opened(m / spec.name / "array.raw", os.O_WRONLY) as fd:
            raw = data.tobytes()
            for offset in range(0, len(raw), 256 * 1024):
                os.pwrite(fd, raw[offset : offset + 256 * 1024], offset)
            deadline = time.monotonic() + 10
            while True:
                stored = read_store(store / spec.name)
                good = sum(
                    np.array_equal(
                        stored[i : i + rows, j : j + cols].view("u4"),
                        data[i : i + rows, j : j + cols].view("u4"),
                    )
                    for i in range(0, spec.shape[0], rows)
                    for j in range(0, spec.shape[1], cols)
                )
                # dirty ≤ budget, with room for one budget of slack in the accounting
                if good >= n_chunks - 2 * budget_chunks or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert good >= n_chunks - 2 * budget_chunks, f"{good}/{n_chunks} chunks stored"
        assert_store_holds(store / spec.name, data, "after close")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_stores_dirty_chunks_then_exits(
    template: Template, tmp_path: Path, signum: int
) -> None:
    store = template.copy(tmp_path)
    name = "f8_large_f"
    model = model_of(template, name)
    rng = np.random.default_rng(15)
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m:
        fd = os.open(m / name / "array.raw", os.O_RDWR)
        try:
            for offset, data in scattered_writes(model, rng, 20):
                os.pwrite(fd, data, offset)
                model.write(offset, data)
            m.process.send_signal(signum)
            assert m.process.wait(timeout=30) == 0, m.log()
        finally:
            with suppress(OSError):  # the mount is gone: this close may fail
                os.close(fd)
    assert_store_holds(store / name, model.array(), f"after {signal.Signals(signum).name}")


def test_zarrfs_umount_returns_after_store_and_exit(template: Template, tmp_path: Path) -> None:
    """Writes, a closed handle and a truncate by path (no handle: only a flush point that
    is not a close stores it); ``zarrfs umount`` returns once all of it is stored."""
    store = template.copy(tmp_path)
    name = ROWS_C.name
    model = model_of(template, name)
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m:
        with opened(m / name / "array.raw") as fd:
            os.pwrite(fd, b"\x07" * 50, 30)
        model.write(30, b"\x07" * 50)
        os.truncate(m / name / "array.raw", 3 * ROWS_C.row_bytes)
        model.resize(3 * ROWS_C.row_bytes)
        done = subprocess.run(
            zarrfs_command("umount", str(m.path)), capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert m.process.poll() == 0, "the daemon had exited when zarrfs umount returned"
        assert_store_holds(store / name, model.array(), "right after zarrfs umount")
        assert chunk_files(store / name) == {"0.0", "0.1"}, "chunks beyond the end deleted"
    assert_zarray_kept(store / name, template.zarrays[name], (3, 6))
