"""Dtype and fill-value decoding shared by the format parsers (pure, no I/O)."""

from __future__ import annotations

import base64
import logging
import math
from typing import Any

import numpy as np

from zarrfs.errors import MetadataError

log = logging.getLogger(__name__)

# zarr-python refuses byte sizes beyond this; so do we (st_size is a signed 64-bit off_t).
MAX_NBYTES = 2**63 - 1


def parse_dtype(spec: Any) -> np.dtype:
    """A v0/v1/v2 dtype: a typestr like ``"<f8"`` or a (nested) list of fields."""
    try:
        return np.dtype(_to_numpy_spec(spec))
    except (TypeError, ValueError) as e:
        raise MetadataError(f"invalid dtype {spec!r}: {e}") from e


def _to_numpy_spec(spec: Any) -> Any:
    if isinstance(spec, str):
        return spec
    if isinstance(spec, list):
        fields = []
        for entry in spec:
            if not isinstance(entry, list | tuple) or len(entry) not in (2, 3):
                raise MetadataError(f"invalid structured dtype field {entry!r}")
            name, sub = entry[0], _to_numpy_spec(entry[1])
            if len(entry) == 3:
                fields.append((name, sub, tuple(entry[2])))
            else:
                fields.append((name, sub))
        return fields
    raise MetadataError(f"invalid dtype {spec!r}")


def has_fixed_size(dtype: np.dtype) -> bool:
    """False for object dtypes (anywhere inside a structure) and zero-size types."""
    return not dtype.hasobject and dtype.itemsize > 0


_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _float_value(value: Any) -> float:
    if isinstance(value, str):
        if value in _FLOAT_WORDS:
            return _FLOAT_WORDS[value]
        raise MetadataError(f"invalid float fill value {value!r}")
    return float(value)


def decode_fill_value(value: Any, dtype: np.dtype) -> bytes | None:
    """The v2 fill-value encodings (zarr-python's ``decode_fill_value``) as element bytes.

    Returns ``None`` for ``null``. Tolerates the integer 0 that old zarr-python wrote
    for ``|S``/``<U``/structured dtypes, reading it as zero bytes.
    """
    if value is None:
        return None
    kind = dtype.kind
    try:
        if kind in "SV":
            if isinstance(value, str):
                raw = base64.standard_b64decode(value)
                if kind == "S":
                    return np.array(raw, dtype=dtype).tobytes()
                if len(raw) != dtype.itemsize:
                    raise MetadataError(
                        f"fill value has {len(raw)} bytes, dtype {dtype} needs {dtype.itemsize}"
                    )
                return raw
            if value == 0 and not isinstance(value, bool):
                return bytes(dtype.itemsize)
            return np.array(value, dtype=dtype).tobytes()
        if kind == "U":
            if value == 0 and not isinstance(value, bool):
                return bytes(dtype.itemsize)
            return np.array(str(value), dtype=dtype).tobytes()
        if kind == "f":
            return np.array(_float_value(value), dtype=dtype).tobytes()
        if kind == "c":
            if isinstance(value, list | tuple) and len(value) == 2:
                re, im = (_float_value(v) for v in value)
                return np.array(complex(re, im), dtype=dtype).tobytes()
            return np.array(complex(value), dtype=dtype).tobytes()
        if kind in "iu":
            if isinstance(value, float) and not value.is_integer():
                raise MetadataError(f"fill value {value!r} is not an integer")
            return np.array(int(value), dtype=dtype).tobytes()
        if kind == "b":
            return np.array(bool(value), dtype=dtype).tobytes()
        if kind in "Mm":
            if isinstance(value, str) and value == "NaT":
                return np.array("NaT", dtype=dtype).tobytes()
            native = dtype.newbyteorder("=")
            return np.array(int(value), dtype=np.int64).view(native).astype(dtype).tobytes()
        return np.array(value, dtype=dtype).tobytes()
    except MetadataError:
        raise
    except (TypeError, ValueError, OverflowError, base64.binascii.Error) as e:
        raise MetadataError(f"invalid fill value {value!r} for dtype {dtype}: {e}") from e


def parse_shape(value: Any, what: str, *, positive: bool) -> tuple[int, ...]:
    if not isinstance(value, list | tuple):
        raise MetadataError(f"{what} must be a list, got {value!r}")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int):
            raise MetadataError(f"{what} must hold integers, got {value!r}")
        if v < 0 or (positive and v == 0):
            raise MetadataError(f"{what} has an invalid length {v} in {value!r}")
        out.append(v)
    return tuple(out)


def check_geometry(shape: tuple[int, ...], chunks: tuple[int, ...], dtype: np.dtype) -> None:
    if len(shape) != len(chunks):
        raise MetadataError(f"shape {list(shape)} and chunks {list(chunks)} differ in rank")
    if math.prod(shape) * max(dtype.itemsize, 1) > MAX_NBYTES:
        raise MetadataError(f"array of shape {list(shape)} and dtype {dtype} is too large")
    if math.prod(chunks) * max(dtype.itemsize, 1) > MAX_NBYTES:
        raise MetadataError(f"chunk of shape {list(chunks)} and dtype {dtype} is too large")
