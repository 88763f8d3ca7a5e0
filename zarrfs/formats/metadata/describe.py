"""What ``info`` and the ``user.zarr.*`` attributes say of an array beyond ArrayMeta's
plain fields, in the document's own words, whatever its format (pure).

The views render these; the format knowledge (which codec field comes first, which
data types have no numpy form) stays here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zarrfs.errors import MetadataError
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


def numpy_dtype(meta: ArrayMeta) -> np.dtype | None:
    """The numpy dtype of ``array.raw``; None for a v3 data type that has none (a
    variable-length one, whose ``meta.dtype`` only stands in for it)."""
    if meta.data_type_json is None or meta.unsupported is None:
        return meta.dtype
    try:
        return parse_data_type(meta.data_type_json).dtype
    except MetadataError:
        return None
