"""Decompression that never produces more than a limit.

numcodecs' decoders produce whatever the stream asks for: zlib, gzip, bz2 and lzma
decode to the stream's end however far that is, and zstd, lz4 and blosc allocate
what their header claims. A few hundred bytes of hostile chunk can so ask for
gigabytes. Here each compressor numcodecs knows, by codec_id, yields at most
``limit`` bytes and fails as soon as it would yield more, having allocated little
beyond ``limit``. The codec objects still come from numcodecs' registry: only the
decompression call is replaced, with its parameters read from the codec object,
and the bytes produced are the ones numcodecs' own ``decode`` produces. zlib and
gzip chunks go through libdeflate first (inflate.py), which hands back to the
streams here whatever it is not certain to decode as they do.
"""

from __future__ import annotations

import bz2
import lzma
import zlib
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from numcodecs.abc import Codec
from numcodecs.compat import ensure_contiguous_ndarray, ensure_ndarray_like

from zarrfs.formats.codecs import inflate

# Compressors decoded here; any other codec decodes as numcodecs does, checked after.
BOUNDED_CODECS = frozenset({"blosc", "zlib", "gzip", "zstd", "lz4", "bz2", "lzma"})
# Of those, the ones libdeflate tries first (inflate.py).
_INFLATED = frozenset({"zlib", "gzip"})

# An xz or lzma-alone header asking for a larger dictionary is refused: liblzma
# allocates the whole dictionary up front, whatever the data. xz -9e needs 64 MiB.
LZMA_MEMLIMIT = 256 << 20

# Output asked of a streaming decompressor per call: when it goes into a caller's
# buffer, the copy needs no more than this besides.
_STEP = 1 << 20

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE = 0x184D2A50  # low four bits free
_ZSTD_BLOCK_MAX = 128 << 10
_TRUNCATED_ZLIB = "Error -5 while decompressing data: incomplete or truncated stream"
_TRUNCATED_STREAM = "Compressed data ended before the end-of-stream marker was reached"


def too_large(limit: int) -> ValueError:
    return ValueError(f"decodes to more than {limit} bytes")


def decompress(codec: Codec, data: Any, limit: int, out: np.ndarray | None = None) -> Any:
    """``codec.decode(data)``, but never more than ``limit`` bytes of it.

    ``out``, only for ``BOUNDED_CODECS``, is a uint8 buffer of exactly ``limit``
    bytes that the stream must fill: the result is then ``out`` (or a shorter view
    of it, which the caller finds to be the wrong size). Raises ``ValueError`` when
    the stream decodes to more than ``limit``, and whatever the codec raises on
    corrupt input, as numcodecs would.
    """
    codec_id = getattr(codec, "codec_id", None)
    if codec_id not in BOUNDED_CODECS:
        result = codec.decode(data)
        if ensure_ndarray_like(result).nbytes > limit:
            raise too_large(limit)
        return result
    view = _byte_view(data)
    if codec_id in _INFLATED:
        # libdeflate, twice zlib's speed, where it is certain to give what _zlib and
        # _gzip give; they decode whatever it hands back, errors and all
        result = inflate.inflate(view, limit, out, gzip=codec_id == "gzip")
        if result is not None:
            return result
    if codec_id in _STREAMS:
        sink = _Sink(limit, out)
        _STREAMS[codec_id](codec, view, sink)
        return sink.result()
    return _HEADERS[codec_id](codec, view, limit, out)


def _byte_view(data: Any) -> memoryview:
    try:
        return memoryview(data).cast("B")
    except TypeError:  # not C-contiguous, or not a plain buffer
        return memoryview(ensure_contiguous_ndarray(data)).cast("B")


class _Sink:
    """Where decoded pieces go, the caller's buffer or bytes gathered here; it
    refuses the piece that would take it past ``limit``."""

    def __init__(self, limit: int, out: np.ndarray | None) -> None:
        self.limit = limit
        self.size = 0
        self._array = out
        self._out = None if out is None else memoryview(out).cast("B")
        self._first = b""
        # from a second piece on: one growing buffer, not pieces and then their join
        self._gathered: bytearray | None = None

    def want(self) -> int:
        """``max_length`` for the next call: what still fits, or one byte at the
        limit, so that a stream going on past it shows it."""
        return min(self.limit - self.size, _STEP) or 1

    def write(self, piece: bytes) -> None:
        n = len(piece)
        if not n:
            return
        if self.size + n > self.limit:
            raise too_large(self.limit)
        if self._out is not None:
            self._out[self.size : self.size + n] = piece
        elif self._gathered is not None:
            self._gathered += piece
        elif not self._first:
            self._first = piece
        else:
            self._gathered = bytearray(self._first)
            self._gathered += piece
            self._first = b""
        self.size += n

    def truncate(self, size: int) -> None:
        """Drop what was written after ``size`` (a trailing stream numcodecs ignores)."""
        if self._gathered is not None:
            del self._gathered[size:]
        elif self._out is None:
            self._first = self._first[:size]
        self.size = size

    def result(self) -> Any:
        if self._array is not None:
            return self._array if self.size == self._array.nbytes else self._array[: self.size]
        return self._gathered if self._gathered is not None else self._first


# -- streams: zlib, gzip, bz2, lzma ----------------------------------------------------------


class _Decompressor(Protocol):
    eof: bool
    needs_input: bool
    unused_data: bytes

    def decompress(self, data: Any, max_length: int = ...) -> bytes: ...


def _inflate(d: Any, data: Any, sink: _Sink) -> bytes:
    """One zlib or gzip stream of ``data`` through ``d``; returns what follows it."""
    pending = data
    while not d.eof:
        piece = d.decompress(pending, sink.want())
        pending = d.unconsumed_tail
        if not piece and not pending and not d.eof:
            raise zlib.error(_TRUNCATED_ZLIB)
        sink.write(piece)
    return d.unused_data


def _drain(d: _Decompressor, data: Any, sink: _Sink) -> bytes | None:
    """One bz2 or lzma stream of ``data`` through ``d``; returns what follows it, or
    None when ``data`` ends before the stream does."""
    pending = data
    while not d.eof:
        if not pending and d.needs_input:
            return None
        piece = d.decompress(pending, sink.want())
        pending = b""
        sink.write(piece)
    return d.unused_data


def _zlib(codec: Codec, view: memoryview, sink: _Sink) -> None:
    # as zlib.decompress: one stream, whatever follows it ignored
    _inflate(zlib.decompressobj(zlib.MAX_WBITS), view, sink)


def _gzip(codec: Codec, view: memoryview, sink: _Sink) -> None:
    """gzip members as GzipFile reads them; a zlib stream too (z5 wrote those as "gzip")."""
    if not len(view):
        return  # GzipFile reads an empty file as empty
    # wbits 32 + 15: a gzip or a zlib header, whichever the stream has
    rest = _inflate(zlib.decompressobj(32 + zlib.MAX_WBITS), view, sink)
    if holds_zlib(view):
        return  # zlib.decompress, which read these before, ignores what follows
    while True:
        rest = rest.lstrip(b"\0")  # GzipFile allows zero padding after a member
        if not rest:
            return
        if rest[:2] != _GZIP_MAGIC:
            raise zlib.error("data after a gzip member is not another member")
        rest = _inflate(zlib.decompressobj(16 + zlib.MAX_WBITS), rest, sink)


def holds_zlib(data: Any) -> bool:
    """Whether a "gzip" chunk holds a zlib stream instead (as z5 wrote them)."""
    head = bytes(_byte_view(data)[:2])
    return bool(head) and head != _GZIP_MAGIC


def _streams(
    make: Callable[[], _Decompressor],
    view: memoryview,
    sink: _Sink,
    error: type[Exception],
    truncated: type[Exception],
    *,
    empty_ok: bool,
) -> None:
    """Streams one after another, as bz2.decompress and lzma.decompress read them:
    whatever follows the first stream and fails (``error``) is ignored; a stream
    that is cut short is an error, and so is no data at all unless ``empty_ok``."""
    rest: Any = view
    first = True
    while len(rest) or (first and not empty_ok):
        mark = sink.size
        try:
            ended = _drain(make(), rest, sink)
        except error:
            if first:
                raise
            sink.truncate(mark)
            return
        if ended is None:
            raise truncated(_TRUNCATED_STREAM)
        rest, first = ended, False


def _bz2(codec: Codec, view: memoryview, sink: _Sink) -> None:
    _streams(bz2.BZ2Decompressor, view, sink, OSError, ValueError, empty_ok=True)


def _lzma(codec: Codec, view: memoryview, sink: _Sink) -> None:
    fmt = codec.format  # type: ignore[attr-defined]
    filters = codec.filters  # type: ignore[attr-defined]
    # A raw stream has no header: its dictionary is the codec's, so that is checked;
    # the others name theirs, which the memory limit bounds (FORMAT_RAW takes none).
    memlimit = None if fmt == lzma.FORMAT_RAW else LZMA_MEMLIMIT
    if memlimit is None:
        for f in filters or ():
            if isinstance(f, dict) and int(f.get("dict_size", 0)) > LZMA_MEMLIMIT:
                raise ValueError(f"lzma dictionary of {f['dict_size']} bytes is too large")

    def make() -> _Decompressor:
        return lzma.LZMADecompressor(fmt, memlimit, filters)

    _streams(make, view, sink, lzma.LZMAError, lzma.LZMAError, empty_ok=False)


_STREAMS: dict[str, Callable[[Codec, memoryview, _Sink], None]] = {
    "zlib": _zlib,
    "gzip": _gzip,
    "bz2": _bz2,
    "lzma": _lzma,
}


# -- sizes in headers: zstd, lz4, blosc -----------------------------------------------------


def _target(out: np.ndarray | None, size: int) -> np.ndarray | None:
    """The part of ``out`` a stream of ``size`` bytes fills: numcodecs fills only
    the start of a larger ``out`` and returns all of it, stale tail included."""
    if out is None or size == out.nbytes:
        return out
    return out[:size]


def _decode(codec: Codec, view: memoryview, target: np.ndarray | None) -> Any:
    return codec.decode(view) if target is None else codec.decode(view, out=target)


def _lz4(codec: Codec, view: memoryview, limit: int, out: np.ndarray | None) -> Any:
    # numcodecs' LZ4 frames start with the decoded size, little-endian
    if len(view) < 4:
        return _decode(codec, view, out)  # numcodecs says "bad input data"
    size = int.from_bytes(view[:4], "little")
    if size > limit:
        raise too_large(limit)
    return _decode(codec, view, _target(out, size))


def _blosc(codec: Codec, view: memoryview, limit: int, out: np.ndarray | None) -> Any:
    """c-blosc trusts its header: a truncated frame would be read past its end and a
    lying one would make it allocate whatever the header says."""
    if len(view) < 16:
        raise ValueError(f"blosc frame of {len(view)} bytes is shorter than its header")
    nbytes = int.from_bytes(view[4:8], "little")
    cbytes = int.from_bytes(view[12:16], "little")
    # z5 pads its frames, so only a frame shorter than its header says is refused.
    if cbytes > len(view):
        raise ValueError(f"blosc header claims {cbytes} compressed bytes, frame has {len(view)}")
    if nbytes > limit:
        raise too_large(limit)
    if out is not None and nbytes != out.nbytes:
        raise ValueError(f"blosc header claims {nbytes} bytes, the chunk holds {out.nbytes}")
    return _decode(codec, view, out)


def _zstd(codec: Codec, view: memoryview, limit: int, out: np.ndarray | None) -> Any:
    total, bound = zstd_sizes(view, limit)
    if total is not None:
        # ZSTD_decompress into exactly ``total`` bytes: it cannot write past them
        return _decode(codec, view, _target(out, total))
    if out is not None:
        # Without a content size numcodecs decodes into all of ``out`` and requires
        # it filled exactly: bounded, and exactly what the chunk must be.
        return _decode(codec, view, out)
    if bound > limit:
        raise ValueError(
            f"zstd frames without a content size may decode to more than {limit} bytes"
        )
    return _decode(codec, view, None)  # streaming, growing only to the real size <= bound


def zstd_sizes(view: memoryview, limit: int) -> tuple[int | None, int]:
    """Walk the frames as ZSTD_findFrameCompressedSize does, without decoding:
    (the sum of their content sizes, None if a frame does not declare one; an
    upper bound of what they decode to, from their block headers).

    Raises ``ValueError`` on a malformed frame, and as soon as the declared sizes
    exceed ``limit``; stops early, with a bound over ``limit``, when blocks alone
    may exceed it.
    """
    n = len(view)
    total: int | None = 0
    declared = 0
    bound = 0
    pos = 0

    def need(count: int) -> None:
        if pos + count > n:
            raise ValueError("zstd frame is truncated")

    while pos < n:
        need(4)
        magic = int.from_bytes(view[pos : pos + 4], "little")
        if magic & ~0xF == _ZSTD_SKIPPABLE:
            need(8)
            pos += 8 + int.from_bytes(view[pos + 4 : pos + 8], "little")
            need(0)
            continue
        if magic != _ZSTD_MAGIC:
            raise ValueError("not a zstd frame")
        need(6)
        descriptor = view[pos + 4]
        pos += 5
        if descriptor & 0x08:
            raise ValueError("zstd frame header has its reserved bit set")
        single_segment = descriptor >> 5 & 1
        window = None  # a single-segment frame's window is its content
        if not single_segment:
            exponent, mantissa = view[pos] >> 3, view[pos] & 7
            base = 1 << (10 + exponent)
            window = base + (base >> 3) * mantissa
            pos += 1
        pos += (0, 1, 2, 4)[descriptor & 3]  # dictionary id
        size_field = (single_segment, 2, 4, 8)[descriptor >> 6]
        need(size_field)
        content = None
        if size_field:
            content = int.from_bytes(view[pos : pos + size_field], "little")
            content += 256 if size_field == 2 else 0
            pos += size_field
            declared += content
            if declared > limit:
                raise too_large(limit)
        block_max = min(window or content or 0, _ZSTD_BLOCK_MAX)
        frame_bound = 0
        last = 0
        while not last:
            need(3)
            header = int.from_bytes(view[pos : pos + 3], "little")
            last, kind, size = header & 1, header >> 1 & 3, header >> 3
            if kind == 3:
                raise ValueError("zstd block of the reserved type")
            pos += 3 + (1 if kind == 1 else size)  # an RLE block stores one byte
            need(0)
            frame_bound += block_max if kind == 2 else size
            if content is None and bound + frame_bound > limit:
                return None, bound + frame_bound
        pos += 4 * (descriptor >> 2 & 1)  # content checksum
        need(0)
        if content is None:
            total = None
            bound += frame_bound
        else:
            total = None if total is None else total + content
            bound += content
    return total, bound


_HEADERS: dict[str, Callable[[Codec, memoryview, int, np.ndarray | None], Any]] = {
    "zstd": _zstd,
    "lz4": _lz4,
    "blosc": _blosc,
}
