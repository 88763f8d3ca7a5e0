"""``sharding_indexed`` as a working codec (pure, no I/O).

The codec chain parser (``v3_codecs``) only recognises sharding; here it becomes a
codec that decodes and encodes whole shards: the inner chunks one by one through
their own chain, missing ones as the fill value, inner chunks equal to the fill
value left out of the index. zarrfs needs whole shards in two places only: inner
chunks that are shards themselves (nested sharding), and arrays whose chain puts
other codecs around the shard (a transpose before it, a checksum over it), where
no inner chunk can be located without the whole shard. Every other sharded array
is read by byte ranges (``ShardLayout`` in model.py, core/read/chunks.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from zarrfs.errors import MetadataError
from zarrfs.formats.codecs.pipeline import size_bound
from zarrfs.formats.codecs.v3 import V3CodecChain, parse_codecs
from zarrfs.formats.grid.shards import (
    ShardGeometry,
    ShardIndex,
    ShardingConfig,
    build_shard,
    encode_index,
    index_nbytes,
    parse_sharding_config,
    split_shard,
)

# Shards inside shards inside shards...: no layout needs more, and each level
# multiplies the work of decoding one chunk.
MAX_NESTING = 4


def is_fill(chunk: np.ndarray, fill: bytes) -> bool:
    """Bitwise: every element's bytes are the fill value's (-0.0 is not 0.0)."""
    itemsize = len(fill)
    flat = np.ascontiguousarray(chunk).reshape(-1).view(np.uint8).reshape(-1, itemsize)
    pattern = np.frombuffer(fill, np.uint8)
    # Most chunks differ in their first or last element: answer those without a pass.
    if not (np.array_equal(flat[0], pattern) and np.array_equal(flat[-1], pattern)):
        return False
    return bool((flat == pattern).all())


@dataclass(frozen=True)
class ShardingCodec:
    """Array->bytes: a whole shard (the array of the shard's shape) <-> its bytes."""

    config: ShardingConfig
    inner: V3CodecChain  # the inner chunks' chain (itself sharded when nested)
    fill: bytes  # one element, in the chain's (little-endian) dtype
    dtype: np.dtype

    def describe(self) -> str:
        return (
            f"sharding_indexed(chunk_shape={list(self.config.chunk_shape)}, "
            f"index={self.config.index_location}, codecs=[{self.inner.describe()}])"
        )

    def _geometry(self, shape: tuple[int, ...]) -> ShardGeometry:
        return ShardGeometry(shape, shape, self.config.chunk_shape)

    def _boxes(self, shape: tuple[int, ...]) -> list[tuple[slice, ...]]:
        """Each inner chunk's box in the shard, in the index's (C) order."""
        inner = self.config.chunk_shape
        grid = self._geometry(shape).chunks_per_shard
        return [
            tuple(slice(i * c, (i + 1) * c) for i, c in zip(position, inner))
            for position in np.ndindex(*grid)
        ]

    def max_encoded(self, shape: tuple[int, ...]) -> int:
        """The most bytes a shard of ``shape`` may take: every inner chunk at its
        own bound, plus the index."""
        n_inner = self._geometry(shape).n_inner
        inner_nbytes = math.prod(self.config.chunk_shape) * self.dtype.itemsize
        return n_inner * size_bound(inner_nbytes) + index_nbytes(
            n_inner, self.config.index_checksum
        )

    def decode_array(self, data: bytes | memoryview, shape: tuple[int, ...]) -> np.ndarray:
        config = self.config
        boxes = self._boxes(shape)
        pieces = split_shard(
            data,
            len(boxes),
            config.index_checksum,
            config.index_location,
            endian=config.index_endian,
        )
        out = np.empty(shape, dtype=self.dtype)
        void = np.dtype((np.void, self.dtype.itemsize))
        fill = np.frombuffer(self.fill, dtype=void)[0]
        for box, piece in zip(boxes, pieces):
            if piece is None:
                out[box].view(void)[...] = fill
            else:
                out[box] = self.inner.decode(piece, config.chunk_shape)
        return out

    def encode_array(self, arr: np.ndarray) -> bytes:
        config = self.config
        chunks: list[bytes | None] = []
        for box in self._boxes(arr.shape):
            part = np.ascontiguousarray(arr[box])
            chunks.append(None if is_fill(part, self.fill) else self.inner.encode(part))
        shard = build_shard(
            chunks, config.index_checksum, config.index_location, endian=config.index_endian
        )
        if shard is None:  # all fill: a shard of nothing but its index is valid
            empty = ShardIndex.empty(len(chunks))
            return encode_index(empty, config.index_checksum, endian=config.index_endian)
        return shard


def with_sharding(chain: V3CodecChain, fill: bytes, depth: int = 0) -> V3CodecChain:
    """The chain with its ``sharding_indexed`` (and any nested one) made a working
    ``ShardingCodec``; chains without sharding come back as they are."""
    marker = chain.sharding
    if marker is None:
        return chain
    if depth >= MAX_NESTING:
        raise MetadataError(f"sharding nested more than {MAX_NESTING} levels deep")
    config = parse_sharding_config(marker.configuration)
    shard_shape = chain.encoded_shape()
    ShardGeometry(shard_shape, shard_shape, config.chunk_shape)  # inner divides shard
    inner = parse_codecs(list(config.codecs), chain.dtype, list(config.chunk_shape))
    inner = with_sharding(inner, fill, depth + 1)
    return replace(chain, array_bytes=ShardingCodec(config, inner, fill, chain.dtype))


def ranged(chain: V3CodecChain) -> ShardingCodec | None:
    """The shard codec when inner chunks can be read by byte ranges: nothing but
    ``sharding_indexed`` in the chain (a transpose before it or a checksum over
    it needs the whole shard)."""
    stage = chain.array_bytes
    if isinstance(stage, ShardingCodec) and not chain.array_array and not chain.bytes_bytes:
        return stage
    return None
