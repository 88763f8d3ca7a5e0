"""zarrfs.formats.grid.shards: sharding_indexed geometry, shard index and shard bytes (pure).

Table-driven cases are worked out by hand from the sharding and crc32c specs; the
hypothesis properties check round trips; the corpus test decodes the index of every
shard written by zarr-python, tensorstore, zarrita.js and zarrs.
"""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numcodecs.checksum32 import CRC32C

from tests.support.paths import CORPUS
from zarrfs.errors import MetadataError
from zarrfs.formats.grid.shards import (
    EMPTY,
    MAX_INNER_CHUNKS,
    ShardGeometry,
    ShardIndex,
    ShardIndexError,
    ShardingConfig,
    build_shard,
    decode_index,
    encode_index,
    index_nbytes,
    index_range,
    inner_range,
    parse_sharding_config,
    split_shard,
)

BYTES_LE = {"name": "bytes", "configuration": {"endian": "little"}}
CRC = {"name": "crc32c"}


def crc(data: bytes) -> bytes:
    """crc32c appended the way numcodecs' CRC32C codec (and the v3 crc32c codec) does."""
    return bytes(CRC32C().encode(data))[-4:]


def raw_index(pairs: list[tuple[int, int]]) -> bytes:
    return b"".join(struct.pack("<QQ", o, n) for o, n in pairs)


def read_back(shard: bytes, n_inner: int, checksum: bool, location: str) -> list[bytes | None]:
    """What a ranged reader does: fetch the index range, decode it, fetch each inner range."""
    start, length = index_range(len(shard), n_inner, checksum, location)
    index = decode_index(shard[start : start + length], n_inner, checksum, len(shard), location)
    out: list[bytes | None] = []
    for position in range(n_inner):
        r = inner_range(index, position)
        out.append(None if r is None else shard[r[0] : r[0] + r[1]])
    return out


# ------------------------------------------------------------------ geometry

GEOMETRY_CASES = [
    # shape, shard, inner, inner chunk index -> (shard, local, position)
    ((8,), (4,), (2,), (3,), ((1,), (1,), 1)),
    ((7,), (4,), (1,), (6,), ((1,), (2,), 2)),
    ((8, 8), (4, 8), (2, 2), (3, 1), ((1, 0), (1, 1), 5)),
    ((10, 12), (4, 6), (2, 3), (4, 3), ((2, 1), (0, 1), 1)),
    ((6, 6, 6), (4, 4, 4), (2, 2, 2), (2, 1, 2), ((1, 0, 1), (0, 1, 0), 2)),
    ((3, 3, 3), (3, 3, 3), (3, 3, 1), (0, 0, 2), ((0, 0, 0), (0, 0, 2), 2)),
    ((), (), (), (), ((), (), 0)),
]


@pytest.mark.parametrize("shape, shard, inner, index, expected", GEOMETRY_CASES)
def test_geometry_locate(shape, shard, inner, index, expected) -> None:
    g = ShardGeometry(shape, shard, inner)
    assert g.locate(index) == expected
    assert g.inner_index(expected[0], expected[2]) == index


def test_geometry_counts() -> None:
    g = ShardGeometry((7, 9), (4, 4), (2, 2))
    assert g.chunks_per_shard == (2, 2)
    assert g.n_inner == 4
    assert g.shard_grid == (2, 3)
    assert g.inner_grid == (4, 5)
    # The last shard column overhangs: only its first inner column touches the array.
    assert g.inner_chunks_in_array((1, 2)) == [(0, (2, 4)), (2, (3, 4))]


@pytest.mark.parametrize(
    "shape, shard, inner",
    [
        ((8, 8), (4, 4), (3, 2)),  # does not divide
        ((8,), (4,), (8,)),  # larger than the shard
        ((8, 8), (4, 4), (2,)),  # rank
        ((8,), (4,), (0,)),
        ((8,), (True,), (1,)),
        ((1 << 30,), (1 << 30,), (1,)),  # an index of 16 GiB
    ],
)
def test_geometry_refused(shape, shard, inner) -> None:
    with pytest.raises(MetadataError):
        ShardGeometry(shape, shard, inner)


def test_geometry_out_of_grid() -> None:
    g = ShardGeometry((8, 8), (4, 4), (2, 2))
    with pytest.raises(IndexError):
        g.locate((4, 0))
    with pytest.raises(IndexError):
        g.inner_index((0, 2), 0)
    with pytest.raises(IndexError):
        g.inner_index((0, 0), 4)


@st.composite
def geometries(draw: st.DrawFn) -> ShardGeometry:
    ndim = draw(st.integers(0, 4))
    # Small enough that walking every inner chunk stays cheap (at most 12 per axis).
    inner = tuple(draw(st.integers(1, 3)) for _ in range(ndim))
    shard = tuple(i * draw(st.integers(1, 2)) for i in inner)
    shape = tuple(draw(st.integers(0, 2 * s)) for s in shard)
    return ShardGeometry(shape, shard, inner)


@given(geometries())
def test_geometry_round_trip(g: ShardGeometry) -> None:
    seen: set[tuple[tuple[int, ...], int]] = set()
    for index in np.ndindex(*g.inner_grid):
        shard, local, position = g.locate(index)
        assert all(0 <= s < n for s, n in zip(shard, g.shard_grid))
        assert 0 <= position < g.n_inner
        if local:
            assert np.ravel_multi_index(local, g.chunks_per_shard) == position
        assert g.inner_index(shard, position) == index
        seen.add((shard, position))
    assert len(seen) == math.prod(g.inner_grid)
    # Every shard entry that touches the array is one of the located inner chunks.
    in_array = {(s, p) for s in np.ndindex(*g.shard_grid) for p, _ in g.inner_chunks_in_array(s)}
    assert in_array == seen


# ---------------------------------------------------------------- the index


def test_index_sizes() -> None:
    assert index_nbytes(4, True) == 68  # the spec's example
    assert index_nbytes(4, False) == 64
    assert index_range(100, 4, True, "end") == (32, 68)
    assert index_range(100, 4, True, "start") == (0, 68)
    assert index_range(64, 4, False, "end") == (0, 64)


INDEX_CASES = [
    # pairs, checksum, location, shard_nbytes
    ([(0, 3), (3, 5)], True, "end", 8 + 36),
    ([(0, 3), None, (3, 0), (3, 5)], False, "end", 8 + 64),
    ([(36, 3), (39, 5)], True, "start", 44),
    ([None, None, None, None], True, "end", 68),
    ([(80, 4), None, (68, 12)], False, "start", 84),  # out of order: allowed
    ([(0, 4), (0, 4)], False, "end", 36),  # shared bytes: allowed
]


@pytest.mark.parametrize("pairs, checksum, location, shard_nbytes", INDEX_CASES)
def test_index_decode_cases(pairs, checksum, location, shard_nbytes) -> None:
    body = raw_index([(EMPTY, EMPTY) if p is None else p for p in pairs])
    data = body + crc(body) if checksum else body
    index = ShardIndex.from_pairs(pairs)
    assert encode_index(index, checksum) == data
    decoded = decode_index(data, len(pairs), checksum, shard_nbytes, location)
    assert decoded == index
    assert decoded.pairs() == pairs
    assert [inner_range(decoded, i) for i in range(len(pairs))] == pairs
    assert decoded.is_all_empty() == all(p is None for p in pairs)


def test_index_big_endian() -> None:
    index = ShardIndex.from_pairs([(0, 2), None])
    data = encode_index(index, True, endian="big")
    assert data[:16] == struct.pack(">QQ", 0, 2)
    assert decode_index(data, 2, True, 2 + 36, endian="big") == index


@given(
    st.lists(
        st.one_of(st.none(), st.tuples(st.integers(0, 1000), st.integers(0, 1000))),
        min_size=1,
        max_size=40,
    ),
    st.booleans(),
    st.sampled_from(["start", "end"]),
)
def test_index_round_trip(pairs, checksum, location) -> None:
    index = ShardIndex.from_pairs(pairs)
    data = encode_index(index, checksum)
    assert len(data) == index_nbytes(len(pairs), checksum)
    # A shard large enough for every entry to sit after the index at the start,
    # or before it at the end.
    size = len(data)
    if location == "start":
        shifted = [None if p is None else (p[0] + size, p[1]) for p in pairs]
        index = ShardIndex.from_pairs(shifted)
        data = encode_index(index, checksum)
    # Entries end by byte 2000 (+ size at the start), clear of the index either way.
    assert decode_index(data, len(pairs), checksum, 2001 + size, location) == index


# ------------------------------------------------------------- index errors


def _index(pairs, checksum=True) -> bytes:
    return encode_index(ShardIndex.from_pairs(pairs), checksum)


def test_crc_mismatch() -> None:
    data = bytearray(_index([(0, 4)]))
    data[3] ^= 1  # offset 0 -> 2^24: the crc catches it before the range check does
    with pytest.raises(ShardIndexError, match="crc32c mismatch"):
        decode_index(bytes(data), 1, True, 100)
    data = bytearray(_index([(0, 4)]))
    data[-1] ^= 0x80
    with pytest.raises(ValueError, match="crc32c"):
        decode_index(bytes(data), 1, True, 100)


@pytest.mark.parametrize(
    "pairs, shard_nbytes, location, match",
    [
        ([(0, 5)], 4 + 20, "end", "overlaps the shard index"),
        ([(10, 20)], 20 + 20, "end", "overlaps"),
        ([(0, 4)], 4 + 20, "start", "overlaps"),
        ([(19, 2)], 40, "start", "overlaps"),
        ([(20, 21)], 40, "start", "runs past the end"),
        ([(0, 3), (100, 1)], 60, "end", "entry 1 .* runs past the end"),
        ([(EMPTY, 1)], 40, "end", "overflows"),
        ([(1 << 63, 1 << 63)], 40, "end", "overflows"),
        ([(EMPTY - 1, 1)], 40, "end", "runs past the end"),
        ([(EMPTY, 0)], 40, "end", "runs past the end"),  # half an empty marker
        ([(5, EMPTY)], 40, "end", "overflows"),
    ],
)
def test_index_entries_refused(pairs, shard_nbytes, location, match) -> None:
    data = _index(pairs)
    with pytest.raises(ShardIndexError, match=match):
        decode_index(data, len(pairs), True, shard_nbytes, location)


def test_zero_length_entry_at_index_boundary() -> None:
    # An empty range touches nothing, wherever it points inside the shard.
    assert decode_index(_index([(4, 0)]), 1, True, 24).pairs() == [(4, 0)]


def test_truncated() -> None:
    data = _index([(0, 4), (4, 4)])
    with pytest.raises(ShardIndexError, match="expected 36"):
        decode_index(data[:-1], 2, True, 100)
    with pytest.raises(ShardIndexError, match="expected 32"):
        decode_index(data, 2, False, 100)  # a crc where none is configured
    with pytest.raises(ShardIndexError, match="truncated"):
        index_range(35, 2, True, "end")
    with pytest.raises(ShardIndexError, match="truncated"):
        split_shard(b"\x00" * 10, 1, False)


def test_oversize_index_refused() -> None:
    with pytest.raises(MetadataError, match="index"):
        index_nbytes(MAX_INNER_CHUNKS + 1, True)
    with pytest.raises(MetadataError):
        decode_index(b"", MAX_INNER_CHUNKS + 1, False, 1 << 40)
    with pytest.raises(MetadataError):
        ShardIndex.empty(0)
    assert index_nbytes(MAX_INNER_CHUNKS, False) == 64 << 20


def test_inner_range_position_checked() -> None:
    with pytest.raises(IndexError):
        inner_range(ShardIndex.empty(2), 2)


# ------------------------------------------------------------- whole shards

SHARD_CASES = [
    ([b"abc", None, b"", b"defg"], True, "end"),
    ([b"abc", None, b"", b"defg"], True, "start"),
    ([b"x" * 10, None], False, "end"),
    ([None, b"y"], False, "start"),
    ([b"z"], True, "end"),
]


@pytest.mark.parametrize("chunks, checksum, location", SHARD_CASES)
def test_build_shard_cases(chunks, checksum, location) -> None:
    shard = build_shard(chunks, checksum, location)
    assert shard is not None
    body = b"".join(c for c in chunks if c is not None)
    size = index_nbytes(len(chunks), checksum)
    assert len(shard) == len(body) + size
    if location == "end":
        assert shard[: len(body)] == body
        index = shard[len(body) :]
    else:
        assert shard[size:] == body
        index = shard[:size]
    if checksum:
        assert index[-4:] == crc(index[:-4])
    assert read_back(shard, len(chunks), checksum, location) == chunks
    assert split_shard(shard, len(chunks), checksum, location) == chunks


def test_build_shard_spec_layout() -> None:
    """The spec's example: two inner chunks at the end, index of (offset, nbytes) pairs."""
    shard = build_shard([b"AA", None, b"BBB", None], True, "end")
    pairs = [(0, 2), (EMPTY, EMPTY), (2, 3), (EMPTY, EMPTY)]
    assert shard == b"AABBB" + raw_index(pairs) + crc(raw_index(pairs))


def test_build_shard_all_missing() -> None:
    assert build_shard([None, None, None], True, "end") is None
    assert build_shard([None], False, "start") is None


@settings(max_examples=200)
@given(
    st.lists(st.one_of(st.none(), st.binary(max_size=40)), min_size=1, max_size=30),
    st.booleans(),
    st.sampled_from(["start", "end"]),
)
def test_build_shard_read_back(chunks, checksum, location) -> None:
    shard = build_shard(chunks, checksum, location)
    if all(c is None for c in chunks):
        assert shard is None
        return
    assert read_back(shard, len(chunks), checksum, location) == chunks


# ------------------------------------------------------------ configuration


def test_parse_config_defaults() -> None:
    cfg = parse_sharding_config(
        {"chunk_shape": [2, 3], "codecs": [BYTES_LE], "index_codecs": [BYTES_LE, CRC]}
    )
    assert cfg == ShardingConfig((2, 3), (BYTES_LE,), True, "end", "little")
    assert not cfg.nested
    assert cfg.geometry((10, 12), (4, 6)).n_inner == 4


def test_parse_config_variants() -> None:
    nested = {"name": "sharding_indexed", "configuration": {}}
    cfg = parse_sharding_config(
        {
            "chunk_shape": [4],
            "codecs": [nested],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "big"}}],
            "index_location": "start",
        }
    )
    assert (cfg.index_checksum, cfg.index_location, cfg.index_endian) == (False, "start", "big")
    assert cfg.nested


@pytest.mark.parametrize(
    "change",
    [
        {"chunk_shape": [2, 0]},
        {"chunk_shape": "2"},
        {"chunk_shape": [2.0, 3]},
        {"codecs": []},
        {"codecs": [{"configuration": {}}]},
        {"index_codecs": [BYTES_LE, {"name": "gzip", "configuration": {"level": 1}}]},
        {"index_codecs": [CRC, BYTES_LE]},
        {"index_codecs": [{"name": "bytes"}, CRC]},
        {"index_codecs": [BYTES_LE, {"name": "crc32c", "configuration": {"x": 1}}]},
        {"index_codecs": []},
        {"index_location": "middle"},
        {"index_location": None},
        {"extra": 1},
    ],
)
def test_parse_config_refused(change) -> None:
    config = {"chunk_shape": [2, 3], "codecs": [BYTES_LE], "index_codecs": [BYTES_LE, CRC]}
    config.update(change)
    with pytest.raises(MetadataError):
        parse_sharding_config(config)


@pytest.mark.parametrize("missing", ["chunk_shape", "codecs", "index_codecs"])
def test_parse_config_missing_key(missing) -> None:
    config = {"chunk_shape": [2], "codecs": [BYTES_LE], "index_codecs": [BYTES_LE]}
    del config[missing]
    with pytest.raises(MetadataError, match=missing):
        parse_sharding_config(config)


# --------------------------------------------------------------- real data


def _sharded_arrays() -> list:
    return sorted(
        p.parent
        for p in (CORPUS / "data").rglob("zarr.json")
        if "sharding_indexed" in p.read_text()
    )


def _check_shard(data: bytes, cfg: ShardingConfig, n_inner: int) -> tuple[int, int]:
    """(present, missing) entries of the shard's index, every range checked to lie inside it.

    When the inner codecs are exactly one more sharding_indexed, each inner chunk is
    itself a shard and is checked the same way.
    """
    start, length = index_range(len(data), n_inner, cfg.index_checksum, cfg.index_location)
    index = decode_index(
        data[start : start + length],
        n_inner,
        cfg.index_checksum,
        len(data),
        cfg.index_location,
        endian=cfg.index_endian,
    )
    inner_cfg = None
    if [c["name"] for c in cfg.codecs] == ["sharding_indexed"]:
        inner_cfg = parse_sharding_config(cfg.codecs[0]["configuration"])
    for pair in index.pairs():
        if pair is None:
            continue
        offset, nbytes = pair
        assert offset + nbytes <= len(data)
        assert offset + nbytes <= start or offset >= start + length
        if inner_cfg is not None:
            inner_n = inner_cfg.geometry(cfg.chunk_shape, cfg.chunk_shape).n_inner
            _check_shard(data[offset : offset + nbytes], inner_cfg, inner_n)
    present = int(index.present.sum())
    return present, n_inner - present


def test_corpus_shard_indexes() -> None:
    """Decode the index of every stored shard in the corpus and check its entries.

    Selected: arrays whose codec chain ends with ``sharding_indexed``, so a shard
    file is exactly the codec's output (``then_crc32c``, with a whole-shard crc32c
    after it, is left out). Array->array codecs before it may only be transposes,
    which permute the shard shape the codec sees. Nested sharding is followed one
    level down (an inner chunk that is itself a shard). Each array's outer
    present/missing counts must match the corpus' expected.json.
    """
    expected = json.loads((CORPUS / "expected.json").read_text())
    arrays = _sharded_arrays()
    checked = 0
    for array in arrays:
        meta = json.loads((array / "zarr.json").read_text())
        codecs = meta["codecs"]
        if codecs[-1]["name"] != "sharding_indexed":
            continue
        shard_shape = list(meta["chunk_grid"]["configuration"]["chunk_shape"])
        for codec in codecs[:-1]:
            assert codec["name"] == "transpose", array
            shard_shape = [shard_shape[i] for i in codec["configuration"]["order"]]
        cfg = parse_sharding_config(codecs[-1]["configuration"])
        n_inner = cfg.geometry(tuple(shard_shape), tuple(shard_shape)).n_inner
        present = missing = 0
        for shard in sorted(p for p in array.rglob("*") if p.is_file() and p.name != "zarr.json"):
            p, m = _check_shard(shard.read_bytes(), cfg, n_inner)
            present += p
            missing += m
        key = str(array.relative_to(CORPUS / "data"))
        assert (present, missing) == (
            expected[key]["inner_chunks_present"],
            expected[key]["inner_chunks_missing"],
        ), key
        checked += 1
    assert checked >= 30, f"only {checked} of {len(arrays)} sharded arrays checked"
