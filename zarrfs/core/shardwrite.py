"""Storing a shard (worker thread): the dirty inner chunks a batch holds, merged
with the inner chunks the stored shard keeps, as one new value.

The old shard is read only for the inner chunks the batch does not replace, and
then only their bytes (its index, and one ranged read of those chunks, never
decoded): a writer that replaces every inner chunk of a shard never reads it.
Inner chunks all fill value are left out of the index; a shard left with none is
deleted, as zarr-python does.
"""

from __future__ import annotations

import numpy as np

from zarrfs.errors import ChunkError, InvalidValueError
from zarrfs.formats.layout import Index
from zarrfs.formats.model import ArrayMeta, ShardLayout
from zarrfs.formats.shards import (
    ShardIndex,
    ShardIndexError,
    build_shard,
    decode_index,
    index_range,
    inner_range,
)
from zarrfs.formats.v3_sharding import is_fill
from zarrfs.stores.base import RANGE_LIMIT, Store

# Kept inner chunks are copied from the old shard in reads of at most this much.
_COPY_BATCH = RANGE_LIMIT // 4


def stage_shard(
    store: Store,
    meta: ArrayMeta,
    shard: Index,
    chunks: dict[Index, np.ndarray],
    dropped: set[int],
) -> tuple[object | None, ShardIndex | None]:
    """Encode and stage shard ``shard`` with ``chunks`` (inner index -> data)
    replacing its inner chunks, and those at ``dropped`` positions left out; or
    delete it when nothing is left. (the store's staged value or None, the new
    index or None)."""
    layout = meta.shards
    assert layout is not None
    key = layout.shard_keys(shard)[0]
    fill = meta.fill_bytes
    encoded: list[bytes | None] = [None] * layout.geometry.n_inner
    kept: list[int] = []
    for position, inner in layout.geometry.inner_chunks_in_array(shard):
        chunk = chunks.get(inner)
        if chunk is None:
            if position not in dropped:
                kept.append(position)
            continue
        if is_fill(chunk, fill):
            continue
        try:
            encoded[position] = meta.codecs.encode(chunk.reshape(-1))
        except Exception as e:
            raise ChunkError(
                meta.display_name, key, f"cannot encode inner chunk {inner}: {e}"
            ) from e
    if kept:
        _copy_kept(store, meta, layout, key, kept, encoded)
    value = build_shard(encoded, layout.checksum, layout.location, endian=layout.endian)
    if value is None:
        store.delete(key, durable=False)
        return None, None
    start, length = index_range(len(value), len(encoded), layout.checksum, layout.location)
    index = decode_index(
        value[start : start + length],
        len(encoded),
        layout.checksum,
        len(value),
        layout.location,
        endian=layout.endian,
    )
    return store.stage(key, value), index


def _copy_kept(
    store: Store,
    meta: ArrayMeta,
    layout: ShardLayout,
    key: str,
    positions: list[int],
    encoded: list[bytes | None],
) -> None:
    """The stored bytes of the inner chunks at ``positions``, into ``encoded``."""
    n_inner = layout.geometry.n_inner
    try:
        size = store.size(key)
        if size is None:
            return
        start, length = index_range(size, n_inner, layout.checksum, layout.location)
        data = store.get_range(key, start, length)
        if data is None:
            return
        old = decode_index(
            data, n_inner, layout.checksum, size, layout.location, endian=layout.endian
        )
        spans = [(p, inner_range(old, p)) for p in positions]
        present = [(p, span) for p, span in spans if span is not None]
        batch: list[tuple[int, tuple[int, int]]] = []
        total = 0
        for item in [*present, None]:
            if item is not None and total + item[1][1] <= _COPY_BATCH:
                batch.append(item)
                total += item[1][1]
                continue
            if batch:
                values = store.get_ranges(key, [span for _, span in batch])
                if values is None:
                    raise ShardIndexError("shard vanished while being rewritten")
                for (position, span), value in zip(batch, values):
                    if len(value) != span[1]:
                        raise ShardIndexError(f"inner chunk at position {position} is cut short")
                    encoded[position] = value
            batch, total = ([item], item[1][1]) if item is not None else ([], 0)
    except (ShardIndexError, InvalidValueError) as e:
        raise ChunkError(
            meta.display_name, key, f"cannot rewrite the shard, the stored one is bad: {e}"
        ) from None
