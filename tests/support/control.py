"""What the tests of the control directory (``.zarrfs/``) share: the keys ``stats`` must
hold, and a v2 group of two uint8 arrays without a compressor (a stored chunk is its
bytes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import zarr

SHAPE, CHUNKS = (64, 64), (16, 64)  # uint8, no compressor: a stored chunk is its bytes
CHUNK_BYTES = CHUNKS[0] * CHUNKS[1]
SIZE = SHAPE[0] * SHAPE[1]
STATS_KEYS = {
    *("store", "read_only", "uptime_seconds", "bytes_read", "cache_hits", "cache_misses"),
    *("chunks_loaded", "read_ahead_loads", "chunks_decoded", "cache_bytes", "cache_size"),
    *("chunks_encoded", "chunks_deleted", "bytes_stored", "dirty_chunks", "dirty_bytes"),
    *("chunks_being_stored", "write_cache_size", "errors", "decode_failures"),
    *("store_failures", "last_store_error", "store_failing", "direct_reads"),
    "directory_reads",
    "listed_ahead",
}


def values(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, 256, SHAPE, dtype="u1")


def create(path: Path, data: np.ndarray) -> None:
    zarr.create_array(
        store=str(path),
        shape=SHAPE,
        chunks=CHUNKS,
        dtype="u1",
        zarr_format=2,
        compressors=None,
        fill_value=0,
    )[...] = data


def group_store(root: Path) -> Path:
    """A v2 group holding arrays ``a`` and ``b``."""
    zarr.open_group(str(root), mode="w", zarr_format=2)
    create(root / "a", values(1))
    create(root / "b", values(2))
    return root
