"""The layouts before v2 (pure parsing).

* pre-v1 "persistence" layout (zarr 0.4): ``__zmeta__`` with cname/clevel/shuffle,
  ``__zattr__``, chunks at ``__zdata__/<i>.<j>.blosc`` in blosc version 1 frames;
* spec v1 (zarr 1.x): ``meta`` with compression/compression_opts, ``attrs``, chunks
  at ``<i>.<j>`` with no header added.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from zarrfs.errors import MetadataError
from zarrfs.formats.codecs.pipeline import CodecPipeline
from zarrfs.formats.grid.layout import Index
from zarrfs.formats.metadata.v2 import codec_json, parse_array_document, parse_attrs, parse_order
from zarrfs.formats.model import ArrayMeta, chunk_key_parser
from zarrfs.stores.base import join_key

V0_META_KEY = "__zmeta__"
V0_ATTRS_KEY = "__zattr__"
V0_DATA_PREFIX = "__zdata__"
V1_META_KEY = "meta"
V1_ATTRS_KEY = "attrs"


def _chunk_keys(prefix: str, suffix: str, ndim: int) -> Callable[[Index], list[str]]:
    def keys(index: Index) -> list[str]:
        name = ".".join(str(i) for i in index) if ndim else "0"
        return [join_key(prefix, name + suffix)]

    return keys


def _require(doc: dict[str, Any], *keys: str) -> None:
    """Keys these specs make mandatory (v2 .zarray is read more leniently, as zarr-python)."""
    for key in keys:
        if key not in doc:
            raise KeyError(key)  # parse_array_document names the document and key


def _blosc_config(doc: dict[str, Any]) -> dict[str, Any]:
    cname, clevel, shuffle = doc["cname"], doc["clevel"], doc["shuffle"]
    if not isinstance(cname, str) or not isinstance(clevel, int) or shuffle not in (0, 1, 2):
        raise MetadataError(f"invalid blosc settings {cname!r}/{clevel!r}/{shuffle!r}")
    # A blosc frame names its own compressor, so reads would work; writes would not.
    if cname not in blosc_compressors():
        raise MetadataError(f"unknown blosc compressor {cname!r}")
    return {"id": "blosc", "cname": cname, "clevel": clevel, "shuffle": shuffle}


@functools.cache
def blosc_compressors() -> frozenset[str]:
    from numcodecs import blosc

    return frozenset(blosc.list_compressors())


def v1_compressor(name: Any, opts: Any) -> dict[str, Any] | None:
    """spec v1 compression/compression_opts → a numcodecs configuration."""
    if name in (None, "none"):
        return None
    if name == "blosc":
        if not isinstance(opts, dict):
            raise MetadataError(f"blosc compression_opts must be an object, got {opts!r}")
        return _blosc_config(opts)
    if name in ("zlib", "gzip", "bz2"):
        level = 1 if opts is None else opts
        if isinstance(level, bool) or not isinstance(level, int):
            raise MetadataError(f"{name} compression_opts must be a level, got {opts!r}")
        return {"id": "zlib" if name == "gzip" else name, "level": level}
    if name == "lzma":
        if opts is None:
            return {"id": "lzma"}
        if isinstance(opts, int) and not isinstance(opts, bool):
            return {"id": "lzma", "preset": opts}
        if isinstance(opts, dict):
            return {"id": "lzma", **opts}
        raise MetadataError(f"invalid lzma compression_opts {opts!r}")
    raise MetadataError(f"unknown compression {name!r}")


def parse_v0_array(
    path: str, zmeta: bytes, zattr: bytes | None, *, warnings: list[str] | None = None
) -> ArrayMeta:
    def build(doc: dict[str, Any]) -> dict[str, Any]:
        _require(doc, "fill_value")
        compressor = _blosc_config(doc)
        return {
            "codecs": CodecPipeline(compressor, []),
            "codec_json": codec_json(compressor, []),
            "order": "C",
        }

    fields = parse_array_document(path, V0_META_KEY, zmeta, build)
    return ArrayMeta(
        path=path,
        zarr_format=0,
        chunk_keys=_chunk_keys(join_key(path, V0_DATA_PREFIX), ".blosc", len(fields["shape"])),
        chunk_index=chunk_key_parser(
            join_key(path, V0_DATA_PREFIX), ["."], ".blosc", len(fields["shape"])
        ),
        documents=(V0_META_KEY, V0_ATTRS_KEY) if zattr is not None else (V0_META_KEY,),
        attrs=parse_attrs(zattr, path or "/", warnings),
        **fields,
    )


def parse_v1_array(
    path: str, meta: bytes, attrs: bytes | None, *, warnings: list[str] | None = None
) -> ArrayMeta:
    def build(doc: dict[str, Any]) -> dict[str, Any]:
        if doc.get("zarr_format") != 1:
            raise MetadataError(f"zarr_format is {doc.get('zarr_format')!r}, expected 1")
        _require(doc, "fill_value", "order")
        compressor = v1_compressor(doc["compression"], doc["compression_opts"])
        return {
            "codecs": CodecPipeline(compressor, []),
            "codec_json": codec_json(compressor, []),
            "order": parse_order(doc),
        }

    fields = parse_array_document(path, V1_META_KEY, meta, build)
    return ArrayMeta(
        path=path,
        zarr_format=1,
        chunk_keys=_chunk_keys(path, "", len(fields["shape"])),
        chunk_index=chunk_key_parser(path, ["."], "", len(fields["shape"])),
        documents=(V1_META_KEY, V1_ATTRS_KEY) if attrs is not None else (V1_META_KEY,),
        attrs=parse_attrs(attrs, path or "/", warnings),
        **fields,
    )
