"""The shared conformance corpus reads back byte-identical, through handlers and a real mount.

expected.json holds, per array, the SHA-256 of the whole array in C order in its
metadata dtype: exactly what array.raw (and the data part of array.npy) must be.
Object-dtype arrays have no hash: they show their metadata and no flat files.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import trio

from tests.conftest import CORPUS
from tests.mounting import mounted
from zarrfs.daemon.build import MountOptions, build_operations
from zarrfs.namespace.tree import DirNode, FileNode
from zarrfs.stores.base import Store

METADATA_KEYS = ("zarr.json", ".zarray", ".zgroup", "meta", "__zmeta__")

# Every format: pre-v1 (0), v1, v2 and v3 (38 of the 222 v3 arrays are sharded).
FORMATS = {0, 1, 2, 3}
SHARDED = 38


def _sharded(entry: str) -> bool:
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


def test_corpus_is_complete(corpus: Path) -> None:
    assert len(all_expected()) == 480
    assert len(expected()) == 480
    assert sum(len(v) for v in stores().values()) == 480
    assert sum(_sharded(entry) for entry in expected()) == SHARDED
    formats = {e["format"] for e in all_expected().values()}
    assert formats == {0, 1, 2, 3}


@pytest.mark.parametrize("root", list(stores()))
def test_corpus_handlers(root: str, corpus: Path) -> None:
    """Every array of the store, read through the tree and views without a mount."""
    ops = build_operations(str(corpus / "data" / root), MountOptions())

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
            assert (
                raw.view.size
                == int(np.prod(want["shape"])) * np.dtype(_dtype(want["dtype"])).itemsize
            )

    trio.run(check)


def test_corpus_decodes_from_views(corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks handed over as read-only memoryviews (as the S3 store hands obstore's
    buffers to the decoders, uncopied) decode to the same bytes, for every array."""

    def as_view(self: Store, key: str, *, limit: int | None = None) -> memoryview | None:
        value = self.get(key, limit=limit)
        return None if value is None else memoryview(value)

    monkeypatch.setattr(Store, "get_buffer", as_view)
    for root in stores():
        test_corpus_handlers(root, corpus)


def _dtype(spec: object) -> object:
    if isinstance(spec, list):
        return [tuple(_dtype(x) if isinstance(x, list) else x for x in f) for f in spec]
    return spec


@pytest.mark.mount
@pytest.mark.parametrize("root", list(stores()))
def test_corpus_mounted(root: str, corpus: Path) -> None:
    """The same bytes through the kernel: array.raw, and array.npy via np.load(mmap)."""
    with mounted(corpus / "data" / root, "--read-only") as m:
        for entry in stores()[root]:
            want = expected()[entry]
            directory = m.path / relative(entry, root)
            listing = os.listdir(directory)
            if want["sha256_c_order"] is None:
                assert "array.raw" not in listing and "array.npy" not in listing, entry
                continue
            data = (directory / "array.raw").read_bytes()
            assert hashlib.sha256(data).hexdigest() == want["sha256_c_order"], entry
            arr = np.load(directory / "array.npy", mmap_mode="r")
            assert list(arr.shape) == want["shape"], entry
            npy_data = np.ascontiguousarray(arr).tobytes()
            del arr  # drop the mapping, or the mount stays busy
            assert hashlib.sha256(npy_data).hexdigest() == want["sha256_c_order"], entry
        assert "Traceback" not in m.log()
