"""Bad input in the layouts before v2 through a real mount: damaged documents hide their
array with one log line, a blosc header claiming too much is an EIO for the reads of that
chunk, and the rest of the mount keeps serving (tests/handlers/test_legacy_bad_input.py
checks each case through the tree)."""

from __future__ import annotations

import errno
import math
import os
import re
from pathlib import Path

import numpy as np
import pytest

from tests.support.legacy import (
    DTYPE,
    GOOD,
    V0,
    V1,
    VALUES,
    claim_nbytes,
    write_array,
    write_bad_array,
    write_root_with_good_arrays,
)
from tests.support.mounting import mounted, read_range

# -- handler level -------------------------------------------------------------------------

# Corrupt arrays whose chunks are whole rows of 32 KiB: each chunk has its own pages
# of array.raw, so the kernel's page-sized reads of a good chunk never touch a bad one.
GRID_SHAPE, GRID_CHUNKS = (64, 1024), (8, 1024)
GRID_VALUES = (np.arange(math.prod(GRID_SHAPE), dtype=DTYPE).reshape(GRID_SHAPE) * 3 - 5).astype(
    DTYPE
)
GRID_CHUNK_BYTES = math.prod(GRID_CHUNKS) * np.dtype(DTYPE).itemsize
CORRUPT_ROW_CHUNK = 3
MOUNT_CORRUPT = {"corrupt_v0": (V0, GRID_CHUNK_BYTES + 1), "corrupt_v1": (V1, 2**32 - 1)}
MOUNT_BAD = (
    "pre-v1-truncated-json",
    "pre-v1-missing-dtype",
    "pre-v1-chunk-zero",
    "pre-v1-nbytes-2to63",
    "v1-not-utf8",
    "v1-missing-shape",
    "v1-chunk-negative",
    "v1-unknown-compression",
)


def test_mount_with_bad_arrays(tmp_path: Path) -> None:
    store = tmp_path / "store.zarr"
    write_root_with_good_arrays(store)
    for case in MOUNT_BAD:
        write_bad_array(store / case, case)
    for name, (layout, claim) in MOUNT_CORRUPT.items():
        write_array(store / name, layout, GRID_VALUES, GRID_CHUNKS)
        claim_nbytes(store / name / layout.chunk_key((CORRUPT_ROW_CHUNK, 0)), claim)

    with mounted(store, "--read-only", log_dir=tmp_path) as m:
        names = [".zarrfs", ".zgroup", *sorted(MOUNT_CORRUPT), *GOOD, "group.nc"]
        assert sorted(os.listdir(m.path)) == sorted(names)
        for case in MOUNT_BAD:
            with pytest.raises(FileNotFoundError):
                os.stat(m / case)
        expected = GRID_VALUES.tobytes()
        start = CORRUPT_ROW_CHUNK * GRID_CHUNK_BYTES
        for name in MOUNT_CORRUPT:
            raw = m / name / "array.raw"
            assert os.stat(raw).st_size == len(expected)
            for offset, length in ((start + 4100, 8), (start, GRID_CHUNK_BYTES)):
                with pytest.raises(OSError) as info:
                    read_range(raw, offset, length)
                assert info.value.errno == errno.EIO, info.value
            # right after the failure: the neighbouring chunks and the other arrays
            for chunk in (CORRUPT_ROW_CHUNK - 1, CORRUPT_ROW_CHUNK + 1, 0):
                offset = chunk * GRID_CHUNK_BYTES
                got = read_range(raw, offset, GRID_CHUNK_BYTES)
                assert got == expected[offset : offset + GRID_CHUNK_BYTES], (name, chunk)
            for good in GOOD:
                assert (m / good / "array.raw").read_bytes() == VALUES.tobytes(), good
                assert np.array_equal(np.load(m / good / "array.npy"), VALUES), good
        assert m.process.poll() is None, "the daemon keeps serving"
        log = m.log()
    for case in MOUNT_BAD:
        pattern = re.compile(rf"(?<![\w.-]){re.escape(case)}(?![\w.-])")
        lines = [line for line in log.splitlines() if pattern.search(line)]
        assert len(lines) == 1 and "WARNING" in lines[0], f"{case}:\n{log}"
