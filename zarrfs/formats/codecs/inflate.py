"""zlib and gzip chunks inflated by libdeflate, or handed back when not certain.

bounded.py's reference decoder streams through ``zlib.decompressobj``; libdeflate
decodes the same streams 1.5 to 2.3 times as fast, but only as whole buffers: it is
given all of the output space up front and fails with INSUFFICIENT_SPACE as soon as
the stream would go past it. A chunk's decoded size is known (``limit``, and ``out`` is
a buffer of exactly that size), so that suits it, and it bounds a bomb for free.

The PyPI package ``deflate`` wraps libdeflate, but its Python functions neither
decode into a caller's buffer nor say how much input the stream took, which is what
tells one gzip member from a member followed by more. Its extension module links
libdeflate statically and exports libdeflate's C API, so the ``*_decompress_ex``
functions are called through ctypes, which releases the GIL for the call. Should
another build of the package not export them, ``AVAILABLE`` is False and every chunk
goes the reference way.

``inflate`` returns the decoded chunk only when it is what the reference gives;
otherwise None, and the caller runs the reference decoder from the start, which then
produces today's result or today's error with its exact text. It is certain when:

- zlib (or a zlib stream labelled gzip, as z5 wrote them): libdeflate decoded one
  stream from the start of the data; what follows is ignored, as zlib.decompress
  does;
- gzip: each member decoded, and what follows each is zero padding, another member
  (``1f 8b``) or nothing, as GzipFile reads them.

Anything else is handed back: a libdeflate failure of any kind (corrupt, truncated,
too large), bytes after a gzip member that are not a member, a gzip header with a
header CRC (libdeflate skips it, zlib checks it), empty data, an ``out`` that is not
a plain uint8 buffer of ``limit`` bytes.

Where both decoders accept a stream they produce the same bytes (DEFLATE decodes one
way, and both check the Adler-32 or CRC-32 and size trailers). libdeflate accepts a
few malformed streams zlib refuses, none of which any encoder writes: the
length/literal symbols 286-287 and distance symbols 30-31, dynamic headers counting
more than 286 or 30 of them, the unused codeword of a one-codeword code, and a match
with a distance code of no codewords. Such a stream with a matching checksum has to
be made by hand, and decodes here to what those symbols mean to libdeflate instead of
failing; it stays within ``limit`` all the same (test_fast_inflate.py shows one).
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

_GZIP_MAGIC = b"\x1f\x8b"
_FHCRC = 0x02  # gzip FLG bit: a CRC-16 of the header follows it
_SUCCESS = 0  # enum libdeflate_result; BAD_DATA, SHORT_OUTPUT, INSUFFICIENT_SPACE follow

# Without ``out`` the whole ``limit`` is allocated for libdeflate to write into. For
# a chunk that is its size; for a loose bound (codecs.size_bound: 8 x + 1 MiB) of a
# very large chunk the reference, which grows only to what the stream yields, is
# the better trade.
SCRATCH_MAX = 256 << 20

_size_t_p = ctypes.POINTER(ctypes.c_size_t)


class _Lib:
    """libdeflate's decompression functions, as the ``deflate`` package exports them."""

    def __init__(self, path: str) -> None:
        lib = ctypes.CDLL(path)  # CDLL, not PyDLL: calls release the GIL
        self.alloc = lib.libdeflate_alloc_decompressor
        self.alloc.restype = ctypes.c_void_p
        self.alloc.argtypes = []
        self.free = lib.libdeflate_free_decompressor
        self.free.restype = None
        self.free.argtypes = [ctypes.c_void_p]
        self.zlib = lib.libdeflate_zlib_decompress_ex
        self.gzip = lib.libdeflate_gzip_decompress_ex
        for fn in (self.zlib, self.gzip):
            fn.restype = ctypes.c_int
            fn.argtypes = [
                ctypes.c_void_p,  # decompressor
                ctypes.c_void_p,  # in
                ctypes.c_size_t,  # in_nbytes
                ctypes.c_void_p,  # out
                ctypes.c_size_t,  # out_nbytes_avail
                _size_t_p,  # actual_in_nbytes_ret
                _size_t_p,  # actual_out_nbytes_ret
            ]


def _load() -> _Lib | None:
    try:
        from deflate import _deflate

        return _Lib(_deflate.__file__)
    except (ImportError, OSError, AttributeError):  # not installed, or a build without them
        return None


_LIB = _load()
AVAILABLE = _LIB is not None


class _Decompressor:
    """A libdeflate decompressor (its decode tables, about 10 KiB); one per thread,
    as one must not decode two streams at once."""

    def __init__(self, lib: _Lib) -> None:
        self._free = lib.free
        self.handle: int | None = lib.alloc()
        if not self.handle:
            raise MemoryError("libdeflate_alloc_decompressor failed")

    def __del__(self) -> None:
        if self.handle:
            self._free(self.handle)
            self.handle = None


_local = threading.local()


def _decompressor(lib: _Lib) -> int:
    d = getattr(_local, "decompressor", None)
    if d is None:
        d = _local.decompressor = _Decompressor(lib)
    return d.handle


def inflate(view: memoryview, limit: int, out: np.ndarray | None, *, gzip: bool) -> Any | None:
    """``view`` decoded as bounded.py's ``_zlib`` (or ``_gzip`` when ``gzip``) would
    decode it into a ``_Sink(limit, out)``: ``out`` or a view of its start when ``out``
    is given, else bytes. None when that is not certain; then nothing is promised
    about ``out``'s contents."""
    lib = _LIB
    if lib is None or not len(view):
        return None  # an empty chunk: the reference knows what it means, cheaply
    if out is not None:
        plain = out.dtype == np.uint8 and out.flags.c_contiguous and out.flags.writeable
        if not plain or out.nbytes != limit:
            return None
        target = out
    elif limit > SCRATCH_MAX:
        return None
    else:
        target = np.empty(limit, np.uint8)
    source = np.frombuffer(view, np.uint8)
    d = _decompressor(lib)
    if gzip and bytes(view[:2]) == _GZIP_MAGIC:
        size = _members(lib, d, view, source, target)
    else:
        # zlib, or a zlib stream labelled gzip: whatever follows the stream is ignored
        step = _stream(lib.zlib, d, source, 0, target, 0)
        size = None if step is None else step[1]
    if size is None:
        return None
    if out is not None:
        return out if size == limit else out[:size]
    return target[:size].tobytes()


def _stream(
    fn: Any, d: int, source: np.ndarray, pos: int, target: np.ndarray, size: int
) -> tuple[int, int] | None:
    """One stream from ``source[pos:]`` into ``target[size:]``: where the input and
    the output then are, or None when libdeflate fails."""
    taken = ctypes.c_size_t()
    made = ctypes.c_size_t()
    result = fn(
        d,
        source.ctypes.data + pos,
        len(source) - pos,
        target.ctypes.data + size,
        len(target) - size,
        ctypes.byref(taken),
        ctypes.byref(made),
    )
    if result != _SUCCESS:
        return None
    return pos + taken.value, size + made.value


def _members(
    lib: _Lib, d: int, view: memoryview, source: np.ndarray, target: np.ndarray
) -> int | None:
    """gzip members as bounded._gzip reads them; the size decoded, or None."""
    n = len(view)
    pos = size = 0
    while True:
        if n - pos > 3 and view[pos + 3] & _FHCRC:
            return None  # zlib checks the header's CRC-16, libdeflate skips it
        step = _stream(lib.gzip, d, source, pos, target, size)
        if step is None:
            return None
        pos, size = _skip_zeros(view, step[0]), step[1]
        if pos == n:
            return size
        if bytes(view[pos : pos + 2]) != _GZIP_MAGIC:
            return None  # the reference raises its error for what follows


def _skip_zeros(view: memoryview, pos: int) -> int:
    """Past the zero padding GzipFile allows after a member."""
    n = len(view)
    while pos < n:
        block = bytes(view[pos : pos + 65536])
        kept = len(block.lstrip(b"\0"))
        pos += len(block) - kept
        if kept:
            break
    return pos
