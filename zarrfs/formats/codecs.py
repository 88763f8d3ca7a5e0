"""The codec pipeline: filters then compressor, every codec from numcodecs' registry.

Codecs are resolved lazily, on the first chunk that needs them, so an array whose
compressor numcodecs does not know still mounts: its metadata is shown, missing
chunks read as fill value, and a stored chunk is an EIO naming the codec.
"""

from __future__ import annotations

import logging
import threading
import zlib
from typing import Any

import numcodecs
import numpy as np
from numcodecs.abc import Codec
from numcodecs.compat import ensure_bytes, ensure_ndarray_like

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
        return not filters and getattr(compressor, "codec_id", None) in _OUT_CODECS

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
        result is a view of it, except where a codec quirk needs a copy.
        Raises ``CodecResolutionError`` or ``ValueError`` (wrong size) or whatever the
        codec raises on corrupt input; the caller turns them into a ChunkError.
        """
        compressor, filters = self._codecs()
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        chunk: Any = data
        if compressor is not None:
            if getattr(compressor, "codec_id", None) == "blosc":
                # filters may change the size, so only an unfiltered chunk's nbytes is known
                _check_blosc_header(data, None if filters else expected)
            use_out = out is not None and out.nbytes == expected and self.decodes_into
            chunk = self._decompress(compressor, data, out if use_out else None)
        for f in reversed(filters):
            chunk = f.decode(chunk)
        arr = ensure_ndarray_like(chunk)
        raw = arr.reshape(-1, order="A").view(np.uint8)
        if raw.nbytes != expected:
            raise ValueError(f"decoded {raw.nbytes} bytes, expected {expected}")
        return raw.view(dtype).reshape(shape, order=order)

    def _decompress(self, compressor: Codec, data: bytes, out: np.ndarray | None) -> Any:
        try:
            return compressor.decode(data, out=out) if out is not None else compressor.decode(data)
        except Exception:
            # z5 (2019) wrote zlib streams under the id "gzip"; accept them, say so once.
            if getattr(compressor, "codec_id", None) != "gzip":
                raise
            try:
                out = zlib.decompress(ensure_bytes(data))
            except zlib.error:
                raise
            if not self._warned_gzip:
                self._warned_gzip = True
                log.warning("compressor 'gzip' holds zlib streams (z5 quirk); decoding as zlib")
            return out

    def encode(self, chunk: np.ndarray) -> bytes:
        compressor, filters = self._codecs()
        data: Any = chunk
        for f in filters:
            data = f.encode(data)
        if compressor is not None:
            data = compressor.encode(data)
        return ensure_bytes(data)


# numcodecs compressors known to fill ``out`` exactly (others are used without it).
_OUT_CODECS = frozenset({"blosc", "zlib", "gzip", "zstd", "lz4", "bz2", "lzma"})


def _check_blosc_header(data: bytes, expected: int | None) -> None:
    """Refuse a blosc frame whose header disagrees with its length or the chunk size.

    c-blosc trusts the header: a truncated frame would be read past its end and a
    lying one would make it allocate whatever the header says.
    """
    view = memoryview(data).cast("B")
    if len(view) < 16:
        raise ValueError(f"blosc frame of {len(view)} bytes is shorter than its header")
    nbytes = int.from_bytes(view[4:8], "little")
    cbytes = int.from_bytes(view[12:16], "little")
    # z5 pads its frames, so only a frame shorter than its header says is refused.
    if cbytes > len(view):
        raise ValueError(f"blosc header claims {cbytes} compressed bytes, frame has {len(view)}")
    if expected is not None and nbytes != expected:
        raise ValueError(f"blosc header claims {nbytes} bytes, the chunk holds {expected}")


def _describe(config: dict[str, Any] | None) -> str:
    if not config:
        return "none"
    params = ",".join(f"{k}={v}" for k, v in sorted(config.items()) if k != "id")
    return f"{config.get('id')}({params})"
