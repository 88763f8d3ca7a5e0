"""Zarr storage specification v2: ``.zarray``, ``.zgroup``, ``.zattrs`` (pure parsing)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from zarrfs.errors import MetadataError
from zarrfs.formats.codecs.pipeline import CodecPipeline
from zarrfs.formats.grid.layout import Index
from zarrfs.formats.limits import (
    MAX_CHUNK_NBYTES,
    MAX_DIMENSIONS,
    MAX_ITEMSIZE,
    MAX_JSON_DEPTH,
    check_depth,
)
from zarrfs.formats.metadata.dtypes import (
    check_geometry,
    decode_fill_value,
    has_fixed_size,
    parse_dtype,
    parse_shape,
)
from zarrfs.formats.model import ArrayMeta, GroupMeta, chunk_key_parser
from zarrfs.stores.base import join_key

ARRAY_KEY = ".zarray"
GROUP_KEY = ".zgroup"
ATTRS_KEY = ".zattrs"
CONSOLIDATED_KEY = ".zmetadata"


def load_json(data: bytes, what: str) -> Any:
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, ValueError) as e:
        raise MetadataError(f"{what} is not valid JSON: {e}") from None
    except RecursionError:
        raise MetadataError(f"{what} nests deeper than JSON can be read") from None
    # Each level opens a bracket, so a text with few cannot nest deep: most documents
    # are spared the walk (a tenth of listing a consolidated hierarchy).
    if not isinstance(data, bytes) or data.count(b"[") + data.count(b"{") > MAX_JSON_DEPTH:
        check_depth(value, what)
    return value


def load_json_object(data: bytes, what: str) -> dict[str, Any]:
    doc = load_json(data, what)
    if not isinstance(doc, dict):
        raise MetadataError(f"{what} is not a JSON object")
    return doc


def parse_attrs(
    data: bytes | None, where: str, warnings: list[str] | None = None
) -> dict[str, Any]:
    """Attributes are informational: a broken ``.zattrs`` reads as empty, and why is
    added to ``warnings`` (what the caller reports of the node)."""
    if data is None:
        return {}
    try:
        return load_json_object(data, f"{where}/{ATTRS_KEY}")
    except MetadataError as e:
        if warnings is not None:
            warnings.append(f"{e}; ignoring the attributes")
        return {}


def v2_chunk_keys(path: str, separator: str | None, ndim: int) -> Callable[[Index], list[str]]:
    """Chunk index → candidate keys.

    Without a recorded ``dimension_separator`` the spec default "." is tried first,
    then "/" — old NestedDirectoryStore data carries no separator (corpus policy).
    """
    seps = [separator] if separator else [".", "/"]

    def keys(index: Index) -> list[str]:
        parts = [str(i) for i in index] if ndim else ["0"]
        # dict.fromkeys: with fewer than two indices both separators give one key
        return list(dict.fromkeys(join_key(path, sep.join(parts)) for sep in seps))

    return keys


def parse_array_document(
    path: str, doc_name: str, data: bytes, build: Callable[[dict[str, Any]], dict[str, Any]]
) -> dict[str, Any]:
    """What every array layout shares: shape, chunks, dtype and fill value.

    ``build`` reads the layout's own keys (order, codecs, ...) into ArrayMeta
    fields; every failure becomes one MetadataError naming the document.
    """
    where = f"{path or '/'}/{doc_name}"
    doc = load_json_object(data, where)
    try:
        fields = build(doc)
        shape = parse_shape(doc["shape"], "shape", positive=False)
        chunks = parse_shape(doc["chunks"], "chunks", positive=True)
        dtype = parse_dtype(doc["dtype"])
        check_geometry(shape, chunks, dtype)
        unsupported = flat_file_problem(chunks, dtype)
        fill = decode_fill_value(doc.get("fill_value"), dtype) if unsupported is None else None
    except KeyError as e:
        raise MetadataError(f"{where}: missing key {e.args[0]!r}") from e
    except MetadataError as e:
        raise MetadataError(f"{where}: {e}") from e
    return dict(
        fields,
        shape=shape,
        chunks=chunks,
        dtype=dtype,
        fill_value=fill,
        unsupported=unsupported,
    )


def flat_file_problem(chunks: tuple[int, ...], dtype: Any) -> str | None:
    """Why an array with valid metadata cannot be shown as array.raw, or None."""
    if not has_fixed_size(dtype):
        return f"dtype {dtype} has no fixed element size"
    if len(chunks) > MAX_DIMENSIONS:
        return f"{len(chunks)} dimensions are more than the {MAX_DIMENSIONS} zarrfs shows"
    if dtype.itemsize > MAX_ITEMSIZE:
        return f"elements of {dtype.itemsize} bytes are larger than the {MAX_ITEMSIZE} zarrfs shows"
    if dtype.subdtype is not None:
        # numpy expands a top-level subarray type into extra axes of every array
        # made with it, so no array of it has the declared shape.
        return f"dtype {dtype} is a subarray type (zarrfs shows only scalar and structured types)"
    nbytes = math.prod(chunks) * dtype.itemsize
    if nbytes > MAX_CHUNK_NBYTES:
        return f"a chunk holds {nbytes} bytes, more than the {MAX_CHUNK_NBYTES} zarrfs decodes"
    return None


NCZARR_ARRAY_KEYS = ("_nczarr_array", "_NCZARR_ARRAY")


def nczarr_dimensions(doc: dict[str, Any]) -> list[str] | None:
    """NCZarr's dimension references ("/grp/lat") as names ("lat"), if present.

    netCDF-C writes ``_nczarr_array`` (``_NCZARR_ARRAY`` before 4.8.1) holding
    ``dimrefs`` (``dimensions`` in later versions), sometimes as JSON text.
    """
    for key in NCZARR_ARRAY_KEYS:
        info = doc.get(key)
        if isinstance(info, str):
            try:
                info = json.loads(info)
            except (ValueError, RecursionError):
                continue
        if not isinstance(info, dict):
            continue
        refs = info.get("dimrefs", info.get("dimensions"))
        if isinstance(refs, list) and all(isinstance(r, str) for r in refs):
            return [r.rstrip("/").rpartition("/")[2] for r in refs]
    return None


def codec_json(compressor: dict[str, Any] | None, filters: list[Any]) -> dict[str, Any]:
    """ArrayMeta.codec_json of the v2-style layouts: ``compressor`` and ``filters``
    as ``.zarray`` spells them (no filters: null)."""
    return {"compressor": compressor, "filters": list(filters) or None}


def parse_order(doc: dict[str, Any]) -> str:
    order = doc.get("order", "C")
    if order not in ("C", "F"):
        raise MetadataError(f"order must be 'C' or 'F', got {order!r}")
    return order


# Hierarchies repeat one .zarray over thousands of arrays: parse each text once. The
# fields hold no path (only error messages do, and failures are not cached); the
# codec pipeline they share is used from several threads already.
_ZARRAY_CACHE_SIZE = 256
_ZARRAY_FIELDS: dict[bytes, dict[str, Any]] = {}


def parse_array(
    path: str, zarray: bytes, zattrs: bytes | None, *, warnings: list[str] | None = None
) -> ArrayMeta:
    def build(doc: dict[str, Any]) -> dict[str, Any]:
        fmt = doc["zarr_format"]
        if fmt != 2:
            raise MetadataError(f"zarr_format is {fmt!r}, expected 2")
        compressor = doc.get("compressor")
        filters = doc.get("filters") or []
        if compressor is not None and not (isinstance(compressor, dict) and "id" in compressor):
            raise MetadataError(f"invalid compressor {compressor!r}")
        if not isinstance(filters, list) or not all(
            isinstance(f, dict) and "id" in f for f in filters
        ):
            raise MetadataError(f"invalid filters {filters!r}")
        separator = doc.get("dimension_separator")
        if separator not in (None, ".", "/"):
            raise MetadataError(f"invalid dimension_separator {separator!r}")
        return {
            "order": parse_order(doc),
            "codecs": CodecPipeline(compressor, filters),
            "codec_json": codec_json(compressor, filters),
            "separator": separator,
            "nczarr": nczarr_dimensions(doc),
        }

    cached = _ZARRAY_FIELDS.get(zarray)
    if cached is None:
        cached = parse_array_document(path, ARRAY_KEY, zarray, build)
        if len(_ZARRAY_FIELDS) >= _ZARRAY_CACHE_SIZE:
            _ZARRAY_FIELDS.pop(next(iter(_ZARRAY_FIELDS)))
        _ZARRAY_FIELDS[zarray] = cached
    fields = dict(cached)
    separator = fields.pop("separator")
    nczarr = fields.pop("nczarr")
    shape = fields["shape"]
    attrs = parse_attrs(zattrs, path or "/", warnings)
    dimension_names = None
    # xarray's attribute first, then NCZarr's (in .zarray, or in .zattrs for NCZarr 3)
    for dims in (attrs.get("_ARRAY_DIMENSIONS"), nczarr, nczarr_dimensions(attrs)):
        valid = isinstance(dims, list) and len(dims) == len(shape)
        if valid and all(isinstance(d, str) for d in dims):
            dimension_names = tuple(dims)
            break
    return ArrayMeta(
        path=path,
        zarr_format=2,
        chunk_keys=v2_chunk_keys(path, separator, len(shape)),
        chunk_index=chunk_key_parser(
            path, [separator] if separator else [".", "/"], "", len(shape)
        ),
        documents=(ARRAY_KEY, ATTRS_KEY) if zattrs is not None else (ARRAY_KEY,),
        attrs=attrs,
        dimension_names=dimension_names,
        **fields,
    )


def parse_group(
    path: str, zgroup: bytes, zattrs: bytes | None, *, warnings: list[str] | None = None
) -> GroupMeta:
    where = path or "/"
    doc = load_json_object(zgroup, f"{where}/{GROUP_KEY}")
    if doc.get("zarr_format") != 2:
        raise MetadataError(f"{where}/{GROUP_KEY}: zarr_format is {doc.get('zarr_format')!r}")
    docs = [GROUP_KEY]
    if zattrs is not None:
        docs.append(ATTRS_KEY)
    return GroupMeta(
        path=path,
        zarr_format=2,
        documents=tuple(docs),
        attrs=parse_attrs(zattrs, where, warnings),
    )


def rewrite_shape(document: bytes, shape: tuple[int, ...]) -> bytes:
    """The same metadata document with another ``shape``; key order and indent kept.

    Every layout (``.zarray``, ``meta``, ``__zmeta__``) keeps the shape under "shape".
    """
    doc = load_json_object(document, "metadata")
    doc["shape"] = list(shape)
    lines = document.decode("utf-8", errors="replace").split("\n", 2)
    second = lines[1] if len(lines) > 1 else ""
    indent = (len(second) - len(second.lstrip(" "))) or 4
    return json.dumps(doc, indent=indent, ensure_ascii=True, allow_nan=True).encode()
