"""SIGKILL of the daemon while it writes a sharded Zarr v3 array.

The array is int64, inner chunks of 8 full rows (one pwrite each), shards of 4
inner chunks. Every inner chunk write stores a stamp (generation << 32 | chunk
<< 16 | position), so a decoded inner chunk tells which write produced it. After
the kill every shard must decode (its index passes its crc32c), each inner chunk
must be one whole write, and everything fsync'ed before the kill must be there:
checked with zarr-python 3 and tensorstore.
"""

from __future__ import annotations

import os
import signal
from contextlib import suppress
from pathlib import Path

import numpy as np
import zarr

from tests.support.mounting import mounted, unmount
from tests.support.oracles import read_tensorstore, read_zarr_python

ROWS, COLUMNS, PER_SHARD, CHUNKS = 8, 512, 4, 16
CHUNK_BYTES = ROWS * COLUMNS * 8
POSITIONS = np.arange(ROWS * COLUMNS, dtype="<i8")


def stamp(chunk: int, generation: int) -> np.ndarray:
    return (np.int64(generation) << 32) | (np.int64(chunk) << 16) | POSITIONS


def generations(values: np.ndarray, where: str) -> list[int]:
    found = []
    for chunk in range(CHUNKS):
        flat = values[chunk * ROWS : (chunk + 1) * ROWS].reshape(-1)
        generation = int(flat[0]) >> 32
        assert np.array_equal(flat, stamp(chunk, generation)), f"{where}: inner chunk {chunk} torn"
        found.append(generation)
    return found


def test_sigkill_keeps_every_fsynced_inner_chunk_and_tears_no_shard(tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    z = zarr.create_array(
        store=str(store),
        shape=(CHUNKS * ROWS, COLUMNS),
        chunks=(ROWS, COLUMNS),
        shards=(PER_SHARD * ROWS, COLUMNS),
        dtype="<i8",
        fill_value=-1,
    )
    z[...] = np.concatenate([stamp(c, 0) for c in range(CHUNKS)]).reshape(z.shape)
    synced = {1: [0, 1, 5, 6, 9, 15]}  # generation 1: fsync'ed
    later = [1, 2, 3, 5, 9, 10, 11, 12]  # generation 2: written, not fsync'ed
    with mounted(store) as m:
        fd = os.open(m / "array.raw", os.O_RDWR)
        try:
            for chunk in synced[1]:
                os.pwrite(fd, stamp(chunk, 1).tobytes(), chunk * CHUNK_BYTES)
            os.fsync(fd)
            for chunk in later:
                os.pwrite(fd, stamp(chunk, 2).tobytes(), chunk * CHUNK_BYTES)
            os.kill(m.process.pid, signal.SIGKILL)
            m.process.wait(timeout=30)
        finally:
            with suppress(OSError):  # ENOTCONN: its daemon is dead
                os.close(fd)
        assert unmount(m.path) is None
    for name, values in [
        ("zarr-python", read_zarr_python(store)),
        ("tensorstore", read_tensorstore(store)),
    ]:
        found = generations(np.asarray(values), name)
        for chunk in range(CHUNKS):
            allowed = {0}
            if chunk in synced[1]:
                allowed = {1}
            if chunk in later:
                allowed = (allowed if chunk in synced[1] else {0}) | {2}
            assert found[chunk] in allowed, (name, chunk, found[chunk], allowed)
