"""v2, v1 and pre-v1 codecs (filters, then a compressor, as numcodecs
configurations) mapped onto the one codec chain every format uses (chain.py):
``order: "F"`` becomes a transpose, the filters and the compressor bytes->bytes
stages, each built by numcodecs' registry on first use (``LazyStage``), so an
array whose compressor numcodecs does not know still mounts: its metadata is
shown, missing chunks read as fill value, and a stored chunk is an EIO naming
the codec.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zarrfs.formats.codecs.chain import (
    BytesSerializer,
    CodecChain,
    CodecResolutionError,
    LazyStage,
    Transpose,
    size_bound,
)

__all__ = ["CodecPipeline", "CodecResolutionError", "size_bound"]


class CodecPipeline:
    """The codec configuration of a v2-style array: ``filters`` applied first when
    encoding, then ``compressor``. ``chain`` is what its chunks go through."""

    def __init__(self, compressor: dict[str, Any] | None, filters: list[dict[str, Any]]) -> None:
        self.compressor_config = compressor
        self.filter_configs = list(filters)
        # One set of stages for every chain of this configuration: a codec is
        # built once, whatever the chunk geometry.
        configs = [*self.filter_configs, *([compressor] if compressor else [])]
        self._stages = tuple(LazyStage(c) for c in configs)

    def __repr__(self) -> str:
        return f"CodecPipeline({self.compressor_config!r}, {self.filter_configs!r})"

    def chain(self, dtype: np.dtype, shape: tuple[int, ...], order: str) -> CodecChain:
        """The chain of chunks of ``shape`` and ``dtype`` (byte order kept) laid
        out in ``order``."""
        transpose = order == "F" and len(shape) > 1
        array_array = (Transpose(tuple(reversed(range(len(shape))))),) if transpose else ()
        return CodecChain(
            np.dtype(dtype), tuple(shape), array_array, BytesSerializer(None), self._stages
        )

    def describe(self) -> str:
        parts = [stage.describe() for stage in self._stages]
        return " -> ".join(parts) if self.compressor_config else " -> ".join([*parts, "none"])

    # -- for callers that keep the geometry apart (tools, tests) ------------------

    def decode(
        self,
        data: bytes,
        dtype: np.dtype,
        shape: tuple[int, ...],
        order: str,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """``chain(dtype, shape, order).decode(data, out=out)``."""
        return self.chain(dtype, shape, order).decode(data, out=out)

    def encode(self, chunk: np.ndarray) -> bytes:
        """A chunk flattened in its memory order, as v2 stores it."""
        flat = np.asarray(chunk).reshape(-1, order="A")
        return self.chain(flat.dtype, flat.shape, "C").encode(flat)

    @property
    def decodes_into(self) -> bool:
        return self.chain(np.dtype("u1"), (1,), "C").decodes_into
