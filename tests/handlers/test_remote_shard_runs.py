"""A stream through a sharded array on a remote store: the inner chunks a stripe
needs are fetched in runs (one ranged request for chunks that lie together, at most
MAX_RUN_BYTES each), the indexes of the shards ahead are read before their stripes
start, and the decode and stripe buffers are recycled. Without a server: a
directory store that says it is remote and records every range it is asked for."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio
import zarr

from tests.support.stores import CountingStore
from zarrfs.core.read import chunks as chunks_module
from zarrfs.core.read import readahead
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.read.shardread import run_member
from zarrfs.errors import ChunkError
from zarrfs.formats.grid.runs import Member, Run
from zarrfs.fuse.operations import OpenFile, Operations
from zarrfs.namespace.nodes import FileNode
from zarrfs.namespace.tree import Tree

SHAPE, INNER = (512, 1024), (32, 256)
ROW_SHARD = (32, 1024)  # 16 shards, each one row of 4 inner chunks (one stripe)
SQUARE_SHARD = (128, 1024)  # 4 shards of 4 x 4 inner chunks, stored in Morton order
INNER_NBYTES = math.prod(INNER) * 4  # uncompressed: each inner chunk's stored size


class RemoteCountingStore(CountingStore):
    remote = True


def sharded(root: Path, shard: tuple[int, int] = ROW_SHARD, compressors: Any = None) -> np.ndarray:
    """A v3 float32 array of shards of tiles, stored uncompressed unless asked
    (inner chunks of known size, back to back as zarr-python writes them)."""
    data = np.arange(math.prod(SHAPE), dtype="<f4").reshape(SHAPE)
    z = zarr.create_array(
        store=str(root),
        shape=SHAPE,
        chunks=INNER,
        shards=shard,
        dtype="<f4",
        compressors=compressors,
        fill_value=0,
    )
    z[...] = data
    return data


class LocallyServedStore(RemoteCountingStore):
    """A remote store whose reads are answered from local copies now (a disk cache
    full of the array)."""

    def serves_locally(self) -> bool:
        return True


def handlers(
    root: Path, kind: type[RemoteCountingStore] = RemoteCountingStore
) -> tuple[Operations, RemoteCountingStore, ChunkCache, int]:
    store = kind(str(root))
    cache = ChunkCache(store, 1 << 26)
    cache.read_ahead = True
    ops = Operations(Tree(store, cache), cache.counters, read_only=True)
    node = ops.tree.resolve("array.raw")
    assert isinstance(node, FileNode)
    return ops, store, cache, ops.files.add(OpenFile(node, 1))


def stream(ops: Operations, fh: int, size: int, step: int = 32 << 10) -> bytes:
    async def main() -> bytes:
        out = bytearray()
        for offset in range(0, size, step):
            out += bytes(await ops.read(fh, offset, step))
        return bytes(out)

    return trio.run(main)


def index_nbytes(shard: tuple[int, int]) -> int:
    """16 bytes (offset, nbytes) per inner chunk, and the crc32c."""
    return 16 * math.prod(s // i for s, i in zip(shard, INNER)) + 4


def chunk_ranges(
    store: CountingStore, shard: tuple[int, int] = ROW_SHARD
) -> list[tuple[str, int, int]]:
    """The ranges asked for that are not a shard's index (which is its last bytes)."""
    return [r for r in store.ranges if r[2] != index_nbytes(shard)]


def test_a_stripe_fetches_its_inner_chunks_in_one_run(tmp_path: Path) -> None:
    data = sharded(tmp_path)
    ops, store, _, fh = handlers(tmp_path)
    assert stream(ops, fh, data.nbytes) == data.tobytes()
    ranges = chunk_ranges(store)
    # A stripe is a shard of one row of 4 inner chunks, stored back to back: one
    # request each, not 4.
    assert len(ranges) == 16, ranges
    assert all(length == 4 * INNER_NBYTES for _, _, length in ranges)


def test_no_byte_of_a_morton_ordered_shard_is_fetched_twice(tmp_path: Path) -> None:
    data = sharded(tmp_path, SQUARE_SHARD)
    ops, store, _, fh = handlers(tmp_path)
    assert stream(ops, fh, data.nbytes) == data.tobytes()
    ranges = chunk_ranges(store, SQUARE_SHARD)
    # A stripe's 4 chunks lie in two pairs (Morton order): the chunks between them
    # come along, for the next stripe.
    assert len(ranges) <= 32, ranges
    for key in {key for key, _, _ in ranges}:
        spans = sorted((start, start + length) for k, start, length in ranges if k == key)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans


def test_runs_are_cut_at_max_run_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunks_module, "MAX_RUN_BYTES", 2 * INNER_NBYTES)
    data = sharded(tmp_path)
    ops, store, _, fh = handlers(tmp_path)
    assert stream(ops, fh, data.nbytes) == data.tobytes()
    ranges = chunk_ranges(store)
    assert len(ranges) == 16 * 2
    assert max(length for _, _, length in ranges) == 2 * INNER_NBYTES


def test_a_local_store_reads_inner_chunks_one_by_one(tmp_path: Path) -> None:
    data = sharded(tmp_path)
    local = CountingStore(str(tmp_path))  # (a file read costs no round trip)
    cache = ChunkCache(local, 1 << 26)
    cache.read_ahead = True
    ops = Operations(Tree(local, cache), cache.counters, read_only=True)
    node = ops.tree.resolve("array.raw")
    assert isinstance(node, FileNode)
    assert stream(ops, ops.files.add(OpenFile(node, 1)), data.nbytes) == data.tobytes()
    assert len(chunk_ranges(local)) == 64


def test_indexes_of_shards_ahead_are_read_before_their_stripes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(readahead, "REMOTE_STRIPES_AHEAD", 1)
    monkeypatch.setattr(readahead, "REMOTE_INDEXES_AHEAD", 8)
    data = sharded(tmp_path)
    ops, store, _, fh = handlers(tmp_path)

    async def main() -> None:
        await ops.read(fh, 0, 32 << 10)
        await ops.read(fh, 32 << 10, 32 << 10)  # (the second read makes a stream)
        await trio.sleep(0.3)  # the loads started in the background end

    trio.run(main)
    indexed = {key for key, _, length in store.ranges if length == index_nbytes(ROW_SHARD)}
    fetched = {key for key, _, _ in chunk_ranges(store)}
    # A stripe is a shard here: the first read is in shard 0, one stripe is ahead of
    # it, and the indexes of the eight beyond are read.
    assert indexed == {f"c/{row}/0" for row in range(10)}, sorted(indexed)
    assert fetched == {"c/0/0", "c/1/0"}, sorted(fetched)
    assert stream(ops, fh, data.nbytes) == data.tobytes()


@pytest.mark.parametrize(
    ("kind", "ahead"),
    [
        (RemoteCountingStore, readahead.REMOTE_STRIPES_AHEAD),
        (LocallyServedStore, readahead.STRIPES_AHEAD),
    ],
)
def test_the_window_is_a_networks_only_while_reads_wait_on_one(
    tmp_path: Path, kind: type[RemoteCountingStore], ahead: int
) -> None:
    sharded(tmp_path)
    ops, store, _, fh = handlers(tmp_path, kind)

    async def main() -> None:
        await ops.read(fh, 0, 32 << 10)
        await ops.read(fh, 32 << 10, 32 << 10)
        await trio.sleep(0.3)  # the loads started in the background end

    trio.run(main)
    fetched = {key for key, _, _ in chunk_ranges(store)}
    # The stripe read (a shard here) and those ahead of it; where the reads are
    # answered locally, no shard's index is read ahead of its stripe either.
    assert fetched == {f"c/{row}/0" for row in range(ahead + 1)}, sorted(fetched)
    indexed = {key for key, _, length in store.ranges if length == index_nbytes(ROW_SHARD)}
    assert (indexed == fetched) == (kind is LocallyServedStore), sorted(indexed)


def test_stripe_and_decode_buffers_are_recycled(tmp_path: Path) -> None:
    data = sharded(tmp_path, compressors={"name": "zstd", "configuration": {"level": 1}})
    ops, _, cache, fh = handlers(tmp_path)
    assert stream(ops, fh, data.nbytes) == data.tobytes()
    counters = cache.counters
    # 16 stripes of 4 inner chunks each: the chunks' buffers go back to be decoded
    # into again once their stripe is assembled, and stripes reuse the stripes the
    # stream has passed.
    assert counters.buffers_recycled >= 16 + 32, counters.buffers_recycled
    assert counters.stripe_buffers_reused >= 4, counters.stripe_buffers_reused


# -- one chunk out of its run -----------------------------------------------------------


class _Meta:
    display_name = "arr"


RUN = Run("c/0/0", 100, 30, (Member((0,), 0, 10), Member((1,), 10, 10), Member((2,), 20, 10)))


def test_run_member_slices_its_chunk() -> None:
    data = bytes(range(30))
    got = run_member(_Meta(), RUN, data, RUN.members[1], limit=100)  # type: ignore[arg-type]
    assert bytes(got or b"") == bytes(range(10, 20))


def test_a_run_cut_short_fails_only_the_chunks_past_its_end() -> None:
    data = bytes(range(25))  # the shard ends 5 bytes early
    first = run_member(_Meta(), RUN, data, RUN.members[0], limit=100)  # type: ignore[arg-type]
    assert bytes(first or b"") == bytes(range(10))
    with pytest.raises(ChunkError, match=r"inner chunk \(2,\): shard ends at byte 125"):
        run_member(_Meta(), RUN, data, RUN.members[2], limit=100)  # type: ignore[arg-type]


def test_a_run_member_over_the_limit_is_refused() -> None:
    with pytest.raises(ChunkError, match="more than any encoding"):
        run_member(_Meta(), RUN, bytes(30), RUN.members[0], limit=5)  # type: ignore[arg-type]


def test_a_run_of_a_deleted_shard_reads_as_fill() -> None:
    assert run_member(_Meta(), RUN, None, RUN.members[0], limit=100) is None  # type: ignore[arg-type]
