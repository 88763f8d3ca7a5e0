"""Zarr v3 codec chains (zarrfs.formats.codecs.v3): pure, no mount."""

from __future__ import annotations

import gzip
import hashlib
import json
import time
import tracemalloc
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.paths import CORPUS
from zarrfs.errors import MetadataError, UnsupportedError
from zarrfs.formats.codecs.v3 import (
    ArrayFilter,
    BytesSerializer,
    ShardingMarker,
    Transpose,
    V3CodecChain,
    parse_codecs,
)
from zarrfs.formats.metadata.v3_dtypes import decode_fill_value, parse_data_type

I4 = np.dtype("<i4")
LE = {"name": "bytes", "configuration": {"endian": "little"}}
BE = {"name": "bytes", "configuration": {"endian": "big"}}
GZIP = {"name": "gzip", "configuration": {"level": 5}}
ZSTD = {"name": "zstd", "configuration": {"level": 1, "checksum": True}}
BLOSC = {
    "name": "blosc",
    "configuration": {
        "cname": "zstd",
        "clevel": 5,
        "shuffle": "shuffle",
        "typesize": 4,
        "blocksize": 0,
    },
}
CRC = {"name": "crc32c"}


def _t(*order: int) -> dict[str, Any]:
    return {"name": "transpose", "configuration": {"order": list(order)}}


# ------------------------------------------------------------------ parsing

PARSE_CASES = [
    ([LE], I4, [4], "bytes(endian=little)"),
    (["bytes"], np.dtype("|u1"), [4], "bytes"),
    ([{"name": "bytes", "configuration": None}], np.dtype("|b1"), [2], "bytes"),
    ([BE, GZIP, CRC], I4, [2, 3], "bytes(endian=big) -> gzip(level=5) -> crc32c"),
    ([_t(1, 0), LE, ZSTD], I4, [2, 3], "transpose(order=[1, 0]) -> bytes(endian=little)"),
    ([_t(2, 0, 1), _t(1, 0, 2), BE, BLOSC], I4, [2, 3, 4], "transpose(order=[2, 0, 1])"),
    (
        [LE, {"name": "numcodecs.zlib", "configuration": {"level": 8}}],
        I4,
        [4],
        "numcodecs.zlib(level=8)",
    ),
    (
        [{"name": "numcodecs.delta", "configuration": {"dtype": "int32"}}, LE],
        I4,
        [4],
        "numcodecs.delta(",
    ),
    # An unknown codec the writer says may be ignored is skipped, and said so.
    ([LE, {"name": "x.note", "must_understand": False}], I4, [4], "(ignored: x.note)"),
    # Unknown configuration members that may be ignored are.
    (
        [{"name": "gzip", "configuration": {"level": 1, "x": {"must_understand": False}}}, LE][
            ::-1
        ],
        I4,
        [4],
        "gzip(level=1)",
    ),
    # zarr-python 3 writes struct arrays with a bare "bytes".
    (["bytes"], np.dtype([("a", "<i2"), ("b", "<f8")]), [3], "bytes"),
    (
        [{"name": "sharding_indexed", "configuration": {"chunk_shape": [2]}}],
        I4,
        [4],
        "sharding_indexed(chunk_shape=[2])",
    ),
]


@pytest.mark.parametrize(("codecs", "dtype", "shape", "text"), PARSE_CASES)
def test_parse(codecs: list[Any], dtype: np.dtype, shape: list[int], text: str) -> None:
    chain = parse_codecs(codecs, dtype, shape)
    assert text in chain.describe()


def test_parse_stages() -> None:
    chain = parse_codecs([_t(1, 0), LE, GZIP, CRC], I4, [2, 3])
    assert chain.array_array == (Transpose((1, 0)),)
    assert chain.array_bytes == BytesSerializer("little")
    assert [s.name for s in chain.bytes_bytes] == ["gzip", "crc32c"]
    assert [s.codec.codec_id for s in chain.bytes_bytes] == ["gzip", "crc32c"]
    assert chain.bytes_bytes[1].codec.location == "end"
    delta = parse_codecs(
        [{"name": "numcodecs.delta", "configuration": {"dtype": "int32"}}, LE], I4, [4]
    )
    assert isinstance(delta.array_array[0], ArrayFilter)


def test_sharding_marker_keeps_configuration() -> None:
    config = {"chunk_shape": [2], "codecs": [LE], "index_codecs": [LE, CRC]}
    chain = parse_codecs([{"name": "sharding_indexed", "configuration": config}, CRC], I4, [4])
    assert chain.sharding == ShardingMarker(config)
    with pytest.raises(UnsupportedError):
        chain.decode(b"")
    with pytest.raises(UnsupportedError):
        chain.encode(np.zeros(4, I4))
    # The shard layer can still undo bytes->bytes codecs applied to a whole shard.
    assert bytes(chain.decode_bytes(chain.encode_bytes(b"shard"), 5)) == b"shard"


PARSE_ERRORS = [
    ([], I4, [4], "non-empty"),
    ("bytes", I4, [4], "non-empty list"),
    ([GZIP], I4, [4], "before the array->bytes"),
    ([{"name": "unknown"}], I4, [4], "unknown codec"),
    ([LE, {"name": "unknown", "must_understand": True}], I4, [4], "unknown codec"),
    (["unknown"], I4, [4], "unknown codec"),
    # An ignorable unknown codec does not stand in for the array->bytes codec.
    ([{"name": "x", "must_understand": False}], I4, [4], "lack an array->bytes"),
    ([_t(0)], I4, [4], "lack an array->bytes"),
    ([LE, LE], I4, [4], "second array->bytes"),
    ([LE, _t(0)], I4, [4], "after the array->bytes"),
    (["bytes"], I4, [4], "needs an endian"),
    ([{"name": "bytes", "configuration": {"endian": "middle"}}], I4, [4], "endian"),
    ([{"name": "bytes", "configuration": {"endian": "big", "x": 1}}], I4, [4], "unknown member"),
    ([{"name": "bytes", "extra": 1}], I4, [4], "unknown member"),
    ([{"name": "bytes", "must_understand": "no"}], I4, [4], "must_understand"),
    ([{"name": "bytes", "configuration": []}], I4, [4], "non-object"),
    ([{"configuration": {}}], I4, [4], "string name"),
    ([42], I4, [4], "string name"),
    ([_t(1, 1), LE], I4, [2, 2], "permutation"),
    ([_t(0), LE], I4, [2, 2], "permutation"),
    ([{"name": "transpose", "configuration": {"order": "C"}}, LE], I4, [2], "permutation"),
    ([_t(True), LE], I4, [2], "permutation"),
    ([LE, {"name": "gzip", "configuration": {"level": 10}}], I4, [4], "gzip level"),
    ([LE, {"name": "gzip"}], I4, [4], "gzip level"),
    ([LE, {"name": "zstd", "configuration": {"level": 1, "checksum": 1}}], I4, [4], "checksum"),
    ([LE, {"name": "blosc", "configuration": {"cname": "lz5"}}], I4, [4], "cname"),
    (
        [LE, {"name": "blosc", "configuration": {**BLOSC["configuration"], "shuffle": 1}}],
        I4,
        [4],
        "shuffle",
    ),
    ([LE, {"name": "crc32c", "configuration": {"x": 1}}], I4, [4], "unknown member"),
    ([LE, {"name": "numcodecs.nosuch", "configuration": {}}], I4, [4], "not supported"),
    ([{"name": "numcodecs.pcodec", "configuration": {}}], I4, [4], "not supported"),
    ([LE, {"name": "numcodecs.zlib", "configuration": {"bogus": 1}}], I4, [4], "numcodecs"),
    ([LE, {"name": "numcodecs.zlib", "configuration": {"id": "gzip"}}], I4, [4], "differs"),
    (
        [{"name": "numcodecs.delta", "configuration": {"dtype": "int16"}}, LE],
        I4,
        [4],
        "not the array's",
    ),
    ([LE], I4, [0], "chunk shape"),
    ([LE], I4, [True], "chunk shape"),
    ([LE], I4, [1] * 33, "chunk shape"),
]


@pytest.mark.parametrize(("codecs", "dtype", "shape", "match"), PARSE_ERRORS)
def test_parse_errors(codecs: Any, dtype: np.dtype, shape: list[int], match: str) -> None:
    with pytest.raises(MetadataError, match=match):
        parse_codecs(codecs, dtype, shape)


# --------------------------------------------------------------- round trips

BYTES_CODECS = [
    [],
    [GZIP],
    [ZSTD],
    [{"name": "zstd", "configuration": {"level": 0}}],
    [BLOSC],
    *[
        [{"name": "blosc", "configuration": {**BLOSC["configuration"], "shuffle": s}}]
        for s in ("noshuffle", "bitshuffle")
    ],
    [CRC],
    [GZIP, CRC],
    [{"name": "numcodecs.bz2", "configuration": {"level": 9}}],
    [{"name": "numcodecs.lzma"}],
    [{"name": "numcodecs.lz4", "configuration": {"acceleration": 1}}],
    [{"name": "numcodecs.zlib", "configuration": {"level": 1}}],
    [{"name": "numcodecs.crc32"}],
    [{"name": "numcodecs.adler32"}],
    [{"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}}, GZIP],
]
DTYPES = ["|u1", "<i2", "<i4", "<u8", "<f4", "<f8", "<c8", "<c16", "|b1", "<M8[s]", "<U3"]


def _sample(dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(shape))
    raw = np.random.default_rng(7).integers(0, 256, n * dtype.itemsize, dtype=np.uint8)
    if dtype.kind == "b":
        raw %= 2
    if dtype.kind == "U":
        return np.array(["ab", "é", "xyz", "", "た", "q"] * n, dtype=dtype)[:n].reshape(shape)
    return raw.view(dtype).reshape(shape)


@pytest.mark.parametrize("bb", BYTES_CODECS, ids=lambda c: "+".join(x["name"] for x in c) or "none")
@pytest.mark.parametrize("endian", ["little", "big"])
def test_round_trip_codecs(bb: list[dict[str, Any]], endian: str) -> None:
    chunk = _sample(I4, (3, 5))
    chain = parse_codecs(
        [_t(1, 0), {"name": "bytes", "configuration": {"endian": endian}}, *bb], I4, [3, 5]
    )
    encoded = chain.encode(chunk)
    decoded = chain.decode(encoded)
    # a transpose back leaves an F-ordered view of the decoded buffer, not a copy
    assert decoded.dtype == I4 and (decoded.flags.c_contiguous or decoded.flags.f_contiguous)
    np.testing.assert_array_equal(decoded, chunk)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("endian", ["little", "big"])
def test_round_trip_dtypes(dtype: str, endian: str) -> None:
    dt = np.dtype(dtype)
    chunk = _sample(dt, (2, 3))
    chain = parse_codecs([{"name": "bytes", "configuration": {"endian": endian}}, GZIP], dt, [2, 3])
    encoded = chain.encode(chunk)
    stored = gzip.decompress(encoded)
    # The stored bytes are the chunk in C order in the codec's byte order.
    assert stored == chunk.astype(dt.newbyteorder(">" if endian == "big" else "<")).tobytes()
    assert chain.decode(encoded).tobytes() == chunk.tobytes()


def test_big_endian_struct_round_trip() -> None:
    dt = np.dtype([("a", "<i2"), ("b", "<f8"), ("c", "S3")])
    chunk = np.array([(1, 0.5, b"x"), (-2, 2.0, b"yz")], dtype=dt)
    chain = parse_codecs([BE], dt, [2])
    encoded = chain.encode(chunk)
    assert encoded[:2] == b"\x00\x01"
    assert chain.decode(encoded).tobytes() == chunk.tobytes()


@st.composite
def _transposed(draw: st.DrawFn) -> tuple[np.ndarray, list[list[int]], str]:
    ndim = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    dtype = np.dtype(draw(st.sampled_from(["|u1", "<i2", "<f8", "<c8"])))
    orders = draw(st.lists(st.permutations(list(range(ndim))), max_size=3))
    data = draw(
        st.binary(
            min_size=int(np.prod(shape)) * dtype.itemsize,
            max_size=int(np.prod(shape)) * dtype.itemsize,
        )
    )
    return (
        np.frombuffer(data, dtype).reshape(shape),
        orders,
        draw(st.sampled_from(["little", "big"])),
    )


@settings(max_examples=150, deadline=None)
@given(_transposed(), st.sampled_from(BYTES_CODECS[:5]))
def test_round_trip_transposes(
    case: tuple[np.ndarray, list[list[int]], str], bb: list[Any]
) -> None:
    chunk, orders, endian = case
    codecs = [_t(*o) for o in orders] + [
        {"name": "bytes", "configuration": {"endian": endian}},
        *bb,
    ]
    chain = parse_codecs(codecs, chunk.dtype, list(chunk.shape))
    decoded = chain.decode(chain.encode(chunk))
    assert decoded.shape == chunk.shape and decoded.tobytes() == chunk.tobytes()
    # The stored element order is the chunk transposed by each order in turn.
    expected = chunk
    for order in orders:
        expected = expected.transpose(order)
    raw = chain.decode_bytes(chain.encode(chunk), chunk.nbytes)
    want = np.ascontiguousarray(expected).astype(
        chunk.dtype.newbyteorder(">" if endian == "big" else "<")
    )
    assert bytes(raw) == want.tobytes()


def test_numcodecs_delta_round_trip() -> None:
    codecs = [{"name": "numcodecs.delta", "configuration": {"dtype": "int32"}}, LE, GZIP]
    chain = parse_codecs(codecs, I4, [2, 4])
    chunk = np.arange(8, dtype=I4).reshape(2, 4) * 3
    encoded = chain.encode(chunk)
    assert np.frombuffer(gzip.decompress(encoded), I4).tolist() == [0] + [3] * 7
    np.testing.assert_array_equal(chain.decode(encoded), chunk)


# ------------------------------------------------------------- hostile data


def test_gzip_bomb_fails_fast_with_bounded_memory() -> None:
    bomb = gzip.compress(bytes(64 << 20), compresslevel=9)
    chain = parse_codecs([LE, GZIP], I4, [4])  # a chunk of 16 bytes
    tracemalloc.start()
    start = time.monotonic()
    try:
        with pytest.raises(ValueError, match="more than 16 bytes"):
            chain.decode(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.monotonic() - start < 2
    assert peak < 4 << 20


def test_zstd_and_blosc_bombs_fail() -> None:
    for bb in ([ZSTD], [BLOSC]):
        big = parse_codecs([LE, *bb], np.dtype("|u1"), [1 << 20]).encode(np.zeros(1 << 20, "u1"))
        small = parse_codecs([LE, *bb], I4, [4])
        with pytest.raises(ValueError):
            small.decode(big)


def test_crc32c_mismatch_fails() -> None:
    chain = parse_codecs([LE, CRC], I4, [4])
    good = chain.encode(np.arange(4, dtype=I4))
    assert len(good) == 20
    chain.decode(good)
    for bad in (good[:-1] + bytes([good[-1] ^ 1]), bytes([good[0] ^ 1]) + good[1:]):
        with pytest.raises(ValueError, match="crc32c"):
            chain.decode(bad)
    with pytest.raises(ValueError):
        chain.decode(good[:3])


def test_crc32c_layout_is_the_spec() -> None:
    import google_crc32c

    chain = parse_codecs([LE, CRC], I4, [4])
    payload = np.arange(4, dtype=I4).tobytes()
    assert chain.encode(np.arange(4, dtype=I4)) == payload + google_crc32c.value(payload).to_bytes(
        4, "little"
    )


@pytest.mark.parametrize("data", [b"", b"\x00" * 15, b"\x00" * 17])
def test_wrong_size_fails(data: bytes) -> None:
    chain = parse_codecs([LE], I4, [4])
    with pytest.raises(ValueError, match="16"):
        chain.decode(data)


def test_wrong_dtype_refused_on_encode() -> None:
    chain = parse_codecs([LE], I4, [4])
    with pytest.raises(ValueError):
        chain.encode(np.zeros(4, "<f4"))
    # The same type in the other byte order is the same values.
    big = np.arange(4, dtype=">i4")
    assert chain.encode(big) == np.arange(4, dtype=I4).tobytes()


# ------------------------------------------------------ against zarr-python 3


def _zarr_cases() -> list[tuple[str, Any, Any, Any, Any]]:
    from zarr.codecs import (
        BloscCodec,
        BytesCodec,
        Crc32cCodec,
        GzipCodec,
        TransposeCodec,
        ZstdCodec,
    )

    return [
        (
            "<i4",
            BytesCodec(endian="big"),
            [TransposeCodec(order=(1, 0))],
            [GzipCodec(level=3)],
            (5, 7),
        ),
        ("<f8", BytesCodec(endian="little"), [], [ZstdCodec(level=1, checksum=True)], (5, 7)),
        (
            "<u2",
            BytesCodec(endian="big"),
            [],
            [BloscCodec(cname="lz4", shuffle="bitshuffle")],
            (5, 7),
        ),
        ("<c8", BytesCodec(endian="big"), [], [GzipCodec(), Crc32cCodec()], (5, 7)),
        (
            "<i8",
            BytesCodec(endian="little"),
            [TransposeCodec(order=(2, 0, 1))],
            [BloscCodec(cname="zstd", shuffle="shuffle", typesize=8)],
            (3, 4, 5),
        ),
        ("|u1", BytesCodec(endian=None), [], [], (5, 7)),
        ("<f4", BytesCodec(endian="big"), [TransposeCodec(order=(1, 0))], [Crc32cCodec()], (5, 7)),
    ]


@pytest.mark.parametrize("case", range(7))
def test_matches_zarr_python(tmp_path: Path, case: int) -> None:
    dtype, serializer, filters, compressors, shape = _zarr_cases()[case]
    chunks = tuple(max(1, n // 2) for n in shape)  # partial edge chunks included
    data = (np.arange(int(np.prod(shape))) * 7 % 251).astype(dtype).reshape(shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        z = zarr.create_array(
            store=tmp_path / "a.zarr",
            shape=shape,
            chunks=chunks,
            dtype=dtype,
            zarr_format=3,
            serializer=serializer,
            filters=filters,
            compressors=compressors,
        )
        z[...] = data
    meta = json.loads((tmp_path / "a.zarr" / "zarr.json").read_text())
    v3type = parse_data_type(meta["data_type"])
    chain = parse_codecs(
        meta["codecs"], v3type.dtype, meta["chunk_grid"]["configuration"]["chunk_shape"]
    )
    files = sorted((tmp_path / "a.zarr" / "c").rglob("*"))
    files = [f for f in files if f.is_file()]
    assert len(files) == int(np.prod([-(-n // c) for n, c in zip(shape, chunks, strict=True)]))
    for f in files:
        position = [int(p) for p in f.relative_to(tmp_path / "a.zarr" / "c").parts]
        region = tuple(slice(p * c, (p + 1) * c) for p, c in zip(position, chunks, strict=True))
        want = z[region]
        got = chain.decode(f.read_bytes())
        assert got.shape == chunks and got.dtype == v3type.dtype
        np.testing.assert_array_equal(got[tuple(slice(0, n) for n in want.shape)], want)
        # What zarrfs would write back is what zarr-python reads.
        f.write_bytes(chain.encode(got))
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a.zarr", mode="r")[...], data)


# ------------------------------------------------------------------- corpus


def _chunk_key(meta: dict[str, Any], position: tuple[int, ...]) -> str:
    encoding = meta["chunk_key_encoding"]
    default = encoding["name"] == "default"
    sep = encoding.get("configuration", {}).get("separator", "/" if default else ".")
    parts = [str(p) for p in position]
    return sep.join(["c", *parts]) if default else (sep.join(parts) or "0")


def _corpus_chains() -> list[tuple[str, dict[str, Any], dict[str, Any], V3CodecChain]]:
    """(name, expected entry, zarr.json, chain) of the non-sharded v3 corpus arrays
    with a fixed-size dtype whose codecs parse."""
    expected = json.loads((CORPUS / "expected.json").read_text())
    found = []
    for name, entry in expected.items():
        if entry.get("format") != 3:
            continue
        meta = json.loads((CORPUS / "data" / name / "zarr.json").read_text())
        dtype = parse_data_type(meta["data_type"]).dtype
        if dtype is None or meta["chunk_grid"]["name"] != "regular":
            continue
        chunk_shape = meta["chunk_grid"]["configuration"]["chunk_shape"]
        try:
            chain = parse_codecs(meta["codecs"], dtype, chunk_shape)
        except MetadataError:
            continue
        if chain.sharding is None:
            found.append((name, entry, meta, chain))
    return found


def test_corpus_single_chunk_arrays() -> None:
    checked = []
    for name, entry, meta, chain in _corpus_chains():
        path = CORPUS / "data" / name / _chunk_key(meta, (0,) * len(meta["shape"]))
        if list(meta["shape"]) != list(chain.chunk_shape) or not path.is_file():
            continue
        decoded = chain.decode(path.read_bytes())
        digest = hashlib.sha256(decoded.tobytes()).hexdigest()
        assert digest == entry["sha256_c_order"], (name, chain.describe())
        checked.append(name)
    print(f"{len(checked)} single-chunk v3 corpus arrays decoded")
    assert len(checked) >= 20


def test_corpus_whole_arrays() -> None:
    """Every chunk of every non-sharded array, assembled: all codecs the corpus has."""
    checked = []
    for name, entry, meta, chain in _corpus_chains():
        v3type = parse_data_type(meta["data_type"])
        shape, chunks = tuple(meta["shape"]), chain.chunk_shape
        fill = decode_fill_value(meta["fill_value"], v3type)
        whole = np.frombuffer(fill * max(1, int(np.prod(shape))), chain.dtype)
        whole = whole[: int(np.prod(shape))].reshape(shape).copy()
        for position in np.ndindex(*[-(-n // c) for n, c in zip(shape, chunks, strict=True)]):
            path = CORPUS / "data" / name / _chunk_key(meta, position)
            if not path.is_file():
                continue
            region = tuple(
                slice(p * c, min((p + 1) * c, n))
                for p, c, n in zip(position, chunks, shape, strict=True)
            )
            decoded = chain.decode(path.read_bytes())
            whole[region] = decoded[tuple(slice(0, r.stop - r.start) for r in region)]
        digest = hashlib.sha256(whole.tobytes()).hexdigest()
        assert digest == entry["sha256_c_order"], (name, chain.describe())
        checked.append(chain.describe())
    print(f"{len(checked)} whole non-sharded v3 corpus arrays decoded")
    assert len(checked) >= 170
    text = " ".join(checked)
    for stage in ("transpose", "endian=big", "gzip", "zstd", "blosc", "crc32c", "numcodecs."):
        assert stage in text, stage


def test_chain_is_frozen() -> None:
    chain = parse_codecs([LE], I4, [4])
    assert isinstance(chain, V3CodecChain)
    with pytest.raises(AttributeError):
        chain.dtype = np.dtype("<f4")  # type: ignore[misc]
