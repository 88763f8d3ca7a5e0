"""One metadata model for every Zarr format version."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from zarrfs.formats.codecs.chain import CodecChain
from zarrfs.formats.codecs.pipeline import CodecPipeline
from zarrfs.formats.grid.layout import Index, chunk_count, grid_shape
from zarrfs.formats.grid.shards import ShardGeometry


def _inside(index: Index, grid: Index) -> bool:
    return len(index) == len(grid) and all(0 <= i < g for i, g in zip(index, grid))


@dataclass(frozen=True)
class ShardLayout:
    """Where the inner chunks of a sharded array live: shard ``s`` is the value at
    ``shard_keys(s)[0]``, holding inner chunks (the array's ``chunks``) and an index
    of ``(offset, nbytes)`` pairs, encoded as ``checksum`` / ``location`` / ``endian``
    say (formats/grid/shards.py)."""

    geometry: ShardGeometry
    shard_keys: Callable[[Index], list[str]] = field(repr=False)
    shard_index: Callable[[str], Index | None] = field(repr=False)  # key → shard
    checksum: bool = True
    location: str = "end"
    endian: str = "little"

    @property
    def shard_shape(self) -> Index:
        return self.geometry.shard_shape


@dataclass(frozen=True)
class ArrayMeta:
    """Everything zarrfs needs to know about one array, whatever format it came from.

    ``fill_value`` is the bytes of one element in ``dtype`` (byte order included), or
    ``None`` for a ``null`` fill value, which reads as zero bytes. ``chunk_keys``
    maps a chunk index to the store keys that may hold it, most likely first (more
    than one only for legacy stores that do not record their key separator).
    ``unsupported`` says why the array has no flat-file view, or is ``None``.
    """

    path: str
    zarr_format: int
    shape: Index
    chunks: Index
    dtype: np.dtype
    order: str
    fill_value: bytes | None
    # Given as a v2-style pipeline, it is made its chain for this chunk geometry.
    codecs: CodecChain
    chunk_keys: Callable[[Index], list[str]]
    documents: tuple[str, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    dimension_names: tuple[str | None, ...] | None = None
    unsupported: str | None = None
    # store key → chunk index, the inverse of chunk_keys (None: not a chunk key)
    chunk_index: Callable[[str], Index | None] = field(default=lambda key: None, repr=False)
    # Sharded (v3 sharding_indexed): ``chunks`` are the inner chunks, ``codecs``
    # theirs, and the stored values are shards; chunk_keys/chunk_index are unused.
    shards: ShardLayout | None = None
    # The document's own words for info and xattrs: its data type (v3: "float32" or
    # an extension object) and codec configuration by field name (v2: "compressor"
    # and "filters"; v3: "codecs"), JSON-able.
    data_type_json: Any = None
    codec_json: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.codecs, CodecPipeline):
            chain = self.codecs.chain(self.dtype, self.chunks, self.order)
            object.__setattr__(self, "codecs", chain)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize

    @property
    def chunk_nbytes(self) -> int:
        return math.prod(self.chunks) * self.itemsize

    @property
    def n_chunks(self) -> int:
        return chunk_count(self.shape, self.chunks)

    @functools.cached_property
    def fill_bytes(self) -> bytes:
        """One element of fill as stored bytes; a null fill value is zero bytes."""
        return self.fill_value if self.fill_value is not None else bytes(self.itemsize)

    @property
    def display_name(self) -> str:
        # Store paths hold no NUL: the read path names a view's twin of an array
        # (core/read/byteorder.py) after one, and it is that array to a reader.
        return self.path.partition("\0")[0] or "/"

    # -- storage units: what one stored value holds (a chunk, or a shard) ---------

    def unit_of(self, index: Index) -> Index:
        """The stored value holding chunk ``index``: its shard, or the chunk itself."""
        if self.shards is None:
            return index
        return self.shards.geometry.locate(index)[0]

    def unit_key(self, unit: Index) -> str:
        """The store key a write of ``unit`` replaces."""
        if self.shards is None:
            return self.chunk_keys(unit)[0]
        return self.shards.shard_keys(unit)[0]

    def unit_keys(self, unit: Index) -> list[str]:
        """Every store key that may hold ``unit`` (all are deleted with it)."""
        return self.chunk_keys(unit) if self.shards is None else self.shards.shard_keys(unit)

    def unit_members(self, unit: Index) -> list[Index]:
        """The chunks inside the array that ``unit`` holds: none when a shrink left
        the whole unit beyond the end (a flush may still hold it, or find it stored)."""
        if self.shards is None:
            return [unit] if self.holds_chunk(unit) else []
        geometry = self.shards.geometry
        if not _inside(unit, geometry.shard_grid):
            return []
        return [index for _, index in geometry.inner_chunks_in_array(unit)]

    def holds_unit(self, unit: Index) -> bool:
        """Stored unit ``unit`` (a chunk, or a shard) lies inside the array as it is
        now shaped."""
        if self.shards is None:
            return self.holds_chunk(unit)
        return _inside(unit, self.shards.geometry.shard_grid)

    def holds_chunk(self, index: Index) -> bool:
        """Chunk ``index`` lies inside the array as it is now shaped."""
        return _inside(index, grid_shape(self.shape, self.chunks))

    def stored_unit(self, key: str) -> Index | None:
        """The unit a store key holds (None: no chunk or shard of this array)."""
        return self.chunk_index(key) if self.shards is None else self.shards.shard_index(key)

    def resized(self, rows: int) -> ArrayMeta:
        """This array with ``shape[0] == rows``."""
        shape = (rows, *self.shape[1:])
        shards = self.shards
        if shards is not None:
            geometry = ShardGeometry(shape, shards.shard_shape, shards.geometry.inner_shape)
            shards = replace(shards, geometry=geometry)
        return replace(self, shape=shape, shards=shards)


@dataclass(frozen=True)
class GroupMeta:
    path: str
    zarr_format: int
    documents: tuple[str, ...]
    attrs: dict[str, Any] = field(default_factory=dict)


NodeMeta = ArrayMeta | GroupMeta


def _is_index(text: str) -> bool:
    """A chunk index as writers format it: ASCII digits, no leading zero ("01" is no key)."""
    return text.isascii() and text.isdigit() and (text == "0" or text[0] != "0")


def chunk_key_parser(
    prefix: str, separators: Sequence[str], suffix: str, ndim: int
) -> Callable[[str], Index | None]:
    """The inverse of a chunk-key encoding: "<prefix>/<i><sep><j><suffix>" → (i, j)."""
    head = f"{prefix}/" if prefix else ""

    def parse(key: str) -> Index | None:
        if not key.startswith(head) or not key.endswith(suffix):
            return None
        body = key[len(head) : len(key) - len(suffix)]
        if ndim == 0:
            return () if body == "0" else None
        for separator in separators:
            parts = body.split(separator)
            if len(parts) == ndim and all(_is_index(p) for p in parts):
                return tuple(int(p) for p in parts)
        return None

    return parse
