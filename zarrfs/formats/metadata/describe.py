"""What ``zarrfs tree``, ``info`` and the ``user.zarr.*`` attributes say of an array
beyond ArrayMeta's plain fields, in the document's own words, whatever its format (pure).

The commands and views lay these out; the format knowledge (which codec field comes
first, how each format spells a data type, which data types have no numpy form)
stays here.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from zarrfs.errors import MetadataError
from zarrfs.formats.limits import MAX_VALUE_TEXT, clip
from zarrfs.formats.metadata.v3_dtypes import parse_data_type
from zarrfs.formats.model import ArrayMeta

# v2-style documents name their filters and compressor; filters apply first.
_FIELD_ORDER = {"filters": 0, "compressor": 1}


def codec_fields(meta: ArrayMeta) -> list[tuple[str, Any]]:
    """(field name, JSON value) of the array's codec configuration as its document
    names it (v2, v1, pre-v1: ``filters`` then ``compressor``; v3: ``codecs``), in
    the order the codecs apply when encoding."""
    items = list(meta.codec_json.items())
    return sorted(items, key=lambda item: _FIELD_ORDER.get(item[0], len(_FIELD_ORDER)))


def dtype_json(dtype: np.dtype) -> Any:
    """A numpy dtype as v2 spells it: ``"<i4"``, or the field list of a structured one."""
    return dtype.descr if dtype.fields is not None else dtype.str


def written_type(meta: ArrayMeta) -> Any:
    """The data type as the array's document writes it: v3's ``data_type`` (a name, or
    an extension object), else the v2-style ``dtype``."""
    return meta.data_type_json if meta.data_type_json is not None else dtype_json(meta.dtype)


def type_text(value: Any, limit: int = MAX_VALUE_TEXT) -> str:
    """A data type (``written_type``, ``dtype_json``) as text: its name, or the JSON of
    an extension object or a field list, cut to ``limit`` characters."""
    return value if isinstance(value, str) else clip(json.dumps(value, allow_nan=True), limit)


def numpy_dtype(meta: ArrayMeta) -> np.dtype | None:
    """The numpy dtype of ``array.raw``; None for a v3 data type that has none (a
    variable-length one, whose ``meta.dtype`` only stands in for it)."""
    if meta.data_type_json is None or meta.unsupported is None:
        return meta.dtype
    try:
        return parse_data_type(meta.data_type_json).dtype
    except MetadataError:
        return None
