"""The codec chain of one array, for every format (pure, no I/O).

A chain is array->array stages (a transpose, numcodecs filters that keep the
dtype), exactly one array->bytes stage (``bytes``: the elements in a byte order;
or a codec that codes whole arrays itself, such as sharding), then bytes->bytes
stages (compressors, checksums, numcodecs filters that work on buffers). Zarr v3
spells its chain out (``v3_codecs.parse_codecs``); v2, v1 and pre-v1 map onto one
(``codecs.CodecPipeline``): ``order: "F"`` is a transpose, the filters and the
compressor are bytes->bytes stages. Every codec object comes from numcodecs'
registry. Decompression goes through ``bounded``, so that no stage yields more
than the chunk, or ``size_bound`` of it where the sizes in between are unknown.

Decoded chunks have the chunk's shape and the chain's dtype (v3: the natural
little-endian one; v2: the declared one, byte order included); their memory
layout is C, or F for a transposed chain: ``array.raw`` is assembled from them
by index, not by memory order.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

import numcodecs
import numpy as np
from numcodecs.abc import Codec
from numcodecs.compat import ensure_bytes, ensure_ndarray_like

from zarrfs.errors import UnsupportedError
from zarrfs.formats.codecs import bounded
from zarrfs.formats.codecs.bounded import BOUNDED_CODECS, holds_zlib
from zarrfs.formats.limits import clip

log = logging.getLogger(__name__)


def _reordered(stored: np.dtype, dtype: np.dtype) -> bool:
    """``dtype`` is ``stored`` in another byte order (the same kind and size)."""
    return stored.newbyteorder("=") == dtype.newbyteorder("=")


# Each decoding thread's buffer to decode elements into before they are turned
# round (``CodecChain.decode``), kept for the next chunk up to this size.
SCRATCH_KEPT = 16 << 20
_scratches = threading.local()


def _scratch(nbytes: int) -> np.ndarray:
    """A uint8 buffer of ``nbytes`` of this thread's, reused while no larger than
    SCRATCH_KEPT (fresh memory costs a page fault per 4 KiB)."""
    kept = getattr(_scratches, "buffer", None)
    if kept is not None and kept.nbytes == nbytes:
        return kept
    buffer = np.empty(nbytes, dtype=np.uint8)
    if nbytes <= SCRATCH_KEPT:
        _scratches.buffer = buffer
    return buffer


def size_bound(nbytes: int) -> int:
    """At most this many bytes for anything belonging to a chunk of ``nbytes`` whose
    exact size is unknown: its stored value, or what a filtered chunk's compressor
    and each filter decode to. Generous (real codecs and filters stay far below
    it), so that only hostile or broken values meet it."""
    return 8 * nbytes + (1 << 20)


# ------------------------------------------------------------------ stages


@dataclass(frozen=True)
class Transpose:
    """array->array: ``order[i]`` is the decoded axis stored as axis ``i``."""

    order: tuple[int, ...]

    def encoded_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(shape[i] for i in self.order)

    def encode(self, arr: np.ndarray) -> np.ndarray:
        return arr.transpose(self.order)

    def decode(self, arr: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        return arr.transpose(np.argsort(self.order))

    def describe(self) -> str:
        return f"transpose(order={list(self.order)})"


@dataclass(frozen=True)
class ArrayFilter:
    """array->array ``numcodecs.<id>`` filter that keeps dtype and element count."""

    name: str
    codec: Codec

    def encoded_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return shape

    def encode(self, arr: np.ndarray) -> np.ndarray:
        out = ensure_ndarray_like(self.codec.encode(np.ascontiguousarray(arr)))
        return np.asarray(out).reshape(arr.shape)

    def decode(self, arr: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        out = ensure_ndarray_like(self.codec.decode(np.ascontiguousarray(arr)))
        return np.asarray(out).reshape(shape)

    def describe(self) -> str:
        return describe_codec(self.name, self.codec.get_config())


@dataclass(frozen=True)
class BytesSerializer:
    """The ``bytes`` array->bytes codec; ``endian`` None for byte-order-free types."""

    endian: str | None

    def describe(self) -> str:
        return f"bytes(endian={self.endian})" if self.endian else "bytes"


@dataclass(frozen=True)
class ShardingMarker:
    """``sharding_indexed``, recognised only: the shard layer parses and decodes it
    (``shards.parse_sharding_config(configuration)``)."""

    configuration: dict[str, Any]

    def describe(self) -> str:
        inner = self.configuration.get("chunk_shape")
        return f"sharding_indexed(chunk_shape={clip(repr(inner), 80)})"


@dataclass(frozen=True)
class BytesStage:
    """A bytes->bytes codec built by numcodecs' registry."""

    name: str
    codec: Codec
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def codec_id(self) -> str | None:
        return getattr(self.codec, "codec_id", None)

    def describe(self) -> str:
        return describe_codec(self.name, self.config)


class CodecResolutionError(Exception):
    """numcodecs cannot build a codec from the configuration."""


class LazyStage:
    """A bytes->bytes stage whose codec numcodecs builds on first use (v2, v1 and
    pre-v1 name theirs as numcodecs configurations): an array whose codec
    numcodecs does not know still mounts, its metadata shown and its missing
    chunks read as fill value; a stored chunk fails, naming the codec."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = dict(config)
        self.name = str(config.get("id"))
        self._lock = threading.Lock()
        self._codec: Codec | None = None
        self.said: set[str] = set()  # quirks logged once (shared by all its chains)

    @property
    def codec(self) -> Codec:
        with self._lock:
            if self._codec is None:
                try:
                    self._codec = numcodecs.get_codec(dict(self.config))
                except Exception as e:  # registry errors are ValueError, TypeError, ...
                    raise CodecResolutionError(f"cannot build codec: {e}") from e
            return self._codec

    @property
    def codec_id(self) -> str | None:
        try:
            return getattr(self.codec, "codec_id", None)
        except CodecResolutionError:
            return None

    def describe(self) -> str:
        return describe_codec(self.name, self.config)


ArrayStage = Transpose | ArrayFilter


@runtime_checkable
class ArrayBytesCodec(Protocol):
    """An array->bytes stage that codes whole arrays itself (sharding, made one by
    ``v3_sharding.with_sharding``)."""

    def describe(self) -> str: ...

    def max_encoded(self, shape: tuple[int, ...]) -> int: ...

    def decode_array(self, data: bytes | memoryview, shape: tuple[int, ...]) -> np.ndarray: ...

    def encode_array(self, arr: np.ndarray) -> bytes: ...


@dataclass(frozen=True)
class Undecodable:
    """The array->bytes stage of an array shown as metadata only: its chunks are
    never decoded, and saying why is all this stage does."""

    reason: str

    def describe(self) -> str:
        return f"undecodable ({self.reason})"

    def max_encoded(self, shape: tuple[int, ...]) -> int:
        return 0

    def decode_array(self, data: bytes | memoryview, shape: tuple[int, ...]) -> np.ndarray:
        raise UnsupportedError(self.reason)

    def encode_array(self, arr: np.ndarray) -> bytes:
        raise UnsupportedError(self.reason)


def undecodable(dtype: np.dtype, chunk_shape: tuple[int, ...], reason: str) -> CodecChain:
    return CodecChain(np.dtype(dtype), tuple(chunk_shape), (), Undecodable(reason), ())


# ------------------------------------------------------------------- chain


@dataclass(frozen=True)
class CodecChain:
    dtype: np.dtype
    chunk_shape: tuple[int, ...]
    array_array: tuple[ArrayStage, ...]
    array_bytes: BytesSerializer | ShardingMarker | ArrayBytesCodec
    bytes_bytes: tuple[BytesStage | LazyStage, ...]
    # Unknown codecs marked must_understand: false, skipped as the spec allows.
    ignored: tuple[str, ...] = ()
    # What has been said about this chain's chunks once (the z5 gzip quirk).
    _said: set[str] = field(default_factory=set, compare=False, repr=False)
    # The stored elements' dtype where a chain decodes them to another byte order
    # than its ``bytes`` stage says (``serving``); None: as that stage says.
    stored_as: np.dtype | None = None

    def serving(self, dtype: np.dtype) -> CodecChain:
        """This chain decoding the same stored bytes to ``dtype``: the same elements
        in another byte order (a view that wants them big-endian)."""
        dtype = np.dtype(dtype)
        if not _reordered(self.stored_dtype, dtype):
            raise ValueError(f"{dtype} is not {self.stored_dtype} in another byte order")
        return replace(self, dtype=dtype, stored_as=self.stored_dtype)

    @property
    def decodes_into(self) -> bool:
        """Whether ``decode`` can decompress into a caller's buffer (``out``):
        one compressor that ``bounded`` decodes, no filter, no byte swap. Never
        raises (a codec that cannot be built fails in ``decode``)."""
        if not isinstance(self.array_bytes, BytesSerializer):
            return False
        if self.stored_dtype != self.dtype and not _reordered(self.stored_dtype, self.dtype):
            return False
        if len(self.bytes_bytes) != 1 or not all(
            isinstance(s, Transpose) for s in self.array_array
        ):
            return False
        return self.bytes_bytes[0].codec_id in BOUNDED_CODECS

    @property
    def sharding(self) -> ShardingMarker | None:
        return self.array_bytes if isinstance(self.array_bytes, ShardingMarker) else None

    @property
    def stored_dtype(self) -> np.dtype:
        """The dtype of the stored elements (the ``bytes`` codec's byte order)."""
        if self.stored_as is not None:
            return self.stored_as
        endian = getattr(self.array_bytes, "endian", None)
        return self.dtype.newbyteorder(">") if endian == "big" else self.dtype

    def describe(self) -> str:
        parts = [s.describe() for s in self.array_array]
        parts.append(self.array_bytes.describe())
        parts.extend(s.describe() for s in self.bytes_bytes)
        text = " -> ".join(parts)
        if self.ignored:
            text += f" (ignored: {', '.join(self.ignored)})"
        return text

    def encoded_shape(self) -> tuple[int, ...]:
        """The shape a chunk has when it reaches the array->bytes stage."""
        return self._shapes(None)[1][-1]

    def _shapes(self, out_shape: Any) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
        """The chunk shape and the shape entering each array->array stage."""
        shape = self.chunk_shape if out_shape is None else tuple(int(n) for n in out_shape)
        if len(shape) != len(self.chunk_shape):
            raise ValueError(f"chunk shape {shape} has not {len(self.chunk_shape)} dimensions")
        chunk, shapes = shape, []
        for stage in self.array_array:
            shapes.append(shape)
            shape = stage.encoded_shape(shape)
        return chunk, [*shapes, shape]

    def decode(self, data: Any, out_shape: Any = None, out: np.ndarray | None = None) -> np.ndarray:
        """One stored chunk as an array of ``out_shape`` (default: the chunk shape)
        and the chain's dtype. With ``out`` (a uint8 buffer of the chunk's size,
        when ``decodes_into``) the result is a view of it. ValueError when the data
        is corrupt or of the wrong size (also a checksum mismatch);
        CodecResolutionError, or whatever a codec raises, otherwise."""
        if self.sharding is not None:
            raise UnsupportedError("sharding_indexed chunks are decoded by the shard layer")
        shape, shapes = self._shapes(out_shape)
        stage = self.array_bytes
        if isinstance(stage, ArrayBytesCodec):
            encoded = self.decode_bytes(data, stage.max_encoded(shapes[-1]), exact=False)
            arr = stage.decode_array(encoded, shapes[-1])
            return self._undo_array_stages(arr, shapes)
        expected = math.prod(shape) * self.dtype.itemsize
        turned = self.stored_dtype != self.dtype
        # Elements turned round are decoded beside ``out`` and turned into it in one
        # pass, while they are in the CPU's cache (in place, numpy would copy each
        # piece aside first).
        into = _scratch(expected) if turned and out is not None else out
        raw = self.decode_bytes(data, expected, out=into)
        if len(raw) != expected:
            raise ValueError(f"decoded {len(raw)} bytes, expected {expected}")
        arr = raw.view(self.stored_dtype).reshape(shapes[-1])
        if turned:
            usable = out is not None and out.nbytes == expected and out.dtype == np.uint8
            if usable and not np.may_share_memory(raw, out):
                converted = out.view(self.dtype).reshape(shapes[-1])
                np.copyto(converted, arr)
                arr = converted
            else:
                arr = arr.astype(self.dtype)
        return self._undo_array_stages(arr, shapes)

    def _undo_array_stages(self, arr: np.ndarray, shapes: list[tuple[int, ...]]) -> np.ndarray:
        for stage, entering in zip(reversed(self.array_array), reversed(shapes[:-1]), strict=True):
            arr = stage.decode(arr, entering)
        # A transpose back leaves an F-ordered view, which is kept (v2's order "F"
        # chunks decode without a copy); a partial permutation is copied to C.
        # Not ascontiguousarray: it turns a 0-d chunk into 1-d.
        if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
            arr = arr.copy(order="C")
        return arr

    def decode_bytes(
        self, data: Any, limit: int, *, exact: bool = True, out: np.ndarray | None = None
    ) -> np.ndarray:
        """Undo the bytes->bytes stages, outermost first. The innermost yields at
        most ``limit`` bytes (into a buffer of exactly ``limit`` when ``exact``:
        ``out`` if it is one); the ones before it, whose sizes nothing records, at
        most ``size_bound``. Also for sharding: a whole shard's bytes."""
        chunk: Any = data
        n = len(self.bytes_bytes)
        for i, stage in enumerate(reversed(self.bytes_bytes)):
            innermost = i == n - 1
            stage_limit = limit if innermost else size_bound(limit)
            target = None
            codec_id = stage.codec_id
            if innermost and exact and codec_id in BOUNDED_CODECS:
                usable = out is not None and out.nbytes == limit and out.dtype == np.uint8
                target = out if usable else np.empty(limit, dtype=np.uint8)
            said = stage.said if isinstance(stage, LazyStage) else self._said
            if codec_id == "gzip" and "gzip" not in said and holds_zlib(chunk):
                # z5 (2019) wrote zlib streams under the id "gzip"; accepted, said once.
                said.add("gzip")
                log.warning("compressor 'gzip' holds zlib streams (z5 quirk); decoding as zlib")
            try:
                chunk = bounded.decompress(stage.codec, chunk, stage_limit, target)
            except RuntimeError as e:
                # numcodecs' checksum codecs raise RuntimeError on a mismatch
                raise ValueError(f"{stage.name}: {e}") from e
        if isinstance(chunk, np.ndarray):
            # in memory order: a view of ``out`` stays one (its base is ``out``)
            flat = chunk.reshape(-1, order="A").view(np.uint8)
        else:
            flat = np.frombuffer(memoryview(ensure_ndarray_like(chunk)).cast("B"), np.uint8)
        if len(flat) > limit:
            raise bounded.too_large(limit)
        return flat

    def encode(self, chunk: np.ndarray) -> bytes:
        """The stored bytes of one chunk (its shape; dtype must be the chunk's)."""
        if self.sharding is not None:
            raise UnsupportedError("sharding_indexed chunks are encoded by the shard layer")
        arr = np.asarray(chunk)
        if arr.dtype.newbyteorder("<") != self.dtype.newbyteorder("<"):
            raise ValueError(f"chunk dtype {arr.dtype} is not the array's {self.dtype}")
        self._shapes(arr.shape)  # dimension check
        arr = arr.astype(self.dtype, copy=False)
        for stage in self.array_array:
            arr = stage.encode(arr)
        if isinstance(self.array_bytes, ArrayBytesCodec):
            return self.encode_bytes(self.array_bytes.encode_array(arr))
        # Typed, not bytes: a compressor without a typesize (v2's blosc) shuffles
        # by the buffer's item size; and no copy into bytes first.
        stored = np.ascontiguousarray(arr, dtype=self.stored_dtype)
        return self.encode_bytes(stored) if self.bytes_bytes else stored.tobytes()

    def encode_bytes(self, data: Any) -> bytes:
        for stage in self.bytes_bytes:
            data = stage.codec.encode(data)
        return ensure_bytes(data)


def describe_codec(name: str, config: dict[str, Any]) -> str:
    params = ",".join(f"{k}={v}" for k, v in sorted(config.items()) if k != "id")
    return clip(f"{name}({params})" if params else name, 200)
