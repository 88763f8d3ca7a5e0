"""views/netcdf.py through the tree: ``group.nc``'s size from metadata alone, reads
at any offset equal to the whole file, and a resize changing header, size and data."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import netCDF4
import numpy as np
import pytest
import trio
import zarr

from tests.support.stores import CountingStore
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.formats.netcdf import encoding
from zarrfs.namespace.nodes import DirNode, FileNode
from zarrfs.namespace.tree import Tree


def make_store(root: Path) -> None:
    group = zarr.open_group(root, mode="w", zarr_format=2)
    a = group.create_array("a", shape=(10, 7), chunks=(3, 4), dtype="<f4", fill_value=-1.0)
    a[...] = np.arange(70, dtype="<f4").reshape(10, 7)
    a.attrs["_ARRAY_DIMENSIONS"] = ["t", "x"]
    b = group.create_array("b", shape=(5,), chunks=(2,), dtype=">i2")  # odd bytes: padded
    b[...] = [1, -2, 3, -4, 5]
    c = group.create_array("c", shape=(3,), chunks=(3,), dtype="|u1")
    c[...] = [0, 128, 255]


def tree_of(root: Path) -> tuple[Tree, CountingStore]:
    store = CountingStore(str(root))
    return Tree(store, ChunkCache(store, 1 << 22)), store


def whole(node: FileNode) -> bytes:
    return bytes(trio.run(node.view.read, 0, node.view.size + 100))


def parsed(data: bytes) -> dict[str, np.ndarray]:
    with tempfile.NamedTemporaryFile(suffix=".nc") as f:
        f.write(data)
        f.flush()
        with netCDF4.Dataset(f.name) as ds:
            ds.set_auto_mask(False)
            return {name: np.asarray(v[...]) for name, v in ds.variables.items()}


def test_size_reads_no_chunk_and_the_file_holds_the_arrays(tmp_path: Path) -> None:
    make_store(tmp_path)
    tree, store = tree_of(tmp_path)
    node = tree.resolve("group.nc")
    assert isinstance(node, FileNode)
    size = node.view.size
    chunks = [k for k in store.gets if re.fullmatch(r"[\d.]+", k.split("/")[-1])]
    assert chunks == [] and not store.range_calls
    data = whole(node)
    assert len(data) == size and size % 4 == 0
    assert "a/0.0" in store.gets  # what the filter above finds once chunks are read
    values = parsed(data)
    group = zarr.open_group(tmp_path, mode="r")
    for name in ("a", "b", "c"):
        assert np.array_equal(values[name], group[name][...]), name


def test_reads_at_any_offset_are_the_files_bytes(tmp_path: Path) -> None:
    make_store(tmp_path)
    tree, _ = tree_of(tmp_path)
    node = tree.resolve("group.nc")
    assert isinstance(node, FileNode)
    data = whole(node)
    rng = np.random.default_rng(3)

    async def check() -> None:
        for _ in range(300):
            offset = int(rng.integers(0, len(data) + 8))
            length = int(rng.integers(1, 120))
            got = await node.view.read(offset, length)
            assert bytes(got) == data[offset : offset + length], (offset, length)
            node.view.prefetch(offset + length)

    trio.run(check)


def test_a_resize_changes_header_size_and_data(tmp_path: Path) -> None:
    make_store(tmp_path)
    tree, _ = tree_of(tmp_path)
    node = tree.resolve("group.nc")
    assert isinstance(node, FileNode)
    before = node.view.size
    array = tree.resolve("a")
    assert isinstance(array, DirNode) and array.state is not None

    async def read_ahead() -> None:
        # Chunks decoded ahead of a stream, from the array as it is now.
        assert node.view.size
        node.view.prefetch(0)
        await trio.sleep(0.5)

    trio.run(read_ahead)
    array.state.resize(12)  # two rows of fill value more
    assert node.view.size == before + 2 * 7 * 4
    values = parsed(whole(node))
    assert values["a"].shape == (12, 7)
    assert np.array_equal(values["a"][10:], np.full((2, 7), -1, "f4"))
    assert np.array_equal(values["b"], [1, -2, 3, -4, 5])
    array.state.resize(4)
    values = parsed(whole(node))
    assert np.array_equal(values["a"], np.arange(28, dtype="f4").reshape(4, 7))


def test_a_write_after_read_ahead_is_read(tmp_path: Path) -> None:
    make_store(tmp_path)
    tree, _ = tree_of(tmp_path)
    node = tree.resolve("group.nc")
    array = tree.resolve("a")
    assert isinstance(node, FileNode) and isinstance(array, DirNode)
    state = array.state
    assert state is not None

    async def write_after_read_ahead() -> bytes:
        assert node.view.size  # the layout is made at the first stat
        node.view.prefetch(0)
        await trio.sleep(0.5)  # chunks of big-endian data decoded ahead
        await state.write(0, np.full(7, 42, "<f4").tobytes())
        return bytes(await node.view.read(0, node.view.size))

    values = parsed(trio.run(write_after_read_ahead))
    assert np.array_equal(values["a"][0], np.full(7, 42, "f4"))
    assert np.array_equal(values["a"][1:], np.arange(7, 70, dtype="f4").reshape(9, 7))


def test_a_stream_over_many_chunks(tmp_path: Path) -> None:
    """Chunks decoded ahead of a stream, its reads starting inside them, as the
    header shifts the data."""
    values = np.random.default_rng(5).standard_normal((700, 1000)).astype("<f8")
    group = zarr.open_group(tmp_path, mode="w", zarr_format=2)
    group.create_array("big", shape=values.shape, chunks=(37, 1000), dtype="<f8")[...] = values
    group.create_array("tail", shape=(3,), dtype="<i2")[...] = [7, 8, 9]
    tree, _ = tree_of(tmp_path)
    node = tree.resolve("group.nc")
    assert isinstance(node, FileNode)
    size = node.view.size

    async def stream() -> bytes:
        out = bytearray()
        while len(out) < size:
            out += await node.view.read(len(out), 128 << 10)
            node.view.prefetch(len(out))
            await trio.sleep(0)  # let the chunks ahead be decoded
        return bytes(out)

    data = trio.run(stream)
    assert data == whole(node)
    parsed_values = parsed(data)
    assert np.array_equal(parsed_values["big"], values)
    assert np.array_equal(parsed_values["tail"], [7, 8, 9])


def test_a_large_variable_after_a_gap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A large variable begins on a mebibyte: reads of the gap before it are zeros,
    and reads aligned in the file are aligned in its data (one chunk each)."""
    monkeypatch.setattr(encoding, "ALIGNED_FROM", 1000)
    values = np.arange(512 * 256, dtype="<f4").reshape(512, 256)  # 1 KiB rows
    group = zarr.open_group(tmp_path, mode="w", zarr_format=2)
    group.create_array("big", shape=values.shape, chunks=(256, 256), dtype="<f4")[...] = values
    tree, _ = tree_of(tmp_path)
    node = tree.resolve("group.nc")
    assert isinstance(node, FileNode)

    async def read_all() -> bytes:
        return bytes(await node.view.read(0, node.view.size))

    data = trio.run(read_all)
    assert len(data) == encoding.DATA_ALIGN + values.nbytes
    header = len(node.view._file()[0].header)
    assert data[header : encoding.DATA_ALIGN] == bytes(encoding.DATA_ALIGN - header)
    assert np.array_equal(parsed(data)["big"], values)

    async def aligned() -> None:
        got = await node.view.read(encoding.DATA_ALIGN + (256 << 10), 256 << 10)
        # A slice of the second chunk as decoded, not bytes copied together.
        assert isinstance(got, memoryview)
        assert bytes(got) == values[256:].astype(">f4").tobytes()

    trio.run(aligned)
