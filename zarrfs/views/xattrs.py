"""Extended attributes ``user.zarr.*``: an array's metadata for ``getfattr -d``.

Pure: built from the live ArrayMeta / GroupMeta, no store access. Format-agnostic:
the codecs are shown under the document's own field names (``codec_json``: v2's
``compressor`` and ``filters``, v3's ``codecs``), a v3 data type as written
(``data_type``) beside the numpy dtype ``array.raw`` holds, and a sharded array's
shard shape (``shards``) beside its inner chunk shape (``chunks``); what that
takes to know is formats/metadata/describe.py's. The helpers here also make those texts for
``info``.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from zarrfs.formats.limits import clip
from zarrfs.formats.metadata import describe
from zarrfs.formats.model import ArrayMeta, GroupMeta

PREFIX = "user.zarr."
_REPR_ITEMSIZE = 4096  # elements up to this size are shown as Python values
_HEX_BYTES = 128  # of a longer or structured element, the first bytes in hex
# Codec lists and data types are JSON chosen by the store: shown whole up to this
# many characters (a sharded v3 chain is some 500), cut beyond it.
MAX_JSON_TEXT = 4096


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, allow_nan=True).encode()


def json_text(value: Any, *, ascii: bool = False) -> str:
    """``value`` as JSON text (non-ASCII escaped if ``ascii``), cut to MAX_JSON_TEXT
    characters."""
    return clip(json.dumps(value, ensure_ascii=ascii, allow_nan=True), MAX_JSON_TEXT)


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
    dtype = describe.numpy_dtype(meta)
    attrs: dict[str, bytes] = {"shape": _json(list(meta.shape))}
    if dtype is not None:
        attrs["dtype"] = _json(describe.dtype_json(dtype))
    if meta.data_type_json is not None:
        attrs["data_type"] = json_text(meta.data_type_json).encode()
    attrs["chunks"] = _json(list(meta.chunks))
    if meta.shards is not None:
        attrs["shards"] = _json(list(meta.shards.shard_shape))
    attrs["order"] = meta.order.encode()
    attrs["fill_value"] = fill_text(meta).encode()
    for name, value in meta.codec_json.items():
        attrs[name] = json_text(value).encode()
    attrs["format"] = str(meta.zarr_format).encode()
    if meta.dimension_names is not None:
        attrs["dimensions"] = _json(list(meta.dimension_names))
    out = {f"{PREFIX}{k}": v for k, v in attrs.items()}
    out.update(user_attrs(meta.attrs))
    return out


def group_xattrs(meta: GroupMeta) -> dict[str, bytes]:
    return {f"{PREFIX}format": str(meta.zarr_format).encode(), **user_attrs(meta.attrs)}


def user_attrs(attrs: dict[str, Any]) -> dict[str, bytes]:
    return {f"{PREFIX}attrs.{name}": _json(value) for name, value in attrs.items()}
