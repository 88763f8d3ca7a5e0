"""Reading a sharded array's inner chunks (worker threads): a shard's index (its
store's tail, with the size, in one request where the store can), then one inner
chunk's byte range, or a run of neighbouring ones (formats/grid/runs.py); never
the whole shard. Anything wrong with a shard (cut short, its index failing its
crc32c, entries past its end) is a ChunkError naming the array, the shard key and
the inner chunk."""

from __future__ import annotations

from zarrfs.errors import ChunkError, InvalidValueError
from zarrfs.formats.grid.layout import Index
from zarrfs.formats.grid.runs import Member, Run
from zarrfs.formats.grid.shards import (
    ShardIndex,
    ShardIndexError,
    decode_index,
    index_nbytes,
    index_range,
)
from zarrfs.formats.model import ArrayMeta
from zarrfs.stores.base import Store

# Where a sharded array's inner chunk lives: (shard key, offset, nbytes).
Where = tuple[str, int, int]


def load_index(store: Store, meta: ArrayMeta, shard: Index) -> ShardIndex | None:
    """The index of one shard, checked against the shard's size (None when the
    shard is not stored)."""
    layout = meta.shards
    assert layout is not None
    key = layout.shard_keys(shard)[0]
    n_inner = layout.geometry.n_inner
    try:
        if layout.location == "end":
            # One request where the store can: the tail, and the size with it.
            tail = store.get_tail(key, index_nbytes(n_inner, layout.checksum))
            if tail is None:
                return None
            data, size = tail
            index_range(size, n_inner, layout.checksum, layout.location)  # size checked
        else:
            size = store.size(key)
            if size is None:
                return None
            start, length = index_range(size, n_inner, layout.checksum, layout.location)
            data = store.get_range(key, start, length)
            if data is None:  # deleted since: as if never stored
                return None
        return decode_index(
            data, n_inner, layout.checksum, size, layout.location, endian=layout.endian
        )
    except (InvalidValueError, ShardIndexError) as e:
        reason = f"shard index: {e}"
    raise ChunkError(meta.display_name, key, reason)


def fetch_inner(
    store: Store, meta: ArrayMeta, index: Index, where: Where, limit: int
) -> bytes | None:
    """The stored bytes of inner chunk ``index`` (None: the shard is gone)."""
    key, offset, nbytes = where
    if nbytes > limit:
        reason = f"inner chunk {index} is {nbytes} bytes, more than any encoding of it"
    else:
        try:
            data = store.get_range(key, offset, nbytes)
        except InvalidValueError as e:
            reason = f"inner chunk {index}: {e}"
        else:
            if data is None or len(data) == nbytes:
                return data
            reason = (
                f"inner chunk {index}: shard ends at byte {offset + len(data)}, "
                f"its index says [{offset}, {offset + nbytes})"
            )
    raise ChunkError(meta.display_name, key, reason)


def fetch_run(store: Store, meta: ArrayMeta, run: Run) -> bytes | None:
    """The stored bytes of a run of inner chunks (None: the shard is gone; fewer
    bytes than asked where the shard ends early: ``run_member`` tells each chunk)."""
    try:
        return store.get_range(run.key, run.start, run.nbytes)
    except InvalidValueError as e:
        reason = f"bytes {run.start}-{run.start + run.nbytes - 1}: {e}"
    raise ChunkError(meta.display_name, run.key, reason)


def run_member(
    meta: ArrayMeta, run: Run, data: bytes | None, member: Member, limit: int
) -> bytes | memoryview | None:
    """One inner chunk's bytes out of its run's (None: the shard is gone)."""
    if data is None:
        return None
    if member.nbytes > limit:
        reason = (
            f"inner chunk {member.index} is {member.nbytes} bytes, more than any encoding of it"
        )
    elif member.start + member.nbytes <= len(data):
        return memoryview(data)[member.start : member.start + member.nbytes]
    else:
        offset = run.start + member.start
        reason = (
            f"inner chunk {member.index}: shard ends at byte {run.start + len(data)}, "
            f"its index says [{offset}, {offset + member.nbytes})"
        )
    raise ChunkError(meta.display_name, run.key, reason)
