"""zlib and gzip chunks decoded by libdeflate (zarrfs/formats/codecs/inflate.py) are exactly
what the reference streams of bounded.py decode: the same bytes, or the same
exception with the same message, whatever the stream holds after or instead of one
well-formed stream. The fast path must also really be the one taken: for well-formed
chunks, the corpus's among them, and in the normal read path.
"""

from __future__ import annotations

import hashlib
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import deflate
import numcodecs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numcodecs.compat import ensure_contiguous_ndarray

from tests.support.corpus import assert_store_reads_back, stores
from zarrfs.formats.codecs import bounded, inflate
from zarrfs.formats.codecs.pipeline import CodecPipeline, size_bound

MiB = 1 << 20
DATA = (np.arange(6000) % 251).astype("<u2").tobytes() + bytes(range(256)) * 8


def codec(codec_id: str, level: int = 1) -> Any:
    return numcodecs.get_codec({"id": codec_id, "level": level})


@contextmanager
def reference_path() -> Iterator[None]:
    """bounded.decompress without libdeflate: the streams only."""
    saved = inflate.inflate
    inflate.inflate = lambda *args, **kwargs: None  # type: ignore[assignment]
    try:
        yield
    finally:
        inflate.inflate = saved  # type: ignore[assignment]


@contextmanager
def counted() -> Iterator[dict[str, int]]:
    """How often inflate.inflate decoded a chunk ("fast") or handed it back."""
    counts = {"fast": 0, "handed back": 0}
    saved = inflate.inflate

    def counting(*args: Any, **kwargs: Any) -> Any:
        result = saved(*args, **kwargs)
        counts["fast" if result is not None else "handed back"] += 1
        return result

    inflate.inflate = counting  # type: ignore[assignment]
    try:
        yield counts
    finally:
        inflate.inflate = saved  # type: ignore[assignment]


Outcome = tuple[str, Any, Any]


def outcome(codec_id: str, stored: bytes, limit: int, into: bool, *, fast: bool) -> Outcome:
    """("ok", length, bytes) or ("error", exception type, message)."""
    out = np.empty(limit, np.uint8) if into else None
    try:
        with nullcontext() if fast else reference_path():
            result = bounded.decompress(codec(codec_id), stored, limit, out)
    except Exception as e:
        return ("error", type(e), str(e))
    if into:
        assert result is out or result.base is out, "not decoded into out"
    else:
        assert isinstance(result, bytes | bytearray)
    decoded = bytes(memoryview(result).cast("B"))
    return ("ok", len(decoded), decoded)


def taken(codec_id: str, stored: bytes, limit: int, into: bool) -> bool:
    """Whether libdeflate decodes the chunk rather than handing it back."""
    out = np.empty(limit, np.uint8) if into else None
    return inflate.inflate(memoryview(stored), limit, out, gzip=codec_id == "gzip") is not None


def assert_same(codec_id: str, stored: bytes, limit: int) -> bool:
    """Fast and reference agree, into ``out`` and not; whether the fast path took it."""
    took = set()
    for into in (True, False):
        reference = outcome(codec_id, stored, limit, into, fast=False)
        assert outcome(codec_id, stored, limit, into, fast=True) == reference
        took.add(taken(codec_id, stored, limit, into))
    assert len(took) == 1, "taken with out and not without, or the other way round"
    return took.pop()


# -- gzip members made by hand ---------------------------------------------------------------

FTEXT, FHCRC, FEXTRA, FNAME, FCOMMENT = 0x01, 0x02, 0x04, 0x08, 0x10


def gzip_member(data: bytes, flags: int = 0, *, header_crc: int | None = None) -> bytes:
    header = bytearray(b"\x1f\x8b\x08" + bytes([flags]) + b"\0\0\0\0\x00\x03")
    if flags & FEXTRA:
        header += (6).to_bytes(2, "little") + b"zf\x02\x00hi"
    if flags & FNAME:
        header += b"chunk.raw\0"
    if flags & FCOMMENT:
        header += b"a comment\0"
    if flags & FHCRC:
        crc = zlib.crc32(header) & 0xFFFF if header_crc is None else header_crc
        header += crc.to_bytes(2, "little")
    body = zlib.compressobj(6, zlib.DEFLATED, -15)
    deflated = body.compress(data) + body.flush()
    trailer = zlib.crc32(data).to_bytes(4, "little") + (len(data) & 0xFFFFFFFF).to_bytes(
        4, "little"
    )
    return bytes(header) + deflated + trailer


def zlib_with_dictionary(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, 15, zdict=b"a dictionary")
    return c.compress(data) + c.flush()


def flipped(stored: bytes, position: int) -> bytes:
    damaged = bytearray(stored)
    damaged[position] ^= 0x55
    return bytes(damaged)


Z = zlib.compress(DATA, 1)
G = bytes(codec("gzip").encode(DATA))
N = len(DATA)

# (name, codec id, stored chunk, limit, libdeflate takes it)
QUIRKS: list[tuple[str, str, bytes, int, bool]] = [
    ("zlib", "zlib", Z, N, True),
    ("zlib-level-0", "zlib", zlib.compress(DATA, 0), N, True),
    ("zlib-level-9", "zlib", zlib.compress(DATA, 9), N, True),
    ("zlib-trailing-garbage", "zlib", Z + b"trailing garbage", N, True),
    ("zlib-second-stream-ignored", "zlib", Z + Z, N, True),
    ("zlib-truncated-half", "zlib", Z[: len(Z) // 2], N, False),
    ("zlib-truncated-checksum", "zlib", Z[:-1], N, False),
    ("zlib-truncated-header", "zlib", Z[:1], N, False),
    ("zlib-empty", "zlib", b"", N, False),
    ("zlib-corrupt-body", "zlib", flipped(Z, len(Z) // 2), N, False),
    ("zlib-corrupt-checksum", "zlib", flipped(Z, len(Z) - 1), N, False),
    ("zlib-bad-header", "zlib", flipped(Z, 1), N, False),
    ("zlib-preset-dictionary", "zlib", zlib_with_dictionary(DATA), N, False),
    ("zlib-raw-deflate", "zlib", Z[2:-4], N, False),
    ("zlib-over-limit", "zlib", Z, N - 1, False),
    ("zlib-over-limit-by-far", "zlib", zlib.compress(bytes(8 * MiB)), N, False),
    ("zlib-under-limit", "zlib", Z, N + 100, True),
    ("zlib-nothing", "zlib", zlib.compress(b""), N, True),
    ("zlib-nothing-limit-0", "zlib", zlib.compress(b""), 0, True),
    ("zlib-something-limit-0", "zlib", Z, 0, False),
    ("gzip", "gzip", G, N, True),
    ("gzip-level-9", "gzip", bytes(codec("gzip", 9).encode(DATA)), N, True),
    ("gzip-members", "gzip", G + G, 2 * N, True),
    ("gzip-three-members", "gzip", G + gzip_member(b"") + G, 2 * N, True),
    ("gzip-padding", "gzip", G + b"\0" * 7 + G + b"\0\0", 2 * N, True),
    ("gzip-long-padding", "gzip", G + bytes(200_000) + G, 2 * N, True),
    ("gzip-padding-only-after", "gzip", G + b"\0" * 3, N, True),
    ("gzip-empty", "gzip", b"", N, False),
    ("gzip-zeros", "gzip", b"\0" * 8, N, False),
    ("gzip-holding-zlib", "gzip", Z, N, True),
    ("gzip-holding-zlib-trailing", "gzip", Z + b"\x1f\x8bnot a member", N, True),
    ("gzip-holding-zlib-truncated", "gzip", Z[:-2], N, False),
    ("gzip-garbage-after", "gzip", G + b"garbage", N, False),
    ("gzip-half-magic-after", "gzip", G + b"\x1f", N, False),
    ("gzip-magic-after", "gzip", G + b"\x1f\x8b", 2 * N, False),
    ("gzip-truncated-member-after", "gzip", G + G[:-3], 2 * N, False),
    ("gzip-truncated", "gzip", G[: len(G) // 2], N, False),
    ("gzip-truncated-trailer", "gzip", G[:-1], N, False),
    ("gzip-header-only", "gzip", G[:10], N, False),
    ("gzip-corrupt-crc", "gzip", flipped(G, len(G) - 6), N, False),
    ("gzip-corrupt-size", "gzip", flipped(G, len(G) - 2), N, False),
    ("gzip-corrupt-body", "gzip", flipped(G, len(G) // 2), N, False),
    ("gzip-bad-method", "gzip", G[:2] + b"\x07" + G[3:], N, False),
    ("gzip-reserved-flag", "gzip", gzip_member(DATA, 0x20), N, False),
    ("gzip-named", "gzip", gzip_member(DATA, FTEXT | FEXTRA | FNAME | FCOMMENT), N, True),
    ("gzip-header-crc", "gzip", gzip_member(DATA, FHCRC | FNAME), N, False),
    ("gzip-header-crc-wrong", "gzip", gzip_member(DATA, FHCRC, header_crc=1), N, False),
    ("gzip-over-limit", "gzip", G, N - 1, False),
    ("gzip-members-over-limit", "gzip", G + G, 2 * N - 1, False),
    ("gzip-under-limit", "gzip", G, N + 100, True),
    ("gzip-members-under-limit", "gzip", G + G, 3 * N, True),
    ("gzip-nothing-limit-0", "gzip", gzip_member(b"") + gzip_member(b""), 0, True),
]


@pytest.mark.parametrize(
    ("codec_id", "stored", "limit", "fast"),
    [q[1:] for q in QUIRKS],
    ids=[q[0] for q in QUIRKS],
)
def test_quirk_decodes_as_the_reference(
    codec_id: str, stored: bytes, limit: int, fast: bool
) -> None:
    assert assert_same(codec_id, stored, limit) == fast


def test_quirks_keep_their_errors() -> None:
    """A few of today's messages, so that the table above compares errors, not nothing."""
    cases = {
        "zlib-truncated-half": "incomplete or truncated stream",
        "zlib-over-limit": f"decodes to more than {N - 1} bytes",
        "gzip-garbage-after": "data after a gzip member is not another member",
        "gzip-header-crc-wrong": "header crc mismatch",
        "zlib-preset-dictionary": "Error 2 while decompressing data",
    }
    table = {q[0]: q for q in QUIRKS}
    for name, message in cases.items():
        _, codec_id, stored, limit, _ = table[name]
        for into in (True, False):
            kind, _, text = outcome(codec_id, stored, limit, into, fast=True)
            assert kind == "error" and message in text, name


# -- random streams --------------------------------------------------------------------------

payloads = st.one_of(
    st.binary(max_size=5000),  # incompressible
    st.builds(
        lambda unit, times: (unit * times)[: 1 << 17],
        st.binary(min_size=1, max_size=50),
        st.integers(1, 5000),
    ),
    st.builds(  # float32 noise, a little compressible
        lambda seed, n: np.random.default_rng(seed).normal(size=n).astype("<f4").tobytes(),
        st.integers(0, 2**32 - 1),
        st.integers(0, 20000),
    ),
)


def encode(framing: str, encoder: str, level: int, data: bytes) -> bytes:
    if encoder == "libdeflate":  # another encoder's choices of blocks and codes
        fn = deflate.zlib_compress if framing == "zlib" else deflate.gzip_compress
        return bytes(fn(data, level))
    wbits = 15 if framing == "zlib" else 31
    c = zlib.compressobj(min(level, 9), zlib.DEFLATED, wbits)
    return c.compress(data) + c.flush()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=payloads,
    framing=st.sampled_from(["zlib", "gzip", "gzip-holding-zlib"]),
    encoder=st.sampled_from(["zlib", "libdeflate"]),
    level=st.integers(0, 12),
    members=st.integers(1, 3),
    trailing=st.one_of(st.just(b""), st.binary(min_size=1, max_size=20), st.just(b"\0\0\0")),
    slack=st.sampled_from([0, 0, 0, -1, 1, 1000]),
    cut=st.sampled_from([0, 0, 0, 1, 5]),
)
def test_random_streams_decode_as_the_reference(
    data: bytes,
    framing: str,
    encoder: str,
    level: int,
    members: int,
    trailing: bytes,
    slack: int,
    cut: int,
) -> None:
    codec_id = "zlib" if framing == "zlib" else "gzip"
    one = encode("zlib" if framing != "gzip" else "gzip", encoder, level, data)
    stored = (one * (members if framing == "gzip" else 1) + trailing)[: -cut or None]
    decoded = len(data) * (members if framing == "gzip" else 1)
    took = assert_same(codec_id, stored, max(0, decoded + slack))
    if not cut and not trailing and slack >= 0:
        assert took, "a well-formed chunk within its limit was handed back"


# -- the corpus ------------------------------------------------------------------------------


def _deflated_stores(corpus: Path) -> list[str]:
    """The corpus stores whose metadata names zlib or gzip somewhere."""
    found = []
    for root in stores():
        for path in (corpus / "data" / root).rglob("*"):
            if path.name in {".zarray", "zarr.json", "meta", "__zmeta__"} and path.is_file():
                text = path.read_text(errors="replace")
                if "zlib" in text or "gzip" in text:
                    found.append(root)
                    break
    return found


def test_corpus_chunks_decode_as_the_reference(
    corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every zlib and gzip chunk the corpus's arrays read (v2 chunks, v3 chunks,
    chunks inside shards) decodes to the reference's bytes, through libdeflate."""
    calls: dict[str, tuple[str, bytes, int]] = {}
    real = bounded.decompress

    def recording(codec_: Any, data: Any, limit: int, out: np.ndarray | None = None) -> Any:
        codec_id = getattr(codec_, "codec_id", None)
        if codec_id in ("zlib", "gzip"):
            stored = ensure_contiguous_ndarray(data).tobytes()
            calls[hashlib.sha256(stored).hexdigest()] = (codec_id, stored, limit)
        return real(codec_, data, limit, out)

    monkeypatch.setattr(bounded, "decompress", recording)
    roots = _deflated_stores(corpus)
    assert len(roots) >= 5
    with counted() as counts:  # reading checks each array's SHA-256, decoded the fast way
        for root in roots:
            assert_store_reads_back(root)
    assert counts["fast"] >= 0.9 * (counts["fast"] + counts["handed back"]), counts
    assert len(calls) >= 100, len(calls)
    fast = 0
    for codec_id, stored, limit in calls.values():
        fast += assert_same(codec_id, stored, limit)
    assert fast >= 0.9 * len(calls), f"libdeflate took {fast} of {len(calls)} chunks"


# -- the read path ---------------------------------------------------------------------------


@contextmanager
def libdeflate_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The libdeflate functions called, by name."""
    lib = inflate._LIB
    assert lib is not None
    called: list[str] = []

    def spy(name: str, fn: Callable[..., int]) -> Callable[..., int]:
        def call(*args: Any) -> int:
            called.append(name)
            return fn(*args)

        return call

    with monkeypatch.context() as m:
        m.setattr(lib, "zlib", spy("zlib", lib.zlib))
        m.setattr(lib, "gzip", spy("gzip", lib.gzip))
        yield called


def test_libdeflate_is_there() -> None:
    """Installed with zarrfs (pyproject.toml), and its C functions reachable."""
    assert inflate.AVAILABLE


def test_read_path_goes_through_libdeflate(monkeypatch: pytest.MonkeyPatch) -> None:
    values = np.arange(30000, dtype="<i4")
    data = values.tobytes()
    with libdeflate_calls(monkeypatch) as called:
        out = np.empty(len(data), np.uint8)
        assert bounded.decompress(numcodecs.Zlib(1), zlib.compress(data, 1), len(data), out) is out
        assert out.tobytes() == data
        assert called == ["zlib"]
        for spec in ({"id": "zlib", "level": 1}, {"id": "gzip", "level": 5}):
            pipe = CodecPipeline(spec, [])
            decoded = pipe.decode(pipe.encode(values), values.dtype, values.shape, "C")
            assert np.array_equal(decoded, values)
        assert called == ["zlib", "zlib", "gzip"]


def test_bomb_fails_fast_within_the_limit() -> None:
    """libdeflate stops where the limit is, having allocated nothing past it."""
    stored = zlib.compress(bytes(64 * MiB), 9)
    limit = size_bound(16)
    tracemalloc.start()
    try:
        start = time.monotonic()
        assert inflate.inflate(memoryview(stored), limit, None, gzip=False) is None
        took = time.monotonic() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < limit + 64 * 1024
    assert took < 0.5


def test_decoding_releases_the_gil() -> None:
    """Another thread runs while libdeflate decodes: the GIL is released for it."""
    data = np.random.default_rng(3).integers(0, 16, 24 * MiB, dtype=np.uint8).tobytes()
    stored = zlib.compress(data, 1)
    out = np.empty(len(data), np.uint8)
    gaps: list[float] = []
    stop = threading.Event()

    def tick() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        time.sleep(0.02)
        with counted() as counts:
            start = time.perf_counter()
            bounded.decompress(codec("zlib"), stored, len(data), out)
            took = time.perf_counter() - start
            begin = len(gaps)
    finally:
        stop.set()
        ticker.join()
    assert counts["fast"] == 1 and out.tobytes() == data
    # with the GIL held for the whole decode, the ticker would stall for all of it
    assert took > 0.02 and begin > 0
    assert max(gaps) < took / 2, (max(gaps), took)


# -- a known leniency ------------------------------------------------------------------------


def _bits(pieces: list[tuple[int, int]]) -> bytes:
    """(value, width) pieces packed LSB first, as DEFLATE writes header fields."""
    acc = n = 0
    for value, width in pieces:
        acc |= value << n
        n += width
    return acc.to_bytes((n + 7) // 8, "little")


def _code(codeword: int, length: int) -> tuple[int, int]:
    """A Huffman codeword, which DEFLATE writes most significant bit first."""
    return int(f"{codeword:0{length}b}"[::-1], 2), length


def test_invalid_symbol_stays_within_the_limit() -> None:
    """libdeflate reads the length symbol 286, which zlib refuses, as a match of 258:
    the one way a chunk of a hand-made stream decodes where the reference fails (see
    inflate.py). The output still stays within the limit."""
    expected = b"a" * 259
    body = _bits(
        [
            (1, 1),  # BFINAL
            (1, 2),  # static Huffman codes
            _code(0x30 + ord("a"), 8),  # literal "a"
            _code(0xC0 + 286 - 280, 8),  # length symbol 286
            _code(0, 5),  # distance 1
            _code(0, 7),  # end of block
        ]
    )
    stored = b"\x78\x01" + body + zlib.adler32(expected).to_bytes(4, "big")
    reference = outcome("zlib", stored, len(expected), True, fast=False)
    assert reference == (
        "error",
        zlib.error,
        "Error -3 while decompressing data: invalid literal/length code",
    )
    assert outcome("zlib", stored, len(expected), True, fast=True) == ("ok", 259, expected)
    assert outcome("zlib", stored, len(expected) - 1, True, fast=True)[0] == "error"
