"""Which stored documents are an array's own metadata (pure): a disk cache finding one
stale lists the array's chunk versions at once (stores/cacheversions.py)."""

from __future__ import annotations

import pytest

from zarrfs.formats.metadata.hierarchy import NODE_LIMIT, array_document


@pytest.mark.parametrize(
    ("key", "value", "array"),
    [
        ("arr/.zarray", b"{}", True),
        ("a/b/zarr.json", b'{"zarr_format": 3, "node_type": "array"}', True),
        ("zarr.json", b'{"zarr_format": 3, "node_type": "array"}', True),  # the store
        ("g/zarr.json", b'{"zarr_format": 3, "node_type": "group"}', False),
        ("g/.zgroup", b"{}", False),
        ("arr/.zattrs", b'{"node_type": "array"}', False),
        ("arr/zarr.json", b"[" * 100_000, False),  # too deep: a metadata error
        ("arr/zarr.json", b'["node_type", "array"]', False),
        ("arr/zarr.json", b"not json", False),
        ("arr/0.0", b'{"node_type": "array"}', False),
    ],
)
def test_which_documents_name_an_array(key: str, value: bytes, array: bool) -> None:
    assert array_document(key, value) is array



def test_a_document_over_the_node_limit_names_no_array() -> None:
    padded = b'{"node_type": "array", "pad": "' + b" " * NODE_LIMIT + b'"}'
    assert not array_document("arr/zarr.json", padded)
