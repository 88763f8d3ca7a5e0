"""One metadata model for every Zarr format version."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from zarrfs.formats.codecs import CodecPipeline
from zarrfs.formats.layout import Index, chunk_count


@dataclass(frozen=True)
class ArrayMeta:
    """Everything zarrfs needs to know about one array, whatever format it came from.

    ``fill_value`` is the bytes of one element in ``dtype`` (byte order included), or
    ``None`` for a ``null`` fill value, which reads as zero bytes. ``chunk_keys``
    maps a chunk index to the store keys that may hold it, most likely first (more
    than one only for legacy stores that do not record their key separator).
    ``unsupported`` says why the array has no flat-file view, or is ``None``.
    """

    path: str
    zarr_format: int
    shape: Index
    chunks: Index
    dtype: np.dtype
    order: str
    fill_value: bytes | None
    codecs: CodecPipeline
    chunk_keys: Callable[[Index], list[str]]
    documents: tuple[str, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    dimension_names: tuple[str | None, ...] | None = None
    unsupported: str | None = None
    # store key → chunk index, the inverse of chunk_keys (None: not a chunk key)
    chunk_index: Callable[[str], Index | None] = field(default=lambda key: None, repr=False)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize

    @property
    def chunk_nbytes(self) -> int:
        return math.prod(self.chunks) * self.itemsize

    @property
    def n_chunks(self) -> int:
        return chunk_count(self.shape, self.chunks)

    @functools.cached_property
    def fill_bytes(self) -> bytes:
        """One element of fill as stored bytes; a null fill value is zero bytes."""
        return self.fill_value if self.fill_value is not None else bytes(self.itemsize)

    @property
    def display_name(self) -> str:
        return self.path or "/"


@dataclass(frozen=True)
class GroupMeta:
    path: str
    zarr_format: int
    documents: tuple[str, ...]
    attrs: dict[str, Any] = field(default_factory=dict)


NodeMeta = ArrayMeta | GroupMeta


def _is_index(text: str) -> bool:
    """A chunk index as writers format it: ASCII digits, no leading zero ("01" is no key)."""
    return text.isascii() and text.isdigit() and (text == "0" or text[0] != "0")


def chunk_key_parser(
    prefix: str, separators: Sequence[str], suffix: str, ndim: int
) -> Callable[[str], Index | None]:
    """The inverse of a chunk-key encoding: "<prefix>/<i><sep><j><suffix>" → (i, j)."""
    head = f"{prefix}/" if prefix else ""

    def parse(key: str) -> Index | None:
        if not key.startswith(head) or not key.endswith(suffix):
            return None
        body = key[len(head) : len(key) - len(suffix)]
        if ndim == 0:
            return () if body == "0" else None
        for separator in separators:
            parts = body.split(separator)
            if len(parts) == ndim and all(_is_index(p) for p in parts):
                return tuple(int(p) for p in parts)
        return None

    return parse


def join_key(path: str, name: str) -> str:
    """Store key of ``name`` inside node ``path`` ("" is the store root)."""
    return f"{path}/{name}" if path else name
