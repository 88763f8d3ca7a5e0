"""Decoding never produces more than the chunk's size, and failures keep no buffers.

Requirement (hostile input): each compressor numcodecs knows decodes at most
the chunk's size (8 x that + 1 MiB where filters make it unknown) and fails as soon
as the stream would go past it, having allocated little more; what it does decode
is bit-identical to numcodecs' own decoder. A chunk that fails, and the cache's
memory of the failure, hold none of the buffers the failed decode filled.

The bombs are 64 MiB of zeros declared as chunks of 16 bytes: numcodecs' decoders
(the control) allocate all 64 MiB, the bounded ones fail within a few MiB.
"""

from __future__ import annotations

import errno
import functools
import gc
import json
import logging
import lzma
import time
import tracemalloc
import weakref
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.read.lru import ChunkKey
from zarrfs.errors import ChunkError, InvalidValueError, StoreError
from zarrfs.formats.codecs import bounded
from zarrfs.formats.codecs.pipeline import CodecPipeline, size_bound
from zarrfs.formats.metadata.v2 import parse_array
from zarrfs.stores.directory import DirectoryStore

MiB = 1 << 20
BOMB_BYTES = 64 * MiB
CHUNK = 16  # what the bombs claim to be
SMALL_PEAK = 4 * MiB

CODECS: dict[str, dict[str, Any]] = {
    "zlib-1": {"id": "zlib", "level": 1},
    "zlib-9": {"id": "zlib", "level": 9},
    "gzip-1": {"id": "gzip", "level": 1},
    "gzip-9": {"id": "gzip", "level": 9},
    "bz2-1": {"id": "bz2", "level": 1},
    "bz2-9": {"id": "bz2", "level": 9},
    "lzma-xz-1": {"id": "lzma", "format": lzma.FORMAT_XZ, "check": -1, "preset": 1},
    "lzma-xz-6": {"id": "lzma", "format": lzma.FORMAT_XZ, "check": -1, "preset": 6},
    "lzma-alone": {"id": "lzma", "format": lzma.FORMAT_ALONE, "check": -1, "preset": 1},
    "lzma-raw": {
        "id": "lzma",
        "format": lzma.FORMAT_RAW,
        "check": -1,
        "preset": None,
        "filters": [{"id": lzma.FILTER_LZMA2, "preset": 1}],
    },
    "zstd-1": {"id": "zstd", "level": 1},
    "zstd-19": {"id": "zstd", "level": 19},
    "zstd-neg": {"id": "zstd", "level": -5},
    "zstd-checksum": {"id": "zstd", "level": 3, "checksum": True},
    "lz4-1": {"id": "lz4", "acceleration": 1},
    "lz4-20": {"id": "lz4", "acceleration": 20},
    "blosc-lz4": {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1},
    "blosc-zstd": {"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 2},
    "blosc-zlib": {"id": "blosc", "cname": "zlib", "clevel": 1, "shuffle": 0},
}
# one configuration per codec id, for the bombs (lzma at a small dictionary: the
# decoder allocates the whole dictionary, which is not what is measured here)
BOMBS = ("zlib-9", "gzip-9", "bz2-1", "lzma-xz-1", "lzma-raw", "zstd-1", "lz4-1", "blosc-lz4")


def codec(name: str) -> Any:
    return numcodecs.get_codec(dict(CODECS[name]))


def reference(name: str, encoded: bytes) -> bytes:
    return bytes(codec(name).decode(encoded))


def bounded_bytes(name: str, encoded: bytes, limit: int, into: bool) -> bytes:
    out = np.empty(limit, np.uint8) if into else None
    result = bounded.decompress(codec(name), encoded, limit, out)
    if into:
        assert np.asarray(result).base is out or result is out, "not decoded into out"
    return bytes(memoryview(result).cast("B"))


@contextmanager
def traced() -> Iterator[Callable[[], int]]:
    """The peak of traced memory above where it was, as a function."""
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    try:
        yield lambda: tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


# -- identical to numcodecs ----------------------------------------------------------------

chunk_data = st.one_of(
    st.binary(min_size=1, max_size=3000),
    st.builds(
        lambda unit, times: (unit * times)[: 1 << 16],
        st.binary(min_size=1, max_size=40),
        st.integers(1, 4000),
    ),
)


@pytest.mark.parametrize("name", list(CODECS))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=chunk_data)
def test_decodes_as_numcodecs(name: str, data: bytes) -> None:
    encoded = bytes(codec(name).encode(data))
    assert reference(name, encoded) == data
    # exactly the chunk (into out or not), or under the bound of a filtered chunk
    assert bounded_bytes(name, encoded, len(data), into=True) == data
    assert bounded_bytes(name, encoded, len(data), into=False) == data
    assert bounded_bytes(name, encoded, size_bound(len(data)), into=False) == data


DAMAGED = ("zlib-1", "gzip-1", "bz2-1", "lzma-xz-1", "zstd-1", "lz4-1", "blosc-lz4")


@pytest.mark.parametrize("name", DAMAGED)
@settings(max_examples=60, deadline=None)
@given(
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
    cut=st.integers(0, 10**6),
    into=st.booleans(),
)
def test_damaged_stream_decodes_as_numcodecs_or_fails(
    name: str, edits: list[tuple[int, int]], cut: int, into: bool
) -> None:
    """A damaged stream decodes, if at all, to what numcodecs decodes, within the limit."""
    data = (np.arange(2000) % 37).astype("<i4").tobytes()
    stored = bytearray(codec(name).encode(data))
    for position, value in edits:
        stored[position % len(stored)] = value
    stored = stored[: len(stored) - cut % 4]
    try:
        decoded = bounded_bytes(name, bytes(stored), len(data), into)
    except Exception:
        return
    assert decoded == reference(name, bytes(stored))


@functools.cache
def large_data() -> bytes:
    """2.5 MiB, several steps of the streaming decoders, compressible but not trivially."""
    rng = np.random.default_rng(7)
    return (np.cumsum(rng.integers(-3, 4, 5 * MiB // 4)) % 251).astype("<u2").tobytes()


@pytest.mark.parametrize("name", list(CODECS))
def test_large_chunk_decodes_as_numcodecs(name: str) -> None:
    data = large_data()
    encoded = bytes(codec(name).encode(data))
    assert reference(name, encoded) == data
    assert bounded_bytes(name, encoded, len(data), into=True) == data
    assert bounded_bytes(name, encoded, size_bound(len(data)), into=False) == data
    pipe = CodecPipeline(CODECS[name], [])
    out = np.empty(len(data), np.uint8)
    decoded = pipe.decode(encoded, np.dtype("<u2"), (len(data) // 2,), "C", out)
    assert decoded.base is out and decoded.tobytes() == data
    assert pipe.decode(encoded, np.dtype("<u2"), (len(data) // 2,), "C").tobytes() == data


@pytest.mark.parametrize("name", list(CODECS))
def test_short_chunk_into_a_recycled_buffer_is_the_wrong_size(name: str) -> None:
    """numcodecs fills only the start of a larger ``out`` and returns all of it: the
    rest, a recycled buffer's old bytes, must not pass for the chunk's tail."""
    data = np.arange(24, dtype="<i4")
    pipe = CodecPipeline(CODECS[name], [])
    stale = np.full(120, 0xAB, np.uint8)  # the buffer of an earlier 30-element chunk
    with pytest.raises(ValueError, match=r"decoded 96 bytes, expected 120|holds 120"):
        pipe.decode(pipe.encode(data), np.dtype("<i4"), (30,), "C", stale)


@pytest.mark.parametrize("name", list(CODECS))
def test_filtered_pipeline_decodes_as_numcodecs(name: str) -> None:
    values = np.arange(40000, dtype="<i4") * 3 - 7
    filters = [{"id": "delta", "dtype": "<i4"}, {"id": "shuffle", "elementsize": 4}]
    pipe = CodecPipeline(CODECS[name], filters)
    encoded = pipe.encode(values)
    assert np.array_equal(pipe.decode(encoded, np.dtype("<i4"), values.shape, "C"), values)


@pytest.mark.parametrize(
    ("name", "stored"),
    [
        ("gzip-1", lambda c: c + c),  # concatenated members
        ("gzip-1", lambda c: c + b"\0" * 7 + c + b"\0\0"),  # zero padding between and after
        ("gzip-1", lambda c: b""),  # GzipFile reads nothing from nothing
        ("zlib-1", lambda c: c + b"trailing garbage"),  # zlib.decompress ignores it
        ("bz2-1", lambda c: c + c),  # concatenated streams
        ("bz2-1", lambda c: c + b"garbage"),  # bz2.decompress ignores a failing rest
        ("lzma-xz-1", lambda c: c + c),
        ("lzma-xz-1", lambda c: c + b"\0" * 16),  # not a stream: ignored, as it fails
        ("lzma-xz-1", lambda c: c + b"\0" * 8),  # too short to fail: a truncated stream
        ("zstd-1", lambda c: c + c),  # frames
        ("zstd-1", lambda c: skippable(b"metadata") + c),
    ],
    ids=["gzip-members", "gzip-padding", "gzip-empty", "zlib-trailing", "bz2-streams",
         "bz2-trailing", "xz-streams", "xz-zeros", "xz-few-zeros", "zstd-frames", "zstd-skippable"],
)  # fmt: skip
def test_concatenations_decode_as_numcodecs(name: str, stored: Callable[[bytes], bytes]) -> None:
    data = b"one chunk of data, " * 50
    encoded = stored(bytes(codec(name).encode(data)))
    try:
        expected = reference(name, encoded)
    except Exception as e:
        for limit in (len(data), size_bound(len(data))):
            with pytest.raises(type(e)):
                bounded_bytes(name, encoded, limit, into=limit == len(data))
        return
    assert bounded_bytes(name, encoded, len(expected), into=True) == expected
    assert bounded_bytes(name, encoded, size_bound(len(expected)), into=False) == expected


def test_gzip_holding_zlib_is_decoded_and_said_once(caplog: pytest.LogCaptureFixture) -> None:
    data = np.arange(24, dtype="<i4")
    pipe = CodecPipeline({"id": "gzip", "level": 1}, [])
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            stored = zlib.compress(data.tobytes())
            assert np.array_equal(pipe.decode(stored, data.dtype, data.shape, "C"), data)
        assert np.array_equal(pipe.decode(pipe.encode(data), data.dtype, data.shape, "C"), data)
    assert [r.getMessage() for r in caplog.records if "z5" in r.getMessage()] == [
        "compressor 'gzip' holds zlib streams (z5 quirk); decoding as zlib"
    ]


# -- bombs -----------------------------------------------------------------------------------


@functools.cache
def bomb(name: str) -> bytes:
    zeros = np.zeros(BOMB_BYTES, np.uint8)
    return bytes(codec(name).encode(zeros))


@pytest.mark.parametrize("name", BOMBS)
def test_numcodecs_decodes_the_whole_bomb(name: str) -> None:
    """Control: the bombs are bombs, numcodecs allocates all they ask for."""
    encoded = bomb(name)
    assert len(encoded) < BOMB_BYTES // 200
    with traced() as peak:
        assert len(codec(name).decode(encoded)) == BOMB_BYTES
        assert peak() >= BOMB_BYTES


@pytest.mark.parametrize("filtered", [False, True], ids=["exact", "filtered"])
@pytest.mark.parametrize("name", BOMBS)
def test_bomb_fails_quickly_in_little_memory(name: str, filtered: bool) -> None:
    encoded = bomb(name)
    limit = size_bound(CHUNK) if filtered else CHUNK
    out = None if filtered else np.empty(CHUNK, np.uint8)
    with traced() as peak:
        start = time.monotonic()
        with pytest.raises(ValueError, match=rf"more than {limit} bytes"):
            bounded.decompress(codec(name), encoded, limit, out)
        took = time.monotonic() - start
        assert peak() < SMALL_PEAK
    assert took < 1.0


@pytest.mark.parametrize("name", BOMBS)
def test_bomb_in_a_pipeline_is_a_value_error(name: str) -> None:
    encoded = bomb(name)
    for filters in ([], [{"id": "delta", "dtype": "u1"}]):
        pipe = CodecPipeline(CODECS[name], filters)
        with traced() as peak:
            with pytest.raises(ValueError, match="more than"):
                pipe.decode(encoded, np.dtype("u1"), (CHUNK,), "C", np.empty(CHUNK, np.uint8))
            assert peak() < SMALL_PEAK


def test_compressor_used_as_filter_is_bounded() -> None:
    pipe = CodecPipeline(None, [{"id": "zlib", "level": 9}])
    with traced() as peak, pytest.raises(ValueError, match="more than"):
        pipe.decode(bomb("zlib-9"), np.dtype("u1"), (CHUNK,), "C")
    assert peak() < SMALL_PEAK


def test_each_filter_output_is_checked() -> None:
    """A filter's output beyond the bound is refused before the next one runs."""
    widen = {"id": "astype", "encode_dtype": "u1", "decode_dtype": "<f8"}  # 8 x on decode
    pipe = CodecPipeline(None, [{"id": "delta", "dtype": "<f8"}, widen])
    stored = bytes(200 * 1024)  # decodes to 1.6 MiB > 8 * 16 + 1 MiB
    with pytest.raises(ValueError, match=f"more than {size_bound(16)} bytes"):
        pipe.decode(stored, np.dtype("<f8"), (2,), "C")


# -- truncated and lying streams -------------------------------------------------------------


@pytest.mark.parametrize("name", list(CODECS))
def test_truncated_stream_fails(name: str) -> None:
    data = large_data()[: 300 * 1024]
    encoded = bytes(codec(name).encode(data))
    for cut in (encoded[: len(encoded) // 2], encoded[:-1], encoded[:3]):
        for into in (True, False):
            try:
                decoded = bounded_bytes(name, cut, len(data), into)
            except Exception:  # whatever numcodecs raises
                continue
            pytest.fail(f"{len(cut)} of {len(encoded)} bytes decoded to {len(decoded)} bytes")


ZSTD_MAGIC = (0xFD2FB528).to_bytes(4, "little")
WINDOW_128K = 7 << 3  # window descriptor: 2**(10 + 7)


def raw_block(payload: bytes, last: bool = True) -> bytes:
    return (len(payload) << 3 | 0 << 1 | last).to_bytes(3, "little") + payload


def rle_block(byte: int, count: int, last: bool = True) -> bytes:
    return (count << 3 | 1 << 1 | last).to_bytes(3, "little") + bytes([byte])


def zstd_frame(blocks: list[bytes], content_size: int | None) -> bytes:
    """A frame written by hand: a 128 KiB window, an 8-byte content size or none."""
    if content_size is None:
        return ZSTD_MAGIC + bytes([0x00, WINDOW_128K]) + b"".join(blocks)
    size = content_size.to_bytes(8, "little")
    return ZSTD_MAGIC + bytes([3 << 6, WINDOW_128K]) + size + b"".join(blocks)


def skippable(payload: bytes) -> bytes:
    return (0x184D2A53).to_bytes(4, "little") + len(payload).to_bytes(4, "little") + payload


HELLO = [raw_block(b"hello ", last=False), rle_block(ord("x"), 10)]  # 16 bytes
ZSTD_BOMB = zstd_frame(
    [rle_block(0, 128 << 10, last=False)] * 511 + [rle_block(0, 128 << 10)], None
)


@pytest.mark.parametrize("declared", [None, 16], ids=["no-content-size", "content-size"])
def test_hand_made_zstd_frames_decode_as_numcodecs(declared: int | None) -> None:
    frame = zstd_frame(HELLO, declared)
    assert reference("zstd-1", frame) == b"hello " + b"x" * 10
    for limit in (16, size_bound(16)):
        assert bounded_bytes("zstd-1", frame, limit, into=limit == 16) == b"hello " + b"x" * 10


@pytest.mark.parametrize(
    "frame",
    [
        zstd_frame(HELLO, 1 << 40),  # claims a terabyte
        zstd_frame(HELLO, 16) + zstd_frame(HELLO, 1 << 30),  # the second frame does
        skippable(b"x") + zstd_frame(HELLO, 1 << 30),
    ],
    ids=["huge", "second-frame-huge", "after-skippable"],
)
def test_zstd_content_size_over_the_limit_is_refused_before_decoding(frame: bytes) -> None:
    for limit in (16, size_bound(16)):
        with traced() as peak, pytest.raises(ValueError, match=f"more than {limit} bytes"):
            bounded.decompress(codec("zstd-1"), frame, limit)
        assert peak() < 64 * 1024


def test_zstd_content_size_under_the_truth_fails() -> None:
    for claim in (8, 15):
        with pytest.raises(RuntimeError):  # zstd: it cannot write past what was claimed
            bounded_bytes("zstd-1", zstd_frame(HELLO, claim), 16, into=True)
        with pytest.raises(RuntimeError):
            bounded_bytes("zstd-1", zstd_frame(HELLO, claim), size_bound(16), into=False)


def test_zstd_bomb_without_content_size() -> None:
    assert len(ZSTD_BOMB) < 4096 and len(reference("zstd-1", ZSTD_BOMB)) == BOMB_BYTES
    with traced() as peak:
        with pytest.raises(RuntimeError, match="Destination buffer is too small"):
            bounded.decompress(codec("zstd-1"), ZSTD_BOMB, CHUNK, np.empty(CHUNK, np.uint8))
        with pytest.raises(ValueError, match=f"may decode to more than {size_bound(CHUNK)}"):
            bounded.decompress(codec("zstd-1"), ZSTD_BOMB, size_bound(CHUNK))
        assert peak() < SMALL_PEAK


def test_zstd_malformed_frames_fail() -> None:
    good = zstd_frame(HELLO, 16)
    for bad in (good[:5], good[:-1], good + b"\x01", ZSTD_MAGIC + bytes([0x08, 0, 0, 0, 0])):
        with pytest.raises(Exception):  # noqa: B017 - ValueError here, RuntimeError there
            bounded.decompress(codec("zstd-1"), bad, size_bound(16))


def with_size(encoded: bytes, size: int) -> bytes:
    return size.to_bytes(4, "little") + encoded[4:]


def test_lz4_lying_header() -> None:
    data = large_data()[:4000]
    encoded = bytes(codec("lz4-1").encode(data))
    for limit in (len(data), size_bound(len(data))):
        with traced() as peak, pytest.raises(ValueError, match=f"more than {limit} bytes"):
            bounded.decompress(codec("lz4-1"), with_size(encoded, 2**31 - 1), limit)
        assert peak() < 64 * 1024
    for claim in (len(data) - 1, len(data) // 2):  # the block does not fit what is claimed
        with pytest.raises(RuntimeError):
            bounded_bytes("lz4-1", with_size(encoded, claim), len(data), into=True)
    with pytest.raises(RuntimeError):  # claims more than the block holds
        bounded_bytes("lz4-1", with_size(encoded, len(data) + 1), size_bound(len(data)), False)


def with_nbytes(encoded: bytes, nbytes: int) -> bytes:
    return encoded[:4] + nbytes.to_bytes(4, "little") + encoded[8:]


@pytest.mark.parametrize("claim", [2**31 - 1, size_bound(96) + 1], ids=["2GiB", "bound+1"])
def test_blosc_lying_header_with_filters(claim: int) -> None:
    values = np.arange(24, dtype="<i4")
    filters = [{"id": "delta", "dtype": "<i4"}]
    pipe = CodecPipeline(CODECS["blosc-lz4"], filters)
    stored = with_nbytes(pipe.encode(values), claim)
    with traced() as peak, pytest.raises(ValueError, match=f"more than {size_bound(96)} bytes"):
        pipe.decode(stored, np.dtype("<i4"), (24,), "C")
    assert peak() < 64 * 1024


def test_blosc_lying_header_within_the_bound_fails() -> None:
    values = np.arange(24, dtype="<i4")
    pipe = CodecPipeline(CODECS["blosc-lz4"], [{"id": "delta", "dtype": "<i4"}])
    for claim in (95, 97, 4096):
        with pytest.raises((RuntimeError, ValueError)):
            pipe.decode(with_nbytes(pipe.encode(values), claim), np.dtype("<i4"), (24,), "C")


def with_xz_dictionary(encoded: bytes, code: int) -> bytes:
    """The xz block header's LZMA2 dictionary size byte set to ``code``, CRC redone."""
    size = (encoded[12] + 1) * 4
    header = bytearray(encoded[12 : 12 + size])
    assert header[1] == 0 and header[2:4] == b"\x21\x01", "one LZMA2 filter, no sizes"
    header[4] = code
    header[-4:] = zlib.crc32(header[:-4]).to_bytes(4, "little")
    return encoded[:12] + bytes(header) + encoded[12 + size :]


def test_lzma_header_asking_for_a_huge_dictionary_is_refused() -> None:
    data = b"small chunk" * 10
    xz = with_xz_dictionary(bytes(codec("lzma-xz-1").encode(data)), 36)  # 1 GiB
    alone = bytearray(codec("lzma-alone").encode(data))
    alone[1:5] = (3 << 29).to_bytes(4, "little")  # 1.5 GiB
    for name, stored in (("lzma-xz-1", xz), ("lzma-alone", bytes(alone))):
        with traced() as peak:  # control: liblzma allocates what the header asks
            assert reference(name, stored) == data
            assert peak() > 512 * MiB
        with traced() as peak, pytest.raises(lzma.LZMAError, match="Memory usage limit"):
            bounded.decompress(codec(name), stored, len(data), np.empty(len(data), np.uint8))
        assert peak() < SMALL_PEAK
    raw = numcodecs.get_codec(
        {**CODECS["lzma-raw"], "filters": [{"id": lzma.FILTER_LZMA2, "dict_size": 1 << 30}]}
    )
    with pytest.raises(ValueError, match="dictionary"):
        bounded.decompress(raw, b"\0" * 16, 16)


# -- the chunk cache keeps no buffer of a failed decode -------------------------------------

ARRAY_BYTES = 8 * MiB


class Store(DirectoryStore):
    """Records the limits asked; raises ``faults[key]`` for a key."""

    def __init__(self, root: str, delay: float = 0.0) -> None:
        super().__init__(root)
        self.limits: list[int | None] = []
        self.faults: dict[str, Exception] = {}
        self.delay = delay

    def get(self, key: str, *, limit: int | None = None) -> bytes | None:
        self.limits.append(limit)
        if self.delay:
            time.sleep(self.delay)
        if key in self.faults:
            raise self.faults[key]
        return super().get(key, limit=limit)


def one_chunk_array(root: Path, stored: bytes, filters: list | None = None) -> Any:
    """An 8 MiB u1 array of one zlib chunk, key "0" holding ``stored``."""
    doc = {
        "zarr_format": 2,
        "shape": [ARRAY_BYTES],
        "chunks": [ARRAY_BYTES],
        "dtype": "|u1",
        "compressor": {"id": "zlib", "level": 1},
        "fill_value": 0,
        "order": "C",
        "filters": filters,
    }
    (root / ".zarray").write_text(json.dumps(doc))
    (root / "0").write_bytes(stored)
    return parse_array("", (root / ".zarray").read_bytes(), None)


def cut_short(payload_bytes: int) -> bytes:
    """A zlib stream that decodes ``payload_bytes`` of noise, then ends too early."""
    noise = np.random.default_rng(3).integers(0, 256, payload_bytes, dtype=np.uint8)
    return zlib.compress(noise.tobytes(), 1)[:-2]


def get(cache: ChunkCache, meta: Any) -> BaseException:
    async def main() -> BaseException:
        try:
            await cache.get(meta, (0,))
        except Exception as e:
            return e
        raise AssertionError("the chunk decoded")

    return trio.run(main)


def soon(condition: Callable[[], bool]) -> bool:
    """The worker that delivered a result lets go of it just after: wait for that."""
    deadline = time.monotonic() + 2.0
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.mark.parametrize("filters", [None, [{"id": "delta", "dtype": "u1"}]], ids=["out", "pieces"])
def test_failed_decode_keeps_no_buffer(tmp_path: Path, filters: list | None) -> None:
    meta = one_chunk_array(tmp_path, cut_short(ARRAY_BYTES), filters)
    cache = ChunkCache(Store(str(tmp_path)), 64 * MiB, threads=1)
    gc.disable()  # freed by reference counting, not some day by the collector
    try:
        with traced() as peak:
            base = tracemalloc.get_traced_memory()[0]
            error = get(cache, meta)
            assert isinstance(error, ChunkError) and "truncated" in error.reason
            assert peak() >= ARRAY_BYTES, "the decode did fill its buffers before failing"
            assert cache.loader.failing(ChunkKey(("", (0,))))
            assert soon(lambda: tracemalloc.get_traced_memory()[0] - base < MiB)
    finally:
        gc.enable()


def test_failed_decode_releases_the_spare_buffer(tmp_path: Path) -> None:
    meta = one_chunk_array(tmp_path, cut_short(ARRAY_BYTES))
    cache = ChunkCache(Store(str(tmp_path)), 64 * MiB, threads=1)
    buffer = np.empty(ARRAY_BYTES, np.uint8)
    freed = weakref.ref(buffer)
    assert cache.buffers.add(buffer)
    del buffer
    gc.disable()
    try:
        assert isinstance(get(cache, meta), ChunkError)
        assert cache.loader.failing(ChunkKey(("", (0,))))
        assert soon(lambda: freed() is None), gc.get_referrers(freed())
    finally:
        gc.enable()


def test_each_reader_gets_a_fresh_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Waiters of one load, and readers of the remembered failure: a new ChunkError
    each, with no chain and a traceback that does not grow."""
    meta = one_chunk_array(tmp_path, b"not zlib")
    store = Store(str(tmp_path), delay=0.2)
    cache = ChunkCache(store, 64 * MiB, threads=2)

    async def main() -> list[BaseException]:
        errors: list[BaseException] = []

        async def read() -> None:
            try:
                await cache.get(meta, (0,))
            except ChunkError as e:
                errors.append(e)

        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(read)
        for _ in range(5):
            await read()
        return errors

    with caplog.at_level(logging.ERROR):
        errors = trio.run(main)
    assert len(errors) == 10 and len({id(e) for e in errors}) == 10
    assert len(store.limits) == 1, "one load, remembered"
    for e in errors:
        assert e.logged and e.key == "0" and e.reason.startswith("error: Error -3")
        assert e.__cause__ is None and e.__context__ is None
    assert len({len(traceback_frames(e)) for e in errors}) == 1
    assert len([r for r in caplog.records if "'0'" in r.getMessage()]) == 1


def traceback_frames(e: BaseException) -> list[str]:
    frames = []
    tb = e.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    return frames


def test_store_fault_waiters_share_no_growing_traceback(tmp_path: Path) -> None:
    meta = one_chunk_array(tmp_path, b"unused")
    store = Store(str(tmp_path), delay=0.2)
    store.faults["0"] = StoreError("reading '0': Input/output error")
    cache = ChunkCache(store, 64 * MiB, threads=2)

    async def main() -> list[int]:
        depths: list[int] = []

        async def read() -> None:
            try:
                await cache.get(meta, (0,))
            except StoreError as e:
                depths.append(len(traceback_frames(e)))

        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(read)
        return depths

    depths = trio.run(main)
    assert len(depths) == 4 and len(set(depths)) == 1, depths
    assert not cache.loader.failing(ChunkKey(("", (0,)))), "a store fault is not remembered"


def test_store_limit_and_invalid_values(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    meta = one_chunk_array(tmp_path, zlib.compress(bytes(ARRAY_BYTES)))
    store = Store(str(tmp_path))
    cache = ChunkCache(store, 64 * MiB)
    assert bytes(trio.run(cache.get, meta, (0,))) == bytes(ARRAY_BYTES)
    assert store.limits == [8 * ARRAY_BYTES + MiB]

    cache = ChunkCache(store, 64 * MiB)
    store.faults["0"] = InvalidValueError("reading '0': not a regular file")
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            error = get(cache, meta)
            assert isinstance(error, ChunkError) and error.errno == errno.EIO
            assert error.key == "0" and "not a regular file" in error.reason
    assert len(store.limits) == 2, "the refusal is remembered like a decode failure"
    assert len([r for r in caplog.records if "not a regular file" in r.getMessage()]) == 1
