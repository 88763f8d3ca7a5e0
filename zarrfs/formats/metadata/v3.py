"""Zarr v3 ``zarr.json`` (pure parsing): groups and non-sharded arrays.

An array's chunks decode through its v3 codec chain (``v3_codecs``) into the data
type's natural little-endian numpy form, in C order: that is what ``array.raw``
shows, whatever the ``bytes`` codec's endian (v3 types carry no byte order).
A sharded array whose chain is ``sharding_indexed`` alone is read and written by
inner chunks (``ArrayMeta.shards`` says where they live); with other codecs around
the shard, the shard is the chunk. Variable-length types and storage transformers
are shown as metadata only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from zarrfs.errors import MetadataError
from zarrfs.formats.codecs.chain import CodecChain, undecodable
from zarrfs.formats.codecs.v3 import parse_codecs
from zarrfs.formats.codecs.v3_sharding import ranged, with_sharding
from zarrfs.formats.grid.layout import Index
from zarrfs.formats.grid.shards import ShardGeometry
from zarrfs.formats.metadata.dtypes import check_geometry, parse_shape
from zarrfs.formats.metadata.v2 import flat_file_problem, load_json_object
from zarrfs.formats.metadata.v3_dtypes import decode_fill_value, parse_data_type
from zarrfs.formats.model import (
    ArrayMeta,
    GroupMeta,
    NodeMeta,
    ShardLayout,
    _is_index,
)
from zarrfs.stores.base import join_key

ZARR_JSON = "zarr.json"
_KNOWN_ARRAY_KEYS = {
    "zarr_format",
    "node_type",
    "shape",
    "data_type",
    "chunk_grid",
    "chunk_key_encoding",
    "fill_value",
    "codecs",
    "attributes",
    "dimension_names",
    "storage_transformers",
}


def parse_node(
    path: str,
    document: bytes,
    _attrs: bytes | None = None,
    *,
    warnings: list[str] | None = None,
) -> NodeMeta:
    """A group or an array from its ``zarr.json``; MetadataError when invalid (its
    attributes live inside it: nothing is ignored, so ``warnings`` gets nothing)."""
    where = f"{path or '/'}/{ZARR_JSON}"
    doc = load_json_object(document, where)
    if doc.get("zarr_format") != 3:
        raise MetadataError(f"{where}: zarr_format is {doc.get('zarr_format')!r}, expected 3")
    attrs = doc.get("attributes", {})
    if not isinstance(attrs, dict):
        raise MetadataError(f"{where}: attributes is not a JSON object")
    node_type = doc.get("node_type")
    if node_type == "group":
        return GroupMeta(path=path, zarr_format=3, documents=(ZARR_JSON,), attrs=attrs)
    if node_type != "array":
        raise MetadataError(f"{where}: node_type is {node_type!r}")
    try:
        return _parse_array(path, doc, attrs)
    except KeyError as e:
        raise MetadataError(f"{where}: missing key {e.args[0]!r}") from None
    except MetadataError as e:
        raise MetadataError(f"{where}: {e}") from None


@dataclass(frozen=True)
class _Structure:
    """What an array's ``zarr.json`` says but for its path, attributes and dimension
    names: the same for every array of like metadata."""

    shape: Index
    chunks: Index
    dtype: np.dtype
    fill: bytes | None
    codecs: CodecChain
    unsupported: str | None
    # Sharded arrays whose inner chunks are read by ranges: the shards' geometry and
    # how their index is stored (checksum, location, endian).
    shard_geometry: ShardGeometry | None = None
    shard_index: tuple[bool, str, str] | None = None


# Hierarchies repeat one array's metadata over thousands of arrays, their attributes
# aside: what it says is worked out once per text (parsing the codecs is most of a
# zarr.json). Failures are not kept; bounded in count and in the text of a key.
_STRUCTURES_SIZE = 256
_STRUCTURE_KEY_LIMIT = 4096
_STRUCTURES: dict[str, _Structure] = {}
_OWN_MEMBERS = frozenset({"attributes", "dimension_names"})  # the array's own


def _structure_key(doc: dict[str, Any]) -> str | None:
    # repr tells JSON values apart as equality does (1, 1.0 and True differ), and
    # keeps member order, which only documents of one writer share.
    key = repr([item for item in doc.items() if item[0] not in _OWN_MEMBERS])
    return key if len(key) <= _STRUCTURE_KEY_LIMIT else None


def _structure(doc: dict[str, Any]) -> _Structure:
    key = _structure_key(doc)
    found = _STRUCTURES.get(key) if key is not None else None
    if found is None:
        found = _parse_structure(doc)
        if key is not None:
            if len(_STRUCTURES) >= _STRUCTURES_SIZE:
                _STRUCTURES.pop(next(iter(_STRUCTURES)))
            _STRUCTURES[key] = found
    return found


def _parse_structure(doc: dict[str, Any]) -> _Structure:
    for key, value in doc.items():
        # Extension members must be understood unless they say otherwise.
        if key not in _KNOWN_ARRAY_KEYS and not (
            isinstance(value, dict) and value.get("must_understand") is False
        ):
            raise MetadataError(f"unknown member {key!r}")
    shape = parse_shape(doc["shape"], "shape", positive=False)
    grid = doc["chunk_grid"]
    if not isinstance(grid, dict) or grid.get("name") != "regular":
        raise MetadataError(f"unsupported chunk_grid {grid!r}")
    chunks = parse_shape(
        grid.get("configuration", {}).get("chunk_shape"), "chunk_shape", positive=True
    )
    v3type = parse_data_type(doc["data_type"])
    dtype = v3type.dtype if v3type.dtype is not None else np.dtype("|V1")
    check_geometry(shape, chunks, dtype)
    _chunk_key_encoding("", doc.get("chunk_key_encoding"), len(shape))  # valid
    unsupported = v3type.unsupported or flat_file_problem(chunks, dtype)
    if doc.get("storage_transformers"):
        unsupported = unsupported or "storage transformers are not supported"
    fill = None
    coded = undecodable(dtype, chunks, unsupported or "")
    if unsupported is not None:
        return _Structure(shape, chunks, dtype, fill, coded, unsupported)
    chain = parse_codecs(doc["codecs"], dtype, chunks)
    fill = decode_fill_value(doc["fill_value"], v3type, endian=_stored_endian(chain, doc))
    chain = coded = with_sharding(chain, fill)
    shard_codec = ranged(chain)
    if shard_codec is None:
        return _Structure(shape, chunks, dtype, fill, coded, unsupported)
    # Inner chunks are the unit of reads and writes; shards are what is stored.
    config = shard_codec.config
    inner = config.chunk_shape
    return _Structure(
        shape,
        inner,
        dtype,
        fill,
        shard_codec.inner,
        flat_file_problem(inner, dtype),
        ShardGeometry(shape, chunks, inner),
        (config.index_checksum, config.index_location, config.index_endian),
    )


def _parse_array(path: str, doc: dict[str, Any], attrs: dict[str, Any]) -> ArrayMeta:
    found = _structure(doc)
    keys, index_of = _chunk_key_encoding(path, doc.get("chunk_key_encoding"), len(found.shape))
    shards = None
    if found.shard_geometry is not None and found.shard_index is not None:
        checksum, location, endian = found.shard_index
        shards = ShardLayout(
            found.shard_geometry,
            shard_keys=keys,
            shard_index=index_of,
            checksum=checksum,
            location=location,
            endian=endian,
        )
        keys, index_of = _no_chunk_keys, _no_chunk_index
    names = doc.get("dimension_names")
    dimension_names = None
    valid = isinstance(names, list) and len(names) == len(found.shape)
    if valid and all(n is None or isinstance(n, str) for n in names):
        dimension_names = tuple(names)
    return ArrayMeta(
        path=path,
        zarr_format=3,
        shape=found.shape,
        chunks=found.chunks,
        dtype=found.dtype,
        order="C",
        fill_value=found.fill,
        codecs=found.codecs,
        chunk_keys=keys,
        chunk_index=index_of,
        documents=(ZARR_JSON,),
        attrs=attrs,
        dimension_names=dimension_names,
        unsupported=found.unsupported,
        shards=shards,
        data_type_json=doc["data_type"],
        codec_json={"codecs": doc["codecs"]},
    )


def _stored_endian(chain: CodecChain, doc: dict[str, Any]) -> str:
    """The byte order chunks are stored in, looking into a shard's inner codecs."""
    if chain.sharding is None:
        return "big" if chain.stored_dtype.byteorder == ">" else "little"
    inner = chain.sharding.configuration
    codecs = inner.get("codecs") if isinstance(inner, dict) else None
    for codec in codecs if isinstance(codecs, list) else []:
        if isinstance(codec, dict) and codec.get("name") == "bytes":
            config = codec.get("configuration") or {}
            return "big" if isinstance(config, dict) and config.get("endian") == "big" else "little"
    return "little"


def _no_chunk_keys(index: Index) -> list[str]:
    raise AssertionError("a sharded array stores shards: use ArrayMeta.shards")


def _no_chunk_index(key: str) -> Index | None:
    return None


def _chunk_key_encoding(
    path: str, encoding: Any, ndim: int
) -> tuple[Callable[[Index], list[str]], Callable[[str], Index | None]]:
    """(index → keys, key → index) of the "default" ("c/0/0", "c.0.0") or "v2"
    ("0.0", "0/0") chunk key encoding."""
    if encoding is None:
        encoding = {"name": "default"}
    if not isinstance(encoding, dict):
        raise MetadataError(f"invalid chunk_key_encoding {encoding!r}")
    name = encoding.get("name")
    config = encoding.get("configuration") or {}
    if name == "default":
        separator, head = config.get("separator", "/"), "c"
    elif name == "v2":
        separator, head = config.get("separator", "."), ""
    else:
        raise MetadataError(f"unsupported chunk_key_encoding {name!r}")
    if separator not in ("/", "."):
        raise MetadataError(f"invalid chunk key separator {separator!r}")

    def name_of(index: Index) -> str:
        if not index:
            return head or "0"
        body = separator.join(str(i) for i in index)
        return f"{head}{separator}{body}" if head else body

    prefix = f"{path}/" if path else ""

    def keys(index: Index) -> list[str]:
        return [join_key(path, name_of(index))]

    def index_of(key: str) -> Index | None:
        if not key.startswith(prefix):
            return None
        body = key[len(prefix) :]
        if not ndim:
            return () if body == (head or "0") else None
        if head:
            if not body.startswith(head + separator):
                return None
            body = body[len(head) + 1 :]
        parts = body.split(separator)
        if len(parts) != ndim or not all(_is_index(p) for p in parts):
            return None
        return tuple(int(p) for p in parts)

    return keys, index_of


def replace_consolidated_entry(root: bytes, path: str, document: bytes) -> bytes | None:
    """The root ``zarr.json`` with the entry of node ``path`` in its
    ``consolidated_metadata`` set to ``document`` (zarr-python 3 opens groups from
    it); None when it has no such entry. Indent and key order are kept."""
    doc = load_json_object(root, ZARR_JSON)
    consolidated = doc.get("consolidated_metadata")
    if not isinstance(consolidated, dict):
        return None
    entries = consolidated.get("metadata")
    if not isinstance(entries, dict) or path not in entries:
        return None
    entries[path] = load_json_object(document, join_key(path, ZARR_JSON))
    return json.dumps(doc, indent=_indent(root), ensure_ascii=True, allow_nan=True).encode()


def _indent(document: bytes) -> int:
    lines = document.decode("utf-8", errors="replace").split("\n", 2)
    second = lines[1] if len(lines) > 1 else ""
    return (len(second) - len(second.lstrip(" "))) or 2
