"""The conformance corpus (tests/corpus): its entries grouped by store, and the check
that a store reads back byte-identical through the tree and views, without a mount.

expected.json holds, per array, the SHA-256 of the whole array in C order in its
metadata dtype: exactly what array.raw (and the data part of array.npy) must be.
Object-dtype arrays have no hash: they show their metadata and no flat files.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path

import numpy as np
import trio

from tests.support.paths import CORPUS
from zarrfs.daemon.build import MountOptions, build_operations
from zarrfs.namespace.nodes import DirNode, FileNode

METADATA_KEYS = ("zarr.json", ".zarray", ".zgroup", "meta", "__zmeta__")

# Every format: pre-v1 (0), v1, v2 and v3 (38 of the 222 v3 arrays are sharded).
FORMATS = {0, 1, 2, 3}


def sharded(entry: str) -> bool:
    document = CORPUS / "data" / entry / "zarr.json"
    return document.is_file() and "sharding_indexed" in document.read_text()


def _is_node(directory: Path) -> bool:
    return any((directory / key).is_file() for key in METADATA_KEYS)


@cache
def all_expected() -> dict[str, dict]:
    return json.loads((CORPUS / "expected.json").read_text())


@cache
def expected() -> dict[str, dict]:
    """The entries of the formats zarrfs reads."""
    return {k: v for k, v in all_expected().items() if v["format"] in FORMATS}


def store_root(entry: str) -> str:
    """The topmost directory above ``entry`` that is itself a Zarr node."""
    parts = entry.split("/")
    root = len(parts)
    for depth in range(len(parts), 0, -1):
        if _is_node(CORPUS / "data" / Path(*parts[:depth])):
            root = depth
        else:
            break
    return "/".join(parts[:root])


@cache
def stores() -> dict[str, list[str]]:
    by_root: dict[str, list[str]] = {}
    for entry in expected():
        by_root.setdefault(store_root(entry), []).append(entry)
    return dict(sorted(by_root.items()))


def relative(entry: str, root: str) -> str:
    return entry[len(root) + 1 :] if entry != root else ""


def numpy_dtype(spec: object) -> object:
    """expected.json's dtype (a string, or a structured type as nested lists) for numpy."""
    if isinstance(spec, list):
        return [tuple(numpy_dtype(x) if isinstance(x, list) else x for x in f) for f in spec]
    return spec


def assert_store_reads_back(root: str) -> None:
    """Every array of the corpus store ``root``, read through the tree and views
    without a mount, hashes to its expected.json entry."""
    ops = build_operations(str(CORPUS / "data" / root), MountOptions())

    async def check() -> None:
        for entry in stores()[root]:
            want = expected()[entry]
            rel = relative(entry, root)
            node = ops.tree.resolve(rel)
            assert isinstance(node, DirNode) and node.is_array, entry
            names = set(ops.tree.entries(node))
            if want["sha256_c_order"] is None:
                assert "array.raw" not in names and "array.npy" not in names, entry
                continue
            raw = ops.tree.lookup(node, "array.raw")
            assert isinstance(raw, FileNode)
            data = await raw.view.read(0, raw.view.size)
            assert hashlib.sha256(data).hexdigest() == want["sha256_c_order"], entry
            itemsize = np.dtype(numpy_dtype(want["dtype"])).itemsize
            assert raw.view.size == int(np.prod(want["shape"])) * itemsize

    trio.run(check)
