"""The codec pipeline: filters then compressor, every codec from numcodecs' registry.

Codecs are resolved lazily, on the first chunk that needs them, so an array whose
compressor numcodecs does not know still mounts: its metadata is shown, missing
chunks read as fill value, and a stored chunk is an EIO naming the codec.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import numcodecs
import numpy as np
from numcodecs.abc import Codec
from numcodecs.compat import ensure_bytes, ensure_ndarray_like

from zarrfs.formats import bounded
from zarrfs.formats.bounded import BOUNDED_CODECS, holds_zlib

log = logging.getLogger(__name__)


class CodecResolutionError(Exception):
    """numcodecs cannot build a codec from the configuration."""


class CodecPipeline:
    """Decode and encode chunks of one array: ``filters`` applied first when encoding."""

    def __init__(self, compressor: dict[str, Any] | None, filters: list[dict[str, Any]]) -> None:
        self.compressor_config = compressor
        self.filter_configs = list(filters)
        self._lock = threading.Lock()
        self._resolved: tuple[Codec | None, list[Codec]] | None = None
        self._warned_gzip = False

    def __repr__(self) -> str:
        return f"CodecPipeline({self.compressor_config!r}, {self.filter_configs!r})"

    def describe(self) -> str:
        parts = [_describe(cfg) for cfg in self.filter_configs]
        parts.append(_describe(self.compressor_config) if self.compressor_config else "none")
        return " -> ".join(parts)

    def _codecs(self) -> tuple[Codec | None, list[Codec]]:
        with self._lock:
            if self._resolved is None:
                try:
                    compressor = (
                        numcodecs.get_codec(dict(self.compressor_config))
                        if self.compressor_config
                        else None
                    )
                    filters = [numcodecs.get_codec(dict(cfg)) for cfg in self.filter_configs]
                except Exception as e:  # registry errors are ValueError, TypeError, ...
                    raise CodecResolutionError(f"cannot build codec: {e}") from e
                self._resolved = (compressor, filters)
            return self._resolved

    @property
    def decodes_into(self) -> bool:
        """Whether ``decode`` can write into a caller's buffer (``out``); never raises
        (a codec that cannot be built fails in ``decode``, as a chunk error)."""
        try:
            compressor, filters = self._codecs()
        except Exception:
            return False
        return not filters and getattr(compressor, "codec_id", None) in BOUNDED_CODECS

    def decode(
        self,
        data: bytes,
        dtype: np.dtype,
        shape: tuple[int, ...],
        order: str,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """Decode one stored chunk into an array of the chunk shape.

        With ``out`` (a uint8 buffer of the chunk's size, when ``decodes_into``) the
        result is a view of it. No step produces more than the chunk's size, or
        ``size_bound`` of it when filters make the sizes in between unknown.
        Raises ``CodecResolutionError`` or ``ValueError`` (wrong size, too large) or
        whatever the codec raises on corrupt input; the caller turns them into a
        ChunkError.
        """
        compressor, filters = self._codecs()
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        limit = size_bound(expected) if filters else expected
        chunk: Any = data
        if compressor is not None:
            codec_id = getattr(compressor, "codec_id", None)
            target = None
            if not filters and codec_id in BOUNDED_CODECS:
                usable = out is not None and out.nbytes == expected and out.dtype == np.uint8
                target = out if usable else np.empty(expected, dtype=np.uint8)
            chunk = bounded.decompress(compressor, data, limit, target)
            if codec_id == "gzip" and not self._warned_gzip and holds_zlib(data):
                # z5 (2019) wrote zlib streams under the id "gzip"; accepted, said once.
                self._warned_gzip = True
                log.warning("compressor 'gzip' holds zlib streams (z5 quirk); decoding as zlib")
        for f in reversed(filters):
            chunk = bounded.decompress(f, chunk, limit)  # a filter may be a compressor too
        arr = ensure_ndarray_like(chunk)
        raw = arr.reshape(-1, order="A").view(np.uint8)
        if raw.nbytes != expected:
            raise ValueError(f"decoded {raw.nbytes} bytes, expected {expected}")
        return raw.view(dtype).reshape(shape, order=order)

    def encode(self, chunk: np.ndarray) -> bytes:
        compressor, filters = self._codecs()
        data: Any = chunk
        for f in filters:
            data = f.encode(data)
        if compressor is not None:
            data = compressor.encode(data)
        return ensure_bytes(data)


def size_bound(nbytes: int) -> int:
    """At most this many bytes for anything belonging to a chunk of ``nbytes`` whose
    exact size is unknown: its stored value, or what a filtered chunk's compressor
    and each filter decode to. Generous (real codecs and filters stay far below
    it), so that only hostile or broken values meet it."""
    return 8 * nbytes + (1 << 20)


def _describe(config: dict[str, Any] | None) -> str:
    if not config:
        return "none"
    params = ",".join(f"{k}={v}" for k, v in sorted(config.items()) if k != "id")
    return f"{config.get('id')}({params})"
