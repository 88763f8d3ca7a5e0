"""Hierarchies with consolidated metadata, written by hand: v2 (``.zmetadata``) and v3
(the root ``zarr.json`` listing every node), and a tree that counts what listing reads."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.stores import CountingStore, v2_zarray
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.namespace.tree import Tree

# A v3 array and group, and the consolidated member of a group inside the listing.
ARRAY = {
    "zarr_format": 3,
    "node_type": "array",
    "shape": [4],
    "data_type": "int32",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
    "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
    "fill_value": 0,
    "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
    "attributes": {},
}
GROUP = {"zarr_format": 3, "node_type": "group", "attributes": {}}
NESTED = {"kind": "inline", "must_understand": False, "metadata": {}}


def root_document(entries: dict[str, object], **member: object) -> dict[str, object]:
    consolidated = {"kind": "inline", "must_understand": False, "metadata": entries, **member}
    return {**GROUP, "consolidated_metadata": consolidated}


def write_store(root: Path, entries: dict[str, dict], **member: object) -> None:
    """Every node of ``entries`` as its own zarr.json, and the root listing them."""
    for path, doc in entries.items():
        stored = {k: v for k, v in doc.items() if k != "consolidated_metadata"}
        (root / path).mkdir(parents=True, exist_ok=True)
        (root / path / "zarr.json").write_text(json.dumps(stored, indent=2))
    root.mkdir(parents=True, exist_ok=True)
    (root / "zarr.json").write_text(json.dumps(root_document(entries, **member), indent=2))


def hierarchy_entries(groups: int, arrays: int) -> dict[str, dict]:
    entries: dict[str, dict] = {}
    for g in range(groups):
        entries[f"g{g}"] = {**GROUP, "consolidated_metadata": NESTED}
        for a in range(arrays):
            entries[f"g{g}/a{a}"] = ARRAY
    return entries


def counting_tree(root: Path, *, consolidated: bool = True) -> tuple[Tree, CountingStore]:
    store = CountingStore(str(root))
    return Tree(store, ChunkCache(store, 2**20), consolidated=consolidated), store


def write_v2_hierarchy(root: Path, groups: int, arrays: int) -> dict[str, object]:
    """``groups`` x ``arrays`` arrays, each with one chunk, and a zarr-2 style .zmetadata."""
    metadata: dict[str, object] = {".zgroup": {"zarr_format": 2}}
    (root / ".zgroup").parent.mkdir(parents=True, exist_ok=True)
    (root / ".zgroup").write_text(json.dumps({"zarr_format": 2}, indent=4))
    for g in range(groups):
        metadata[f"g{g}/.zgroup"] = {"zarr_format": 2}
        for a in range(arrays):
            metadata[f"g{g}/a{a}/.zarray"] = v2_zarray([4], [2])
            metadata[f"g{g}/a{a}/.zattrs"] = {"_ARRAY_DIMENSIONS": ["x"]}
    for key, value in metadata.items():
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value, indent=4, sort_keys=True))
    doc = {"metadata": metadata, "zarr_consolidated_format": 1}
    (root / ".zmetadata").write_text(json.dumps(doc, indent=4, sort_keys=True))
    return metadata
