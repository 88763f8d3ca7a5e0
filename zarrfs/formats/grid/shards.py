"""Pure math and bytes for the Zarr v3 ``sharding_indexed`` codec (no I/O).

A shard is one stored object holding a grid of inner chunks plus an index of
``(offset, nbytes)`` uint64 pairs, one per inner chunk in C order of the shard's
inner grid, placed at the start or the end of the shard. ``(2^64-1, 2^64-1)``
marks an inner chunk that is not stored (it reads as the fill value).

A reader with ranged reads fetches ``index_range(...)``, decodes it with
``decode_index`` and then fetches ``inner_range(index, position)``; a writer
assembles a whole shard with ``build_shard``. Offsets in an index are absolute
within the shard, also when the index sits at the start (as zarr-python,
tensorstore and zarrs write them).

Out of scope here: the inner codecs (left opaque in ``ShardingConfig.codecs``),
bytes->bytes codecs applied to the whole shard after ``sharding_indexed`` (the
caller must undo them before calling into this module), and index codecs other
than ``bytes`` optionally followed by ``crc32c``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from zarrfs.errors import MetadataError, UnsupportedError, ZarrfsError
from zarrfs.formats.grid.layout import Index, grid_shape
from zarrfs.formats.limits import MAX_DIMENSIONS

try:
    # numcodecs defines CRC32C only when a crc32c backend (google-crc32c) is importable.
    from numcodecs.checksum32 import CRC32C as _CRC32C
except ImportError:  # pragma: no cover - depends on the installation
    _CRC32C = None

# 2^64-1 in both fields: the inner chunk is not stored.
EMPTY = 2**64 - 1
ENTRY_NBYTES = 16
CHECKSUM_NBYTES = 4
# An index is read into memory whole before any inner chunk can be found, and its
# size is set by the metadata alone (16 bytes per inner chunk): 64 MiB is about
# four million inner chunks per shard, far beyond any sensible layout.
MAX_INDEX_BYTES = 64 << 20
MAX_INNER_CHUNKS = MAX_INDEX_BYTES // ENTRY_NBYTES
LOCATIONS = ("start", "end")
ENDIANS = ("little", "big")


class ShardIndexError(ZarrfsError, ValueError):
    """A shard or its index is corrupt: bad checksum, truncated, entries out of range.

    A ValueError too, so pure callers may catch it as such; the chunk layer should
    turn it into a ChunkError naming the array and the shard key.
    """


# ------------------------------------------------------------------- geometry


def _check_shape(value: Any, what: str, *, positive: bool) -> Index:
    if not isinstance(value, (list, tuple)):
        raise MetadataError(f"{what} must be a list of integers, not {value!r}")
    if len(value) > MAX_DIMENSIONS:
        raise MetadataError(f"{what} has {len(value)} dimensions (at most {MAX_DIMENSIONS})")
    for v in value:
        # bool is an int subclass, and `true` is no length.
        if isinstance(v, bool) or not isinstance(v, int) or v < (1 if positive else 0):
            kind = "positive" if positive else "non-negative"
            raise MetadataError(f"{what} must hold {kind} integers, not {value!r}")
    return tuple(value)


def check_n_inner(n_inner: int) -> int:
    """``n_inner`` when an index of that many entries is acceptable, else MetadataError."""
    if isinstance(n_inner, bool) or not isinstance(n_inner, int) or n_inner < 1:
        raise MetadataError(f"a shard must hold at least one inner chunk, not {n_inner!r}")
    if n_inner > MAX_INNER_CHUNKS:
        raise MetadataError(
            f"a shard of {n_inner} inner chunks needs a {n_inner * ENTRY_NBYTES}-byte index "
            f"(at most {MAX_INDEX_BYTES})"
        )
    return n_inner


def _ravel(index: Index, shape: Index) -> int:
    linear = 0
    for i, s in zip(index, shape):
        linear = linear * s + i
    return linear


def _unravel(linear: int, shape: Index) -> Index:
    out = []
    for s in reversed(shape):
        linear, i = divmod(linear, s)
        out.append(i)
    return tuple(reversed(out))


@dataclass(frozen=True)
class ShardGeometry:
    """The outer (shard) grid and the inner chunk grid of one sharded array.

    An inner chunk index is a position in the grid of inner chunks over the whole
    array, ``grid_shape(shape, inner_shape)``. Edge shards overhang the array, so
    their index also has entries for inner chunks wholly outside it.
    """

    shape: Index
    shard_shape: Index
    inner_shape: Index

    def __post_init__(self) -> None:
        shape = _check_shape(self.shape, "array shape", positive=False)
        shard = _check_shape(self.shard_shape, "shard shape", positive=True)
        inner = _check_shape(self.inner_shape, "inner chunk shape", positive=True)
        if not len(shape) == len(shard) == len(inner):
            raise MetadataError(
                f"array shape {shape}, shard shape {shard} and inner chunk shape {inner} "
                "differ in rank"
            )
        if any(s % i for s, i in zip(shard, inner)):
            raise MetadataError(f"inner chunk shape {inner} does not divide shard shape {shard}")
        check_n_inner(math.prod(s // i for s, i in zip(shard, inner)))
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "shard_shape", shard)
        object.__setattr__(self, "inner_shape", inner)

    @property
    def chunks_per_shard(self) -> Index:
        return tuple(s // i for s, i in zip(self.shard_shape, self.inner_shape))

    @property
    def n_inner(self) -> int:
        return math.prod(self.chunks_per_shard)

    @property
    def shard_grid(self) -> Index:
        return grid_shape(self.shape, self.shard_shape)

    @property
    def inner_grid(self) -> Index:
        return grid_shape(self.shape, self.inner_shape)

    def locate(self, inner_index: Index) -> tuple[Index, Index, int]:
        """(shard index, inner index within the shard, position in the shard's index)."""
        inner_index = tuple(inner_index)
        grid = self.inner_grid
        if len(inner_index) != len(grid) or any(not 0 <= i < g for i, g in zip(inner_index, grid)):
            raise IndexError(f"inner chunk {inner_index} is outside the inner grid {grid}")
        cps = self.chunks_per_shard
        shard = tuple(i // c for i, c in zip(inner_index, cps))
        local = tuple(i % c for i, c in zip(inner_index, cps))
        return shard, local, _ravel(local, cps)

    def inner_index(self, shard_index: Index, position: int) -> Index:
        """The whole-array inner chunk index of entry ``position`` of shard ``shard_index``.

        Beyond ``inner_grid`` for the overhanging part of an edge shard.
        """
        shard_index = tuple(shard_index)
        grid = self.shard_grid
        if len(shard_index) != len(grid) or any(not 0 <= i < g for i, g in zip(shard_index, grid)):
            raise IndexError(f"shard {shard_index} is outside the shard grid {grid}")
        if not 0 <= position < self.n_inner:
            raise IndexError(f"position {position} is outside a shard of {self.n_inner}")
        cps = self.chunks_per_shard
        local = _unravel(position, cps)
        return tuple(s * c + i for s, c, i in zip(shard_index, cps, local))

    def inner_count(self, shard_index: Index) -> int:
        """How many inner chunks of shard ``shard_index`` lie inside the array (an edge
        shard overhangs it)."""
        grid = self.inner_grid
        return math.prod(
            max(0, min((s + 1) * n, g) - s * n)
            for s, n, g in zip(shard_index, self.chunks_per_shard, grid)
        )

    def inner_chunks_in_array(self, shard_index: Index) -> list[tuple[int, Index]]:
        """(position, inner chunk index) of the entries of a shard that touch the array."""
        grid = self.inner_grid
        out = []
        for position in range(self.n_inner):
            index = self.inner_index(shard_index, position)
            if all(i < g for i, g in zip(index, grid)):
                out.append((position, index))
        return out


# ----------------------------------------------------------------- the index


class ShardIndex:
    """``(offset, nbytes)`` per inner chunk, C order of the shard's inner grid.

    Held as a read-only ``(n_inner, 2)`` uint64 array so that validating a large
    index stays vectorised.
    """

    __slots__ = ("entries",)

    def __init__(self, entries: np.ndarray) -> None:
        arr = np.array(entries, dtype=np.uint64).reshape(-1, 2)
        check_n_inner(arr.shape[0])
        arr.flags.writeable = False
        self.entries = arr

    @classmethod
    def empty(cls, n_inner: int) -> ShardIndex:
        return cls(np.full((check_n_inner(n_inner), 2), EMPTY, dtype=np.uint64))

    @classmethod
    def from_pairs(cls, pairs: list[tuple[int, int] | None]) -> ShardIndex:
        """From ``(offset, nbytes)`` pairs, ``None`` for a missing inner chunk."""
        return cls(np.array([(EMPTY, EMPTY) if p is None else p for p in pairs], dtype=np.uint64))

    @property
    def n_inner(self) -> int:
        return int(self.entries.shape[0])

    @property
    def present(self) -> np.ndarray:
        """Boolean mask of the stored inner chunks."""
        return ~((self.entries[:, 0] == EMPTY) & (self.entries[:, 1] == EMPTY))

    def is_all_empty(self) -> bool:
        return not bool(self.present.any())

    def pairs(self) -> list[tuple[int, int] | None]:
        return [inner_range(self, p) for p in range(self.n_inner)]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ShardIndex):
            return NotImplemented
        return bool(np.array_equal(self.entries, other.entries))

    def __hash__(self) -> int:
        return hash(self.entries.tobytes())

    def __repr__(self) -> str:
        return f"ShardIndex({self.pairs()!r})"


def _crc32c(data: bytes | memoryview) -> int:
    if _CRC32C is None:
        raise UnsupportedError("crc32c needs numcodecs with google-crc32c installed")
    # google-crc32c takes bytes only, not a memoryview.
    return int(_CRC32C.checksum(bytes(data))) & 0xFFFFFFFF


def _check_location(location: str) -> None:
    if location not in LOCATIONS:
        raise ValueError(f"index location must be 'start' or 'end', not {location!r}")


def _uint64(endian: str) -> np.dtype:
    if endian not in ENDIANS:
        raise ValueError(f"endian must be 'little' or 'big', not {endian!r}")
    return np.dtype("<u8" if endian == "little" else ">u8")


def index_nbytes(n_inner: int, checksum: bool) -> int:
    """Encoded size of the index of a shard of ``n_inner`` inner chunks."""
    return check_n_inner(n_inner) * ENTRY_NBYTES + (CHECKSUM_NBYTES if checksum else 0)


def index_range(shard_nbytes: int, n_inner: int, checksum: bool, location: str) -> tuple[int, int]:
    """``(start, length)`` of the index inside a shard of ``shard_nbytes`` bytes."""
    _check_location(location)
    size = index_nbytes(n_inner, checksum)
    if shard_nbytes < size:
        raise ShardIndexError(
            f"shard is truncated: {shard_nbytes} bytes cannot hold its {size}-byte index"
        )
    return (0, size) if location == "start" else (shard_nbytes - size, size)


def encode_index(index: ShardIndex, checksum: bool, *, endian: str = "little") -> bytes:
    """The ``bytes`` codec (then ``crc32c`` when ``checksum``) applied to the index."""
    raw = index.entries.astype(_uint64(endian), copy=False).tobytes()
    if checksum:
        raw += _crc32c(raw).to_bytes(CHECKSUM_NBYTES, "little")
    return raw


def decode_index(
    data: bytes | memoryview,
    n_inner: int,
    checksum: bool,
    shard_nbytes: int,
    location: str = "end",
    *,
    endian: str = "little",
) -> ShardIndex:
    """Decode and validate the index bytes of a shard of ``shard_nbytes`` bytes.

    Every stored entry must lie inside the shard without overlapping the index
    itself; entries may overlap one another (the spec leaves the layout free).
    """
    start, size = index_range(shard_nbytes, n_inner, checksum, location)
    data = memoryview(data).cast("B")
    if len(data) != size:
        raise ShardIndexError(
            f"shard index is {len(data)} bytes, expected {size} for {n_inner} inner chunks"
            + (" with crc32c" if checksum else "")
        )
    body = data[: n_inner * ENTRY_NBYTES]
    if checksum:
        stored = int.from_bytes(data[-CHECKSUM_NBYTES:], "little")
        actual = _crc32c(body)
        if stored != actual:
            raise ShardIndexError(
                f"shard index crc32c mismatch: stored {stored:#010x}, computed {actual:#010x}"
            )
    entries = np.frombuffer(body, dtype=_uint64(endian)).reshape(n_inner, 2).astype(np.uint64)
    index = ShardIndex(entries)
    _validate(index, shard_nbytes, start, start + size)
    return index


def _validate(index: ShardIndex, shard_nbytes: int, index_start: int, index_stop: int) -> None:
    present = index.present
    offsets = index.entries[present, 0]
    lengths = index.entries[present, 1]
    positions = np.flatnonzero(present)

    def fail(mask: np.ndarray, why: str) -> None:
        if mask.any():
            k = int(np.argmax(mask))
            raise ShardIndexError(
                f"shard index entry {int(positions[k])} (offset {int(offsets[k])}, "
                f"nbytes {int(lengths[k])}) {why}"
            )

    # Compare before adding: uint64 addition would wrap around silently.
    fail(lengths > np.uint64(EMPTY) - offsets, "overflows 64 bits")
    ends = offsets + lengths
    fail(ends > np.uint64(shard_nbytes), f"runs past the end of the {shard_nbytes}-byte shard")
    overlaps = (offsets < np.uint64(index_stop)) & (ends > np.uint64(index_start)) & (lengths > 0)
    fail(overlaps, f"overlaps the shard index at bytes [{index_start}, {index_stop})")


def inner_range(index: ShardIndex, position: int) -> tuple[int, int] | None:
    """``(offset, nbytes)`` of one inner chunk in the shard, ``None`` when not stored."""
    if not 0 <= position < index.n_inner:
        raise IndexError(f"position {position} is outside a shard of {index.n_inner}")
    offset, nbytes = (int(v) for v in index.entries[position])
    if offset == EMPTY and nbytes == EMPTY:
        return None
    return offset, nbytes


# ------------------------------------------------------------- whole shards


def build_shard(
    chunks: list[bytes | None], checksum: bool, location: str = "end", *, endian: str = "little"
) -> bytes | None:
    """A shard holding the encoded inner ``chunks`` (C order; ``None`` = not stored).

    ``None`` when no inner chunk is stored: the shard is then deleted rather than
    written, as zarr-python does.
    """
    parts = shard_parts(chunks, checksum, location, endian=endian)
    return None if parts is None else b"".join(parts[0])


def shard_parts(
    chunks: list[bytes | None], checksum: bool, location: str = "end", *, endian: str = "little"
) -> tuple[list[bytes], ShardIndex] | None:
    """``build_shard`` as the pieces to write one after the other (no copy of the
    chunks into one buffer), with the index they make; None when none is stored."""
    _check_location(location)
    n_inner = check_n_inner(len(chunks))
    if all(c is None for c in chunks):
        return None
    # Offsets are absolute in the shard, so with the index first they skip it.
    base = index_nbytes(n_inner, checksum) if location == "start" else 0
    entries = np.full((n_inner, 2), EMPTY, dtype=np.uint64)
    offset = base
    for position, chunk in enumerate(chunks):
        if chunk is not None:
            entries[position] = (offset, len(chunk))
            offset += len(chunk)
    body = [c for c in chunks if c is not None]
    index = ShardIndex(entries)
    encoded = encode_index(index, checksum, endian=endian)
    return ([encoded, *body] if location == "start" else [*body, encoded]), index


def split_shard(
    shard: bytes | memoryview,
    n_inner: int,
    checksum: bool,
    location: str = "end",
    *,
    endian: str = "little",
) -> list[bytes | None]:
    """Every inner chunk of a whole shard read into memory (``None`` = not stored)."""
    shard = memoryview(shard).cast("B")
    start, size = index_range(len(shard), n_inner, checksum, location)
    index = decode_index(
        shard[start : start + size], n_inner, checksum, len(shard), location, endian=endian
    )
    out: list[bytes | None] = []
    for position in range(n_inner):
        r = inner_range(index, position)
        out.append(None if r is None else bytes(shard[r[0] : r[0] + r[1]]))
    return out


# ------------------------------------------------------------ configuration


@dataclass(frozen=True)
class ShardingConfig:
    """A parsed ``sharding_indexed`` configuration.

    ``codecs`` (the inner chunks' codecs) are kept verbatim; ``index_codecs`` are
    reduced to the two facts that decide the index layout.
    """

    chunk_shape: Index
    codecs: tuple[dict[str, Any], ...]
    index_checksum: bool
    index_location: str = "end"
    index_endian: str = "little"

    @property
    def nested(self) -> bool:
        """Whether the inner chunks are themselves shards."""
        return any(c.get("name") == "sharding_indexed" for c in self.codecs)

    def geometry(self, shape: Index, shard_shape: Index) -> ShardGeometry:
        return ShardGeometry(tuple(shape), tuple(shard_shape), self.chunk_shape)


_CONFIG_KEYS = {"chunk_shape", "codecs", "index_codecs", "index_location"}


def _codec_name(codec: Any, what: str) -> str:
    if not isinstance(codec, dict) or not isinstance(codec.get("name"), str):
        raise MetadataError(f"{what}: a codec must be an object with a string name, not {codec!r}")
    return codec["name"]


def _parse_index_codecs(value: Any) -> tuple[bool, str]:
    """(checksum, endian) for ``[bytes]`` or ``[bytes, crc32c]``; anything else is refused."""
    what = "sharding_indexed index_codecs"
    if not isinstance(value, list) or not value:
        raise MetadataError(f"{what} must be a non-empty list, not {value!r}")
    names = [_codec_name(c, what) for c in value]
    if names not in (["bytes"], ["bytes", "crc32c"]):
        raise MetadataError(f"{what} {names} not supported (only bytes, optionally then crc32c)")
    config = value[0].get("configuration", {})
    # An index holds uint64s, so the bytes codec cannot leave its byte order out.
    endian = config.get("endian") if isinstance(config, dict) else None
    if endian not in ENDIANS:
        raise MetadataError(f"{what}: bytes codec endian must be 'little' or 'big', not {config!r}")
    if len(value) == 2 and value[1].get("configuration", {}) not in ({}, None):
        raise MetadataError(f"{what}: crc32c takes no configuration, got {value[1]!r}")
    return len(value) == 2, endian


def parse_sharding_config(config: Any) -> ShardingConfig:
    """The ``configuration`` object of a ``sharding_indexed`` codec, checked.

    Unknown keys are refused: a key this parser does not know might change the
    layout, and reading it wrongly would hand out wrong data instead of none.
    """
    if not isinstance(config, dict):
        raise MetadataError(f"sharding_indexed configuration must be an object, not {config!r}")
    unknown = set(config) - _CONFIG_KEYS
    if unknown:
        raise MetadataError(f"sharding_indexed configuration has unknown keys {sorted(unknown)}")
    for key in ("chunk_shape", "codecs", "index_codecs"):
        if key not in config:
            raise MetadataError(f"sharding_indexed configuration lacks {key!r}")
    chunk_shape = _check_shape(config["chunk_shape"], "sharding_indexed chunk_shape", positive=True)
    codecs = config["codecs"]
    if not isinstance(codecs, list) or not codecs:
        raise MetadataError(f"sharding_indexed codecs must be a non-empty list, not {codecs!r}")
    for codec in codecs:
        _codec_name(codec, "sharding_indexed codecs")
    checksum, endian = _parse_index_codecs(config["index_codecs"])
    location = config.get("index_location", "end")
    if location not in LOCATIONS:
        raise MetadataError(
            f"sharding_indexed index_location must be 'start' or 'end', not {location!r}"
        )
    return ShardingConfig(chunk_shape, tuple(codecs), checksum, location, endian)
