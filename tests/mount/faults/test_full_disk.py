"""A store that stays full: the write cache stays bounded and writes fail.

The store lives on a 64 MiB tmpfs. 400 MiB of non-fill bytes are written through
the mount without fsync, with ``--write-cache-size 32M``. Storing fails once the
tmpfs is full; the daemon must then refuse writes with ENOSPC instead of holding
every written byte in memory (before: every write accepted, 2.8 GB RSS, 1 277 log
lines), log the failures a few times, and lose nothing it already stored.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest
import zarr

from tests.support.mounting import mounted, peak_rss
from tests.support.tmpfs import tiny_tmpfs

MiB = 1 << 20
TOTAL = 400 * MiB
CHUNK = MiB


def test_a_full_store_fails_writes_instead_of_growing_memory(tmp_path: Path) -> None:
    with tiny_tmpfs(tmp_path / "tiny", "64M") as tiny:
        store = tiny / "a.zarr"
        zarr.create_array(
            store=str(store),
            shape=(TOTAL,),
            chunks=(CHUNK,),
            dtype="u1",
            zarr_format=2,
            compressors=None,
            fill_value=0,
        )
        rng = np.random.default_rng(7)
        blocks = [rng.integers(1, 256, CHUNK, dtype="u1").tobytes() for _ in range(4)]
        accepted = late = 0
        refusal: OSError | None = None
        with mounted(
            store, "--write-cache-size", "32M", "--flush-interval", "60", memory_limit=2 << 30
        ) as m:
            fd = os.open(m / "array.raw", os.O_WRONLY)
            try:
                for number in range(TOTAL // CHUNK):
                    try:
                        os.pwrite(fd, blocks[number % 4], number * CHUNK)
                    except OSError as e:
                        refusal = e
                        break
                    accepted += CHUNK
                # Later writes stay refused: a few may slip in while a background
                # batch holds chunks, but the total accepted stays bounded.
                for number in range(accepted // CHUNK, accepted // CHUNK + 40):
                    try:
                        os.pwrite(fd, blocks[number % 4], number * CHUNK)
                    except OSError as e:
                        assert e.errno == errno.ENOSPC, e
                    else:
                        late += CHUNK
                rss = peak_rss(m.process)
                # every accepted byte reads back, stored or still dirty
                reader = os.open(m / "array.raw", os.O_RDONLY)
                try:
                    for number in range(0, accepted // CHUNK, 7):
                        got = os.pread(reader, CHUNK, number * CHUNK)
                        assert got == blocks[number % 4], f"chunk {number} lost"
                finally:
                    os.close(reader)
            finally:
                with pytest.raises(OSError) as closing:
                    os.close(fd)  # close stores this handle's chunks: still no room
                assert closing.value.errno == errno.ENOSPC
            log = m.log()
        assert refusal is not None, f"all {accepted} bytes accepted on a 64 MiB store"
        assert refusal.errno == errno.ENOSPC, refusal
        assert accepted + late <= 160 * MiB, (accepted, late)  # 64 MiB stored + bounded caches
        assert late <= 32 * MiB, late
        assert rss < 500 * MiB, f"daemon peak RSS {rss / MiB:.0f} MiB"
        failures = [line for line in log.splitlines() if " ERROR " in line or " WARNING " in line]
        assert len(failures) <= 25, "\n".join(failures[:40])
        # what was stored before the disk filled is intact
        stored = sorted(int(p.name) for p in store.iterdir() if p.name.isdigit())
        assert stored, "nothing was stored"
        for number in stored:
            assert (store / str(number)).read_bytes() == blocks[number % 4], number
