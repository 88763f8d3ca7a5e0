"""The read path tells the store, once per array, that the array's keys are about to
be read (``Store.reading_under``): over a disk cache whose entries went stale, a
second mount's read of a whole array then costs one listing of the array's keys
instead of a conditional request per chunk. What a disk cache holds fresh is read
by the decoder that needs it, as from a local store; the rest goes to the fetch
threads."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import trio
import zarr

from tests.support.versioned import VersionedStore
from zarrfs.core.arrays import ArrayState
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.formats.metadata.v2 import parse_array
from zarrfs.formats.metadata.v3 import parse_node
from zarrfs.formats.model import ArrayMeta
from zarrfs.stores.diskcache import DiskCacheStore

TTL = 0.3
SHAPE, CHUNKS = (40, 30), (8, 7)


def bucket(tmp_path: Path) -> tuple[VersionedStore, np.ndarray]:
    """A v2 tiled array written by zarr-python, its files in a remote-like store."""
    local = tmp_path / "local.zarr"
    data = (np.arange(np.prod(SHAPE)) * 1.5).astype("<f4").reshape(SHAPE)
    zarr.create_array(
        str(local / "g" / "a"), shape=SHAPE, chunks=CHUNKS, dtype="<f4", zarr_format=2
    )[...] = data
    files = {
        p.relative_to(local).as_posix(): p.read_bytes() for p in local.rglob("*") if p.is_file()
    }
    return VersionedStore(files), data


def read_whole(store: DiskCacheStore, inner: VersionedStore) -> bytes:
    meta = parse_array("g/a", inner.peek("g/a/.zarray"), None)
    assert isinstance(meta, ArrayMeta)
    state = ArrayState(meta, {}, ChunkCache(store, 1 << 24))
    return bytes(trio.run(state.read, 0, meta.nbytes))


def test_a_stale_disk_cache_is_revalidated_by_one_listing(tmp_path: Path) -> None:
    inner, data = bucket(tmp_path)
    first = DiskCacheStore(inner, str(tmp_path / "cache"), 1 << 24, ttl=TTL)
    assert read_whole(first, inner) == data.tobytes()
    chunk_gets = inner.count("fetch")
    assert chunk_gets == 5 * 5  # every chunk asked once
    time.sleep(TTL + 0.05)
    inner.requests.clear()
    # A second mount of the same cache directory: every entry stale.
    second = DiskCacheStore(inner, str(tmp_path / "cache"), 1 << 24, ttl=TTL)
    assert read_whole(second, inner) == data.tobytes()
    assert dict(inner.requests) == {("versions", "g/a"): 1}
    assert second.stats.listed == chunk_gets


def test_the_store_is_told_once_per_array(tmp_path: Path) -> None:
    inner, _ = bucket(tmp_path)

    class Told(DiskCacheStore):
        told: list[str] = []

        def reading_under(self, prefix: str) -> None:
            self.told.append(prefix)
            super().reading_under(prefix)

    store = Told(inner, str(tmp_path / "cache"), 1 << 24)
    read_whole(store, inner)
    assert Told.told == ["g/a"]


class Watched(DiskCacheStore):
    """Records which threads read chunks from the cache files, and which asked the
    store behind (a fetch)."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.readers: set[str] = set()

    def get_buffer(self, key: str, *, limit: int | None = None) -> bytes | memoryview | None:
        if not key.endswith(".zarray"):
            self.readers.add(threading.current_thread().name.rsplit("-", 1)[0])
        return super().get_buffer(key, limit=limit)


def test_fresh_entries_are_read_by_the_decoders_without_a_fetch_thread(tmp_path: Path) -> None:
    inner, data = bucket(tmp_path)
    fill = Watched(inner, str(tmp_path / "cache"), 1 << 24, ttl=3600)
    assert read_whole(fill, inner) == data.tobytes()
    assert fill.readers == {"zarrfs-decode", "zarrfs-fetch"}  # tried, then fetched
    inner.requests.clear()
    hits = Watched(inner, str(tmp_path / "cache"), 1 << 24, ttl=3600)
    assert read_whole(hits, inner) == data.tobytes()
    assert hits.readers == {"zarrfs-decode"} and inner.count() == 0


def test_a_shard_index_and_runs_in_the_cache_are_read_at_hand(tmp_path: Path) -> None:
    local = tmp_path / "local.zarr"
    data = (np.arange(np.prod(SHAPE)) * 0.5).astype("<f4").reshape(SHAPE)
    zarr.create_array(str(local / "s"), shape=SHAPE, chunks=(4, 5), shards=(8, 15), dtype="<f4")[
        ...
    ] = data
    files = {
        p.relative_to(local).as_posix(): p.read_bytes() for p in local.rglob("*") if p.is_file()
    }
    inner = VersionedStore(files)
    meta = parse_node("s", inner.peek("s/zarr.json"))
    assert isinstance(meta, ArrayMeta)

    def read(store: DiskCacheStore) -> bytes:
        cache = ChunkCache(store, 1 << 24)
        cache.read_ahead = True
        state = ArrayState(meta, {}, cache)
        return bytes(trio.run(state.read, 0, meta.nbytes))

    assert read(DiskCacheStore(inner, str(tmp_path / "cache"), 1 << 24, ttl=3600)) == data.tobytes()
    inner.requests.clear()
    assert read(DiskCacheStore(inner, str(tmp_path / "cache"), 1 << 24, ttl=3600)) == data.tobytes()
    assert inner.count() == 0
