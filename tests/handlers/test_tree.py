"""The virtual namespace: classification of store directories, laziness, layouts."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import trio

from tests.support.stores import CountingStore, v2_zarray
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.errors import MetadataError, NotFoundError
from zarrfs.namespace.nodes import DirNode, FileNode
from zarrfs.namespace.tree import Tree


def write_json(path: Path, doc: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def v2_array(path: Path, shape: list[int], chunks: list[int], dtype: str = "<i4") -> None:
    write_json(path / ".zarray", v2_zarray(shape, chunks, dtype))


def make_tree(root: Path) -> Tree:
    store = CountingStore(str(root))
    return Tree(store, ChunkCache(store, 2**20))


def read_all(tree: Tree, path: str) -> bytes:
    node = tree.resolve(path)
    assert isinstance(node, FileNode)
    return trio.run(node.view.read, 0, node.view.size)


def test_v2_group_holding_v1_and_pre_v1_arrays(tmp_path: Path, corpus: Path) -> None:
    write_json(tmp_path / ".zgroup", {"zarr_format": 2})
    generated = corpus / "data" / "generated"
    shutil.copytree(generated / "v1-zarr-1.1.0" / "i4_2d_blosc_lz4", tmp_path / "old1")
    shutil.copytree(generated / "v0-zarr-0.4.0" / "i4_2d_lz4_shuffle", tmp_path / "old0")
    v2_array(tmp_path / "new", [3], [2])
    tree = make_tree(tmp_path)
    assert list(tree.entries(tree.root)) == [".zgroup", "group.nc", "new", "old0", "old1"]
    expected = np.arange(120, dtype="<i4").reshape(10, 12).tobytes()
    assert read_all(tree, "old0/array.raw") == expected
    assert read_all(tree, "old1/array.raw") == expected
    old1 = tree.resolve("old1")
    assert isinstance(old1, DirNode)
    flat = ["array.hdr", "array.nhdr", "array.npy", "array.raw", "array.tif"]
    assert list(tree.entries(old1)) == [*flat, "attrs", "info", "meta"]
    old0 = tree.resolve("old0")
    assert isinstance(old0, DirNode)
    assert list(tree.entries(old0)) == ["__zattr__", "__zmeta__", *flat, "info"]


def test_several_layouts_in_one_directory_show_the_newest(
    tmp_path: Path, corpus: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_json(tmp_path / ".zgroup", {"zarr_format": 2})
    both = tmp_path / "both"
    shutil.copytree(corpus / "data/generated/v1-zarr-1.1.0/i4_2d_blosc_lz4", both)
    v2_array(both, [4], [4], "<u1")
    with caplog.at_level(logging.WARNING):
        tree = make_tree(tmp_path)
        node = tree.resolve("both")
    assert isinstance(node, DirNode) and node.meta.zarr_format == 2
    assert ".zarray" in tree.entries(node) and "meta" not in tree.entries(node)
    assert "both also holds meta" in caplog.text


def test_array_and_group_in_one_directory_is_an_array(tmp_path: Path) -> None:
    write_json(tmp_path / ".zgroup", {"zarr_format": 2})
    v2_array(tmp_path / "x", [2], [2])
    write_json(tmp_path / "x" / ".zgroup", {"zarr_format": 2})
    tree = make_tree(tmp_path)
    node = tree.resolve("x")
    assert isinstance(node, DirNode) and node.is_array
    assert ".zgroup" not in tree.entries(node)


def test_listing_is_lazy_and_reads_no_chunk(tmp_path: Path) -> None:
    write_json(tmp_path / ".zgroup", {"zarr_format": 2})
    for g in range(3):
        write_json(tmp_path / f"g{g}" / ".zgroup", {"zarr_format": 2})
        for a in range(4):
            v2_array(tmp_path / f"g{g}" / f"a{a}", [10], [5])
            (tmp_path / f"g{g}" / f"a{a}" / "0").write_bytes(bytes(20))
    tree = make_tree(tmp_path)
    store = tree.store
    assert isinstance(store, CountingStore)
    assert not any(k.startswith("g0/a0/") for k in store.gets)  # children not read yet
    tree.entries(tree.root)
    g0 = tree.resolve("g0")
    assert isinstance(g0, DirNode)
    tree.entries(g0)
    assert not any(k.startswith("g1/a0/") for k in store.gets)  # other groups untouched
    for g in range(3):
        for a in range(4):
            node = tree.resolve(f"g{g}/a{a}/array.npy")
            assert isinstance(node, FileNode) and node.view.size > 0
    assert not any(k.endswith("/0") for k in store.gets), "a chunk was read"
    assert max(store.gets.values()) == 1, "a metadata key was read twice"


def test_root_without_metadata_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    with pytest.raises(MetadataError, match="no Zarr group or array metadata"):
        make_tree(tmp_path)


def test_directories_without_metadata_are_hidden(tmp_path: Path) -> None:
    write_json(tmp_path / ".zgroup", {"zarr_format": 2})
    v2_array(tmp_path / "plain" / "deeper", [1], [1])
    (tmp_path / "stray.txt").write_text("x")
    tree = make_tree(tmp_path)
    assert list(tree.entries(tree.root)) == [".zgroup"]
    with pytest.raises(NotFoundError):
        tree.resolve("plain")


V3_GROUP = {"zarr_format": 3, "node_type": "group", "attributes": {"v": 3}}


@pytest.mark.parametrize(
    "older",
    [
        {".zgroup": {"zarr_format": 2}, ".zattrs": {"v": 2}},
        {".zattrs": {"v": 2}},
        {".zarray": v2_zarray([4], [2])},
        {"meta": {"zarr_format": 1}, "attrs": {}},
    ],
    ids=["zgroup", "zattrs-only", "zarray", "v1"],
)
def test_zarr_json_beside_older_metadata_is_v3_with_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, older: dict[str, object]
) -> None:
    write_json(tmp_path / ".zgroup", {"zarr_format": 2})
    write_json(tmp_path / "both" / "zarr.json", V3_GROUP)
    for name, doc in older.items():
        write_json(tmp_path / "both" / name, doc)
    with caplog.at_level(logging.WARNING):
        tree = make_tree(tmp_path)
        node = tree.resolve("both")
        assert isinstance(node, DirNode)
        names = list(tree.entries(node))
    assert node.meta.zarr_format == 3 and node.meta.attrs == {"v": 3}
    assert names == ["zarr.json"]
    lines = [r.getMessage() for r in caplog.records if "both" in r.getMessage()]
    assert lines == [f"both also holds {', '.join(older)}; showing it as zarr.json"]


def test_root_zarr_json_is_read_once_beside_older_root_metadata(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_json(tmp_path / "zarr.json", V3_GROUP)
    write_json(tmp_path / ".zgroup", {"zarr_format": 2})
    write_json(tmp_path / ".zmetadata", {"zarr_consolidated_format": 1, "metadata": {}})
    with caplog.at_level(logging.WARNING):
        tree = make_tree(tmp_path)
    assert tree.root.meta.zarr_format == 3
    assert list(tree.entries(tree.root)) == ["zarr.json"]  # no .zmetadata of the v2 layout
    assert "/ also holds .zgroup; showing it as zarr.json" in caplog.text
    store = tree.store
    assert isinstance(store, CountingStore)
    assert store.gets["zarr.json"] == 1 and ".zmetadata" not in store.gets
