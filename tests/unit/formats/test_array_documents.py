"""Which stored documents are an array's own metadata, and at most how many keys its
directory holds (pure): a disk cache finding one stale lists the array's chunk
versions at once (stores/cacheversions.py), and checks the document by that listing
where one page of it answers."""

from __future__ import annotations

import pytest

from zarrfs.formats.metadata.hierarchy import MANY_KEYS, NODE_LIMIT, array_keys


@pytest.mark.parametrize(
    ("key", "value", "keys"),
    [
        ("arr/.zarray", b"{}", MANY_KEYS),  # an array, of a grid it does not name
        ("arr/.zarray", b"not json", MANY_KEYS),
        ("arr/.zarray", b'{"shape": [100, 10], "chunks": [30, 10]}', 4 + 3),
        ("arr/.zarray", b'{"shape": [0, 10], "chunks": [30, 10]}', 0 + 3),
        ("arr/.zarray", b'{"shape": [], "chunks": []}', 1 + 3),  # one chunk, "0"
        ("arr/.zarray", b'{"shape": [100], "chunks": [0]}', MANY_KEYS),
        ("arr/.zarray", b'{"shape": [100], "chunks": [10, 10]}', MANY_KEYS),
        ("arr/.zarray", b'{"shape": [100.0], "chunks": [10]}', MANY_KEYS),
        ("arr/.zarray", b'{"shape": [-100], "chunks": [10]}', MANY_KEYS),
        ("arr/.zarray", b'{"shape": [true], "chunks": [1]}', MANY_KEYS),
        ("arr/.zarray", b'{"shape": [1e300], "chunks": [1]}', MANY_KEYS),
        ("arr/.zarray", b'{"shape": [9999999999999, 9999999], "chunks": [1, 1]}', MANY_KEYS),
        ("a/b/zarr.json", b'{"zarr_format": 3, "node_type": "array"}', MANY_KEYS),
        (
            "a/b/zarr.json",
            b'{"node_type": "array", "shape": [8192, 16384], "chunk_grid": '
            b'{"name": "regular", "configuration": {"chunk_shape": [256, 16384]}}}',
            32 + 3,
        ),
        (
            "a/b/zarr.json",
            b'{"node_type": "array", "shape": [8], "chunk_grid": '
            b'{"name": "rectilinear", "configuration": {"chunk_shape": [1]}}}',
            MANY_KEYS,
        ),
        ("zarr.json", b'{"zarr_format": 3, "node_type": "array"}', MANY_KEYS),  # the store
        ("g/zarr.json", b'{"zarr_format": 3, "node_type": "group"}', None),
        ("g/.zgroup", b"{}", None),
        ("arr/.zattrs", b'{"node_type": "array"}', None),
        ("arr/zarr.json", b"[" * 100_000, None),  # too deep: a metadata error
        ("arr/zarr.json", b'["node_type", "array"]', None),
        ("arr/zarr.json", b"not json", None),
        ("arr/0.0", b'{"node_type": "array"}', None),
    ],
)
def test_which_documents_name_an_array_and_its_keys(
    key: str, value: bytes, keys: int | None
) -> None:
    assert array_keys(key, value) == keys



def test_a_document_over_the_node_limit_names_no_array() -> None:
    padded = b'{"node_type": "array", "pad": "' + b" " * NODE_LIMIT + b'"}'
    assert array_keys("arr/zarr.json", padded) is None
