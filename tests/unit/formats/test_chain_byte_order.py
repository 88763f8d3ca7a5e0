"""A codec chain decoding its chunks to another byte order (``CodecChain.serving``,
pure): the values are the same, a chain that decodes into a caller's buffer still
does, and what it leaves in each thread's scratch never leaks into a result."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from zarrfs.formats.codecs.chain import CodecChain
from zarrfs.formats.codecs.pipeline import CodecPipeline
from zarrfs.formats.metadata.v3 import parse_node
from zarrfs.formats.model import ArrayMeta

BLOSC = {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1}
ZLIB = {"id": "zlib", "level": 1}
DELTA = {"id": "delta", "dtype": "<i4"}


def v2_chain(
    dtype: str, compressor: dict[str, Any] | None, filters: list[Any], order: str = "C"
) -> CodecChain:
    return CodecPipeline(compressor, filters).chain(np.dtype(dtype), (6, 5), order)


def v3_chain(endian: str) -> CodecChain:
    doc = {
        "zarr_format": 3, "node_type": "array", "shape": [6, 5], "data_type": "int32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [6, 5]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
        "codecs": [{"name": "bytes", "configuration": {"endian": endian}}, {"name": "zstd"}],
    }  # fmt: skip
    meta = parse_node("a", json.dumps(doc).encode())
    assert isinstance(meta, ArrayMeta)
    return meta.codecs


CHAINS = {
    "blosc": lambda: v2_chain("<i4", BLOSC, []),
    "zlib, order F": lambda: v2_chain("<i4", ZLIB, [], "F"),
    "raw": lambda: v2_chain("<i4", None, []),
    "a filter": lambda: v2_chain("<i4", ZLIB, [DELTA]),
    "v3 stored little-endian": lambda: v3_chain("little"),
    "v3 stored big-endian": lambda: v3_chain("big"),
}


def chunks(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-(2**31), 2**31, (6, 5), dtype="<i4")


@pytest.mark.parametrize("name", list(CHAINS))
def test_served_big_endian_the_values_are_the_same(name: str) -> None:
    chain = CHAINS[name]()
    served = chain.serving(np.dtype(">i4"))
    assert served.stored_dtype == chain.stored_dtype
    assert served.decodes_into == chain.decodes_into
    for seed in range(3):  # several chunks through one thread's scratch
        values = chunks(seed)
        stored = chain.encode(values.astype(chain.dtype))
        plain = served.decode(stored)
        assert plain.dtype == np.dtype(">i4") and np.array_equal(plain, values)
        if served.decodes_into:
            out = np.empty(values.nbytes, dtype=np.uint8)
            into = served.decode(stored, None, out)
            assert into.base is out and np.array_equal(into, values)


def test_a_chain_stored_big_endian_decodes_into_a_buffer() -> None:
    """The elements are turned round into the caller's buffer, not a new one."""
    chain = v3_chain("big")
    assert chain.stored_dtype == np.dtype(">i4") and chain.dtype == np.dtype("<i4")
    assert chain.decodes_into
    values = chunks(7)
    out = np.empty(values.nbytes, dtype=np.uint8)
    decoded = chain.decode(chain.encode(values), None, out)
    assert decoded.base is out and decoded.dtype == np.dtype("<i4")
    assert np.array_equal(decoded, values)


def test_only_the_same_elements_are_served() -> None:
    chain = v2_chain("<i4", BLOSC, [])
    with pytest.raises(ValueError, match="another byte order"):
        chain.serving(np.dtype("<f4"))
