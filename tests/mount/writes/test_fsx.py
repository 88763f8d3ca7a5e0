"""The fsx-style exerciser (tests/support/fsx.py) against zarrfs, and against plain files
that it must agree with or catch when they are broken on purpose.

The seed is random; set ZARRFS_FSX_SEED to replay a failure. Every assertion message
names the seed and the last operations.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.fsx import (
    SHARDED_SPECS,
    SPECS,
    Exerciser,
    FileIO,
    LocalFiles,
    RowsEnforced,
    choose_seed,
    local_models,
    run_on_zarrfs,
)

# --- against zarrfs ----------------------------------------------------------------


def test_fsx_default_options(tmp_path: Path) -> None:
    """6 000 operations with the default write cache and flush interval."""
    run_on_zarrfs(tmp_path, (), 6000)


def test_fsx_tiny_write_cache(tmp_path: Path) -> None:
    """4 000 operations while the dirty-byte budget and the flush interval force flushes."""
    run_on_zarrfs(tmp_path, ("--write-cache-size", "16K", "--flush-interval", "1"), 4000)


def test_fsx_sharded(tmp_path: Path) -> None:
    """4 000 operations on sharded Zarr v3 arrays with the default options."""
    run_on_zarrfs(tmp_path, (), 4000, SHARDED_SPECS)


RESIZE_RACES = [
    ("v2", SPECS, "0.02", "32K"),
    ("v2", SPECS, "0.1", "256K"),
    ("sharded", SHARDED_SPECS, "0.02", "32K"),
    ("sharded", SHARDED_SPECS, "0.05", "64K"),
    ("sharded", SHARDED_SPECS, "0.1", "256K"),
]


@pytest.mark.parametrize(
    ("specs", "interval", "cache"),
    [race[1:] for race in RESIZE_RACES],
    ids=[f"{kind}-{interval}s-{cache}" for kind, _, interval, cache in RESIZE_RACES],
)
def test_fsx_resizes_racing_the_background_writer(
    tmp_path: Path, specs: tuple, interval: str, cache: str
) -> None:
    """Streams stored behind the writer, truncates and grows (also racing a write
    through another handle), fsync and .zarrfs/flush, while the periodic flush and
    the write-cache budget store the same arrays: the model holds, the store agrees
    at every remount, and the daemon logs no internal error."""
    options = ("--flush-interval", interval, "--write-cache-size", cache)
    run_on_zarrfs(tmp_path, options, 3000, specs, resizes=True)


# --- the exerciser itself, against plain files ------------------------------------


def test_exerciser_agrees_with_plain_files(tmp_path: Path) -> None:
    seed = choose_seed()
    target = LocalFiles(tmp_path, enforces_rows=True)
    models = local_models(tmp_path, seed)
    exerciser = Exerciser(seed, target, models, io=RowsEnforced(), remount_every=700)
    counts = exerciser.run(3000)
    assert all(model.partial_row_checked for model in models.values()), f"seed {seed}"
    # Every operation kind ran.
    assert set(counts) >= {
        "read",
        "read_uncached",
        "write_inside",
        "write_raw_and_npy",
        "write_fill",
        "write_end",
        "write_gap",
        "append",
        "append_o_append",
        "stream",
        "fsync",
        "control_flush",
        "truncate",
        "race_truncate",
        "reopen",
        "partial_row",
    }, f"seed {seed}: {counts}"


class LosesWrites(FileIO):
    def __init__(self) -> None:
        self.calls = 0

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        self.calls += 1
        return len(data) if self.calls % 25 == 0 else os.pwrite(fd, data, offset)


class ShiftsWrites(FileIO):
    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        os.pwrite(fd, data[1:], offset + 1)
        return len(data)


class GrowsWithGarbage(FileIO):
    def ftruncate(self, fd: int, size: int) -> None:
        old = os.fstat(fd).st_size
        os.ftruncate(fd, size)
        if size > old:
            os.pwrite(fd, b"\xa5" * (size - old), old)


class ForgetsToShrink(FileIO):
    def ftruncate(self, fd: int, size: int) -> None:
        if size > os.fstat(fd).st_size:
            os.ftruncate(fd, size)


@pytest.mark.parametrize("broken", [LosesWrites, ShiftsWrites, GrowsWithGarbage, ForgetsToShrink])
def test_exerciser_catches_broken_files(tmp_path: Path, broken: type[FileIO]) -> None:
    seed = 1234
    target = LocalFiles(tmp_path)
    exerciser = Exerciser(seed, target, local_models(tmp_path, seed), io=broken())
    with pytest.raises(AssertionError, match=f"seed {seed}"):
        exerciser.run(2000)
