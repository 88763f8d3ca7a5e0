"""zarr.json parsing (pure): nodes, chunk key encodings, what is shown as metadata only."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from zarrfs.errors import MetadataError
from zarrfs.formats.metadata.detect import detect
from zarrfs.formats.metadata.v3 import parse_node, replace_consolidated_entry
from zarrfs.formats.model import ArrayMeta, GroupMeta


def array_doc(**extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [10, 6],
        "data_type": "int16",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 3]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 7,
        "codecs": [{"name": "bytes", "configuration": {"endian": "big"}}],
        "attributes": {"units": "m"},
        "dimension_names": ["y", None],
    }
    doc.update(extra)
    return doc


def parse(doc: dict[str, Any], path: str = "a/b") -> ArrayMeta:
    meta = parse_node(path, json.dumps(doc).encode())
    assert isinstance(meta, ArrayMeta)
    return meta


def test_an_array() -> None:
    meta = parse(array_doc())
    assert meta.zarr_format == 3 and meta.shape == (10, 6) and meta.chunks == (4, 3)
    assert meta.dtype == np.dtype("<i2")  # array.raw is little-endian, whatever is stored
    assert meta.fill_value == np.array(7, "<i2").tobytes()
    assert meta.attrs == {"units": "m"} and meta.dimension_names == ("y", None)
    assert meta.documents == ("zarr.json",) and meta.unsupported is None
    stored = np.arange(12, dtype=">i2").tobytes()
    chunk = meta.codecs.decode(stored)
    assert chunk.dtype == np.dtype("<i2") and chunk.ravel().tolist() == list(range(12))
    assert meta.codecs.encode(chunk) == stored


@pytest.mark.parametrize(
    ("encoding", "index", "key"),
    [
        ({"name": "default", "configuration": {"separator": "/"}}, (1, 2), "a/b/c/1/2"),
        ({"name": "default", "configuration": {"separator": "."}}, (1, 2), "a/b/c.1.2"),
        ({"name": "default"}, (0, 10), "a/b/c/0/10"),
        ({"name": "v2", "configuration": {"separator": "."}}, (3, 0), "a/b/3.0"),
        ({"name": "v2", "configuration": {"separator": "/"}}, (3, 0), "a/b/3/0"),
        ({"name": "v2"}, (3, 0), "a/b/3.0"),
    ],
)
def test_chunk_key_encodings(encoding: dict, index: tuple[int, ...], key: str) -> None:
    meta = parse(array_doc(chunk_key_encoding=encoding))
    assert meta.chunk_keys(index) == [key]
    assert meta.chunk_index(key) == index
    assert meta.chunk_index("a/b/zarr.json") is None
    assert meta.chunk_index("a/b/c/01/2") is None


def test_zero_dimensional_keys() -> None:
    meta = parse(
        array_doc(
            shape=[],
            chunk_grid={"name": "regular", "configuration": {"chunk_shape": []}},
            dimension_names=None,
        )
    )
    assert meta.chunk_keys(()) == ["a/b/c"]
    assert meta.chunk_index("a/b/c") == ()


def test_a_group() -> None:
    meta = parse_node("g", b'{"zarr_format": 3, "node_type": "group", "attributes": {"a": 1}}')
    assert isinstance(meta, GroupMeta) and meta.attrs == {"a": 1} and meta.zarr_format == 3


@pytest.mark.parametrize(
    ("doc", "why"),
    [
        (array_doc(data_type="string", fill_value=""), "no fixed"),
        (array_doc(storage_transformers=[{"name": "x"}]), "transformers"),
    ],
)
def test_metadata_only_arrays(doc: dict, why: str) -> None:
    meta = parse(doc)
    assert meta.unsupported is not None and why in meta.unsupported, meta.unsupported


@pytest.mark.parametrize(
    "doc",
    [
        array_doc(zarr_format=2),
        array_doc(node_type="thing"),
        array_doc(data_type="no_such_type"),
        array_doc(chunk_grid={"name": "rectilinear"}),
        array_doc(chunk_key_encoding={"name": "other"}),
        array_doc(codecs=[{"name": "no_such_codec"}]),
        array_doc(extension={"must_understand": True}),
        array_doc(fill_value="0x12"),
        {k: v for k, v in array_doc().items() if k != "shape"},
    ],
)
def test_invalid_documents(doc: dict) -> None:
    with pytest.raises(MetadataError):
        parse_node("a", json.dumps(doc).encode())


def test_extensions_that_need_not_be_understood_are_ignored() -> None:
    assert parse(array_doc(extension={"must_understand": False})).unsupported is None


def test_zarr_json_wins_over_older_metadata() -> None:
    docs = {"zarr.json": json.dumps(array_doc()).encode(), ".zarray": b"{}"}
    found = detect("a/b", docs)
    assert found is not None and found.meta.zarr_format == 3 and found.ignored == (".zarray",)


def test_replace_consolidated_entry_keeps_the_rest() -> None:
    root = json.dumps(
        {
            "zarr_format": 3,
            "node_type": "group",
            "consolidated_metadata": {"kind": "inline", "metadata": {"x": array_doc(), "y": {}}},
        },
        indent=2,
    ).encode()
    new = replace_consolidated_entry(root, "x", json.dumps(array_doc(shape=[12, 6])).encode())
    assert new is not None
    doc = json.loads(new)
    assert doc["consolidated_metadata"]["metadata"]["x"]["shape"] == [12, 6]
    assert doc["consolidated_metadata"]["metadata"]["y"] == {}
    assert new.startswith(b'{\n  "zarr_format"')
    assert replace_consolidated_entry(root, "z", b"{}") is None
    assert replace_consolidated_entry(b'{"zarr_format": 3}', "x", b"{}") is None


def _sharded(**extra: Any) -> dict[str, Any]:
    inner = [{"name": "bytes", "configuration": {"endian": "little"}}]
    sharding = {"chunk_shape": [2, 2], "codecs": inner, "index_codecs": inner}
    codecs = [{"name": "sharding_indexed", "configuration": sharding}]
    return array_doc(shape=[8, 8], chunk_grid=regular([4, 4]), codecs=codecs, **extra)


def regular(chunks: list[int]) -> dict[str, Any]:
    return {"name": "regular", "configuration": {"chunk_shape": chunks}}


def test_arrays_of_like_metadata_share_what_it_says_but_keep_their_own() -> None:
    """Parsed once per text but for the attributes, path and dimension names: two
    arrays of like metadata share their codec chain, and keep their own keys."""
    for doc in (array_doc, _sharded):
        a = parse_node("g/a", json.dumps(doc(attributes={"i": 1}, dimension_names=None)).encode())
        b = parse_node("g/b", json.dumps(doc(attributes={}, dimension_names=["y", "x"])).encode())
        assert isinstance(a, ArrayMeta) and isinstance(b, ArrayMeta)
        assert a.codecs is b.codecs
        assert (a.attrs, b.attrs, a.dimension_names) == ({"i": 1}, {}, None)
        assert b.dimension_names == ("y", "x")
        if a.shards is None:
            assert a.chunk_keys((0, 1)) == ["g/a/c/0/1"] and b.chunk_keys((0, 1)) == ["g/b/c/0/1"]
        else:
            assert b.shards is not None
            assert a.shards.shard_keys((0, 1)) == ["g/a/c/0/1"]
            assert b.shards.shard_keys((0, 1)) == ["g/b/c/0/1"]
            assert a.shards.shard_index("g/a/c/1/0") == (1, 0)


@pytest.mark.parametrize("fill", [1, 1.0, True])
def test_like_texts_that_json_tells_apart_are_parsed_apart(fill: object) -> None:
    """1, 1.0 and true are different fill values (true is no int16): one text's
    result is never taken for another's."""
    doc = array_doc(fill_value=fill)
    if fill is True:
        with pytest.raises(MetadataError):
            parse_node("a", json.dumps(doc).encode())
        with pytest.raises(MetadataError):  # a failure is not kept
            parse_node("a", json.dumps(doc).encode())
        return
    meta = parse_node("a", json.dumps(doc).encode())
    assert isinstance(meta, ArrayMeta) and meta.fill_value == np.int16(1).tobytes()
    floats = parse_node("b", json.dumps(array_doc(data_type="float32", fill_value=fill)).encode())
    assert isinstance(floats, ArrayMeta) and floats.fill_value == np.float32(1).tobytes()
