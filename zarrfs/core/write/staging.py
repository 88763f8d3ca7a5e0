"""Staging what a batch stores (worker threads): a chunk, or a shard.

A chunk is encoded and staged, or deleted when it is all fill value. A shard is
staged from the dirty inner chunks a batch holds merged with the inner chunks the
stored shard keeps. The old shard is read only for the inner chunks the batch
does not replace, and then only their bytes (its index, and ranged reads of those
chunks, never decoded): a writer that replaces every inner chunk of a shard never
reads it. Inner chunks all fill value are left out of the index; a shard left
with none is deleted, as zarr-python does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zarrfs.core.counters import Staged
from zarrfs.errors import ChunkError, InvalidValueError
from zarrfs.formats.grid.layout import Index
from zarrfs.formats.grid.shards import (
    ShardIndex,
    ShardIndexError,
    decode_index,
    index_range,
    inner_range,
    shard_parts,
)
from zarrfs.formats.model import ArrayMeta, ShardLayout
from zarrfs.stores.base import RANGE_LIMIT, Store, join_key


def is_fill(chunk: np.ndarray, meta: ArrayMeta) -> bool:
    """Bitwise: every element's bytes equal the fill value's (-0.0 is not 0.0)."""
    if meta.fill_value is None:
        return False
    flat = chunk.reshape(-1, order=meta.order).view(np.uint8).reshape(-1, meta.itemsize)
    fill = np.frombuffer(meta.fill_value, np.uint8)
    # Most chunks differ in their first or last element: answer those without a pass.
    if not (np.array_equal(flat[0], fill) and np.array_equal(flat[-1], fill)):
        return False
    return bool((flat == fill).all())


def stage_unit(
    store: Store,
    meta: ArrayMeta,
    unit: Index,
    chunks: dict[Index, np.ndarray],
    dropped: set[int],
) -> tuple[Any, ShardIndex | None, Staged]:
    """(the store's staged value, or None when the unit was deleted; the new index
    of a shard; what was done, for the counters)."""
    if meta.shards is not None:
        return stage_shard(store, meta, unit, chunks, dropped)
    ((index, chunk),) = chunks.items()
    staged, did = stage_chunk(store, meta, index, chunk)
    return staged, None, did


def stage_chunk(
    store: Store, meta: ArrayMeta, index: Index, chunk: np.ndarray
) -> tuple[Any, Staged]:
    """Encode and stage a chunk, or delete it when it is all fill value (None)."""
    keys = meta.chunk_keys(index)
    if is_fill(chunk, meta):
        delete_chunk(store, meta, index)
        return None, Staged(deleted=1)
    try:
        data = meta.codecs.encode(chunk)
    except Exception as e:
        raise ChunkError(meta.display_name, keys[0], f"cannot encode: {e}") from e
    return store.stage(keys[0], data), Staged(encoded=1, nbytes=len(data))


def stored_units(store: Store, meta: ArrayMeta) -> list[Index]:
    """The units (chunks or shards) the store holds for this array."""
    found = []
    for key, _ in store.scan(meta.path):
        unit = meta.stored_unit(join_key(meta.path, key))
        if unit is not None:
            found.append(unit)
    return found


def store_metadata(
    store: Store,
    key: str,
    document: bytes,
    consolidated: tuple[str, bytes] | None,
    stale: list[str],
) -> Staged:
    """A resize's documents, then the deletion of the values it left stale."""
    store.set(key, document)
    if consolidated is not None:
        store.set(*consolidated)
    for stale_key in stale:
        store.delete(stale_key)
    written = len(document) + (len(consolidated[1]) if consolidated is not None else 0)
    return Staged(nbytes=written, deleted=len(stale))


def delete_chunk(store: Store, meta: ArrayMeta, index: Index) -> None:
    for key in meta.chunk_keys(index):
        store.delete(key, durable=False)


# Kept inner chunks are copied from the old shard in reads of at most this much.
_COPY_BATCH = RANGE_LIMIT // 4


def stage_shard(
    store: Store,
    meta: ArrayMeta,
    shard: Index,
    chunks: dict[Index, np.ndarray],
    dropped: set[int],
) -> tuple[object | None, ShardIndex | None, Staged]:
    """Encode and stage shard ``shard`` with ``chunks`` (inner index -> data)
    replacing its inner chunks, and those at ``dropped`` positions left out; or
    delete it when nothing is left. (the store's staged value or None, the new
    index or None, what was done)."""
    layout = meta.shards
    assert layout is not None
    key = layout.shard_keys(shard)[0]
    encoded: list[bytes | None] = [None] * layout.geometry.n_inner
    kept: list[int] = []
    count = 0  # inner chunks encoded
    for position, inner in layout.geometry.inner_chunks_in_array(shard):
        chunk = chunks.get(inner)
        if chunk is None:
            if position not in dropped:
                kept.append(position)
            continue
        if is_fill(chunk, meta):
            continue
        try:
            encoded[position] = meta.codecs.encode(chunk)
        except Exception as e:
            raise ChunkError(
                meta.display_name, key, f"cannot encode inner chunk {inner}: {e}"
            ) from e
        count += 1
    if kept:
        _copy_kept(store, meta, layout, key, kept, encoded)
    built = shard_parts(encoded, layout.checksum, layout.location, endian=layout.endian)
    if built is None:
        store.delete(key, durable=False)
        return None, None, Staged(encoded=count, deleted=1)
    parts, index = built
    return store.stage(key, parts), index, Staged(count, sum(len(p) for p in parts))


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
