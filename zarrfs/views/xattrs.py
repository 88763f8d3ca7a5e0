"""Extended attributes ``user.zarr.*``: an array's metadata for ``getfattr -d``.

Pure: built from the live ArrayMeta / GroupMeta, no store access.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from zarrfs.formats.limits import clip
from zarrfs.formats.model import ArrayMeta, GroupMeta

PREFIX = "user.zarr."
_REPR_ITEMSIZE = 4096  # elements up to this size are shown as Python values
_HEX_BYTES = 128  # of a longer or structured element, the first bytes in hex


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, allow_nan=True).encode()


def fill_text(meta: ArrayMeta) -> str:
    """The fill value as text: its repr, or its bytes in hex for structured types and
    huge elements, cut short (an element may be 300 MB: the text must stay cheap)."""
    if meta.fill_value is None:
        return "null"
    if meta.dtype.fields is None and meta.itemsize <= _REPR_ITEMSIZE:
        return clip(repr(np.frombuffer(meta.fill_value, dtype=meta.dtype)[0].item()))
    shown = meta.fill_value[:_HEX_BYTES].hex()
    return shown if meta.itemsize <= _HEX_BYTES else f"{shown}... ({meta.itemsize} bytes)"


def array_xattrs(meta: ArrayMeta) -> dict[str, bytes]:
    codecs = meta.codecs
    attrs = {
        "shape": _json(list(meta.shape)),
        "dtype": _json(meta.dtype.descr if meta.dtype.fields else meta.dtype.str),
        "chunks": _json(list(meta.chunks)),
        "order": meta.order.encode(),
        "fill_value": fill_text(meta).encode(),
        "compressor": _json(codecs.compressor_config),
        "filters": _json(codecs.filter_configs or None),
        "format": str(meta.zarr_format).encode(),
    }
    if meta.dimension_names is not None:
        attrs["dimensions"] = _json(list(meta.dimension_names))
    out = {f"{PREFIX}{k}": v for k, v in attrs.items()}
    out.update(user_attrs(meta.attrs))
    return out


def group_xattrs(meta: GroupMeta) -> dict[str, bytes]:
    return {f"{PREFIX}format": str(meta.zarr_format).encode(), **user_attrs(meta.attrs)}


def user_attrs(attrs: dict[str, Any]) -> dict[str, bytes]:
    return {f"{PREFIX}attrs.{name}": _json(value) for name, value in attrs.items()}
