"""The Zarr v3 codec chain of one array: parse the zarr.json ``codecs`` list, decode
and encode chunks (pure, no I/O).

A v3 chain is array->array stages (``transpose``, a few ``numcodecs.*`` filters),
exactly one array->bytes stage (``bytes``, or ``sharding_indexed``, which is only
recognised here: the shard layer decodes shards), then bytes->bytes stages
(``gzip``, ``zstd``, ``blosc``, ``crc32c`` and the ``numcodecs.*`` ones). Every
bytes->bytes codec comes from numcodecs' registry; the v3 configuration is only
translated where its spelling differs from numcodecs' own (blosc's shuffle names).
Decompression goes through ``bounded`` so that no stage yields more than the chunk.

Decoded chunks are always the data type's natural little-endian dtype in C order:
the ``bytes`` codec's endian says how chunks are stored, not what ``array.raw`` is.
"""

from __future__ import annotations

from typing import Any

import numcodecs
import numpy as np
from numcodecs.abc import Codec

from zarrfs.errors import MetadataError
from zarrfs.formats.codecs.chain import (
    ArrayFilter,
    ArrayStage,
    BytesSerializer,
    BytesStage,
    CodecChain,
    ShardingMarker,
    Transpose,
)
from zarrfs.formats.limits import MAX_DIMENSIONS, clip

# The chain was first written for v3; every format's chunks now go through it.
V3CodecChain = CodecChain

ENDIANS = ("little", "big")
NUMCODECS_PREFIX = "numcodecs."
BLOSC_SHUFFLES = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}
BLOSC_CNAMES = frozenset({"lz4", "lz4hc", "blosclz", "zstd", "snappy", "zlib"})

# numcodecs ids zarr-python 3 writes as "numcodecs.<id>", by the kind of stage.
NUMCODECS_BYTES = frozenset(
    {
        "blosc",
        "lz4",
        "zstd",
        "zlib",
        "gzip",
        "bz2",
        "lzma",
        "shuffle",
        "crc32",
        "crc32c",
        "adler32",
        "fletcher32",
        "jenkins_lookup3",
    }
)
# Only filters that keep the chunk's dtype and element count: the others (astype,
# fixedscaleoffset with astype, packbits) would change what the bytes stage stores.
NUMCODECS_ARRAY = frozenset({"delta", "bitround", "quantize"})


def _fail(message: str) -> MetadataError:
    return MetadataError(clip(message, 400))


# ----------------------------------------------------------------- parsing


def parse_codecs(codecs: Any, dtype: np.dtype, chunk_shape: Any) -> V3CodecChain:
    """The zarr.json ``codecs`` list as a chain for chunks of ``chunk_shape`` and the
    little-endian ``dtype`` (``V3Type.dtype``). MetadataError for anything invalid,
    unknown (unless marked ``must_understand: false``) or out of order."""
    if not isinstance(codecs, list) or not codecs:
        raise _fail(f"codecs must be a non-empty list, not {codecs!r}")
    if (
        not isinstance(chunk_shape, list | tuple)
        or len(chunk_shape) > MAX_DIMENSIONS
        or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in chunk_shape)
    ):
        raise _fail(f"invalid chunk shape {chunk_shape!r}")
    shape = tuple(chunk_shape)
    dtype = np.dtype(dtype)
    array_array: list[ArrayStage] = []
    array_bytes: BytesSerializer | ShardingMarker | None = None
    bytes_bytes: list[BytesStage] = []
    ignored: list[str] = []
    for item in codecs:
        name, config, must_understand = _entry(item)
        kind, stage = _build(name, config, dtype, len(shape))
        if kind is None:
            if must_understand:
                raise _fail(f"unknown codec {name!r}")
            ignored.append(name)
            continue
        if kind == "array_array":
            if array_bytes is not None:
                raise _fail(f"array->array codec {name!r} after the array->bytes codec")
            array_array.append(stage)
        elif kind == "array_bytes":
            if array_bytes is not None:
                raise _fail(f"second array->bytes codec {name!r}")
            array_bytes = stage
        else:
            if array_bytes is None:
                raise _fail(f"bytes->bytes codec {name!r} before the array->bytes codec")
            bytes_bytes.append(stage)
    if array_bytes is None:
        raise _fail("codecs lack an array->bytes codec (bytes or sharding_indexed)")
    if isinstance(array_bytes, BytesSerializer):
        _check_endian(array_bytes.endian, dtype)
    return V3CodecChain(
        dtype, shape, tuple(array_array), array_bytes, tuple(bytes_bytes), tuple(ignored)
    )


def _entry(item: Any) -> tuple[str, dict[str, Any], bool]:
    """(name, configuration, must_understand) of a codec object or short-hand name."""
    if isinstance(item, str):
        return item, {}, True
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        raise _fail(f"a codec must be a name or an object with a string name, not {item!r}")
    config = item.get("configuration", {})
    if config is None:
        config = {}  # zarr-python writes "configuration": null for none
    if not isinstance(config, dict):
        raise _fail(f"codec {item['name']!r} has a non-object configuration")
    must_understand = item.get("must_understand", True)
    if not isinstance(must_understand, bool):
        raise _fail(f"codec {item['name']!r}: must_understand must be a boolean")
    _check_extra(item, {"name", "configuration", "must_understand"}, f"codec {item['name']!r}")
    return item["name"], config, must_understand


def _check_extra(config: dict[str, Any], known: set[str], what: str) -> None:
    """Unknown members are refused unless they say ``must_understand: false``."""
    for key, value in config.items():
        if key in known:
            continue
        if isinstance(value, dict) and value.get("must_understand") is False:
            continue
        raise _fail(f"{what}: unknown member {key!r}")


def _known(config: dict[str, Any], known: set[str], what: str) -> dict[str, Any]:
    _check_extra(config, known, what)
    return {k: v for k, v in config.items() if k in known}


def _int(value: Any, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _fail(f"{what} must be an integer in [{low}, {high}], not {value!r}")
    return value


def _registry(config: dict[str, Any], what: str) -> Codec:
    try:
        return numcodecs.get_codec(dict(config))
    except Exception as e:  # the registry raises ValueError, TypeError, KeyError, ...
        raise _fail(f"{what}: numcodecs cannot build it: {e}") from e


def _build(name: str, config: dict[str, Any], dtype: np.dtype, ndim: int) -> tuple[str | None, Any]:
    what = f"codec {name!r}"
    if name == "bytes":
        cfg = _known(config, {"endian"}, what)
        endian = cfg.get("endian")
        if endian is not None and endian not in ENDIANS:
            raise _fail(f"bytes codec endian must be 'little' or 'big', not {endian!r}")
        return "array_bytes", BytesSerializer(endian)
    if name == "sharding_indexed":
        return "array_bytes", ShardingMarker(dict(config))
    if name == "transpose":
        cfg = _known(config, {"order"}, what)
        order = cfg.get("order")
        if (
            not isinstance(order, list)
            or any(isinstance(i, bool) or not isinstance(i, int) for i in order)
            or sorted(order) != list(range(ndim))
        ):
            raise _fail(f"transpose order must be a permutation of 0..{ndim - 1}, not {order!r}")
        return "array_array", Transpose(tuple(order))
    if name == "gzip":
        cfg = _known(config, {"level"}, what)
        level = _int(cfg.get("level"), "gzip level", 0, 9)
        return "bytes_bytes", BytesStage(name, _registry({"id": "gzip", "level": level}, what), cfg)
    if name == "zstd":
        cfg = _known(config, {"level", "checksum"}, what)
        level = _int(cfg.get("level", 0), "zstd level", -131072, 22)
        checksum = cfg.get("checksum", False)
        if not isinstance(checksum, bool):
            raise _fail(f"zstd checksum must be a boolean, not {checksum!r}")
        codec = _registry({"id": "zstd", "level": level, "checksum": checksum}, what)
        return "bytes_bytes", BytesStage(name, codec, cfg)
    if name == "blosc":
        return "bytes_bytes", _blosc(config, dtype)
    if name == "crc32c":
        _known(config, set(), what)
        # numcodecs' CRC32C: 4-byte little-endian checksum after the data, as the
        # spec's; "end" is spelled out so a changed default cannot move it.
        codec = _registry({"id": "crc32c", "location": "end"}, what)
        return "bytes_bytes", BytesStage(name, codec, {})
    if name.startswith(NUMCODECS_PREFIX):
        return _numcodecs(name, config, dtype)
    return None, None


def _blosc(config: dict[str, Any], dtype: np.dtype) -> BytesStage:
    what = "codec 'blosc'"
    cfg = _known(config, {"cname", "clevel", "shuffle", "typesize", "blocksize"}, what)
    cname = cfg.get("cname")
    if cname not in BLOSC_CNAMES:
        raise _fail(f"blosc cname {cname!r} is not one of {sorted(BLOSC_CNAMES)}")
    shuffle = cfg.get("shuffle")
    if shuffle not in BLOSC_SHUFFLES:
        raise _fail(f"blosc shuffle {shuffle!r} is not one of {list(BLOSC_SHUFFLES)}")
    clevel = _int(cfg.get("clevel"), "blosc clevel", 0, 9)
    blocksize = _int(cfg.get("blocksize", 0), "blosc blocksize", 0, 2**31 - 1)
    # Decoding reads the stride from the frame; typesize matters for encoding only.
    # The spec requires it unless noshuffle; when left out, the element size is
    # what zarr-python would have chosen.
    typesize = _int(cfg.get("typesize", max(dtype.itemsize, 1)), "blosc typesize", 1, 2**31 - 1)
    registry_config = {
        "id": "blosc",
        "cname": cname,
        "clevel": clevel,
        "shuffle": BLOSC_SHUFFLES[shuffle],
        "blocksize": blocksize,
        "typesize": typesize,
    }
    return BytesStage("blosc", _registry(registry_config, what), cfg)


def _numcodecs(name: str, config: dict[str, Any], dtype: np.dtype) -> tuple[str, Any]:
    codec_id = name[len(NUMCODECS_PREFIX) :]
    what = f"codec {name!r}"
    if "id" in config and config["id"] != codec_id:
        raise _fail(f"{what}: configuration id {config['id']!r} differs")
    registry_config = {**config, "id": codec_id}
    if codec_id in NUMCODECS_BYTES:
        return "bytes_bytes", BytesStage(name, _registry(registry_config, what), dict(config))
    if codec_id in NUMCODECS_ARRAY:
        for key in ("dtype", "astype"):
            if key in config and not _same_type(config[key], dtype):
                raise _fail(f"{what}: {key} {config[key]!r} is not the array's {dtype}")
        return "array_array", ArrayFilter(name, _registry(registry_config, what))
    raise _fail(f"{what} is not supported (only dtype-preserving filters and bytes codecs)")


def _same_type(value: Any, dtype: np.dtype) -> bool:
    try:
        other = np.dtype(value)
    except (TypeError, ValueError):
        return False
    return other.newbyteorder("<") == dtype.newbyteorder("<")


def _check_endian(endian: str | None, dtype: np.dtype) -> None:
    if endian is not None or dtype.newbyteorder(">") == dtype:
        return  # set, or a type whose bytes have no order
    if dtype.fields is not None:
        # zarr-python 3 writes struct arrays with a bare "bytes" (little-endian data).
        return
    raise _fail(f"bytes codec needs an endian for data type {dtype}")
