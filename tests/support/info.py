"""Reading the ``info`` file of an array, and the metadata and trees its tests use."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import trio

from tests.support.stores import CountingStore, v2_zarray
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.write.writeback import WriteBack
from zarrfs.formats.metadata.v2 import parse_array
from zarrfs.formats.model import ArrayMeta
from zarrfs.namespace.nodes import DirNode, FileNode
from zarrfs.namespace.tree import Tree
from zarrfs.views.info import INFO_NAME

# Every metadata document name of every layout: the only keys listing may read.
METADATA_NAMES = {
    "zarr.json",
    ".zarray",
    ".zattrs",
    ".zgroup",
    ".zmetadata",
    "meta",
    "attrs",
    "__zmeta__",
    "__zattr__",
}


def meta_of(path: str, doc: dict, attrs: dict | None = None) -> ArrayMeta:
    return parse_array(
        path, json.dumps(doc).encode(), json.dumps(attrs).encode() if attrs is not None else None
    )


def write_json(path: Path, doc: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def field(text: str, name: str) -> str:
    """The value of one ``Name : value`` line of an info text."""
    for line in text.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key.strip() == name:
            return value.strip()
    raise AssertionError(f"no {name!r} line in:\n{text}")


def initialized(text: str) -> tuple[int, int]:
    done, total = field(text, "Chunks initialized").split("/")
    return int(done), int(total)


def bytes_stored(text: str) -> int:
    return int(field(text, "No. bytes stored").split()[0])


class ScanCountingStore(CountingStore):
    """Also counts recursive listings (``scan``) per prefix."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.scans: Counter[str] = Counter()

    def scan(self, prefix: str) -> Iterator[tuple[str, int]]:
        self.scans[prefix] += 1
        return super().scan(prefix)


def make_tree(root: Path, *, writeback: bool = False) -> Tree:
    store = ScanCountingStore(str(root))
    cache = ChunkCache(store, 2**20)
    wb = WriteBack(store, cache, budget=1 << 30, interval=60) if writeback else None
    return Tree(store, cache, wb)


def assert_no_chunk_read(store: CountingStore) -> None:
    chunks = [k for k in store.gets if k.rpartition("/")[2] not in METADATA_NAMES]
    assert not chunks, f"chunk keys were read: {chunks}"


METAS = [
    meta_of("", v2_zarray([], [])),
    meta_of("scalar", v2_zarray([], [], "<f8", fill_value="NaN")),
    meta_of("empty", v2_zarray([0], [5])),
    meta_of("g/zero_axis", v2_zarray([0, 7], [3, 2], "|u1")),
    meta_of("one", v2_zarray([1], [1], "|b1", fill_value=False)),
    meta_of("a", v2_zarray([10], [3])),
    meta_of(
        "grid",
        v2_zarray([10, 12], [3, 5], dimension_separator="/"),
        {"_ARRAY_DIMENSIONS": "yx"},
    ),
    meta_of("dims", v2_zarray([10, 12], [3, 5]), {"_ARRAY_DIMENSIONS": ["y", "x"]}),
    meta_of("big", v2_zarray([10**6, 10**6], [1, 1], "<c16")),
    meta_of("huge", v2_zarray([2**40, 2**19], [1000, 7], "<u8")),
    meta_of("ten", v2_zarray([99, 10], [10, 1], ">i2", compressor={"id": "zlib", "level": 1})),
    meta_of("rec", v2_zarray([5, 5], [2, 2], [["x", "<i4"], ["y", "<f4"]], fill_value=None)),
    meta_of("unicode/温度", v2_zarray([3, 4], [3, 4], "<U3", fill_value="")),
]


def info_node(tree: Tree, array: str = "arr") -> FileNode:
    node = tree.resolve(array)
    assert isinstance(node, DirNode)
    assert INFO_NAME in tree.entries(node)
    info = tree.resolve(f"{array}/{INFO_NAME}")
    assert isinstance(info, FileNode)
    return info


def read_info(node: FileNode) -> str:
    """As a reader of a size-0 /proc-style file: until a read returns nothing."""

    async def read_all() -> bytes:
        out = b""
        while chunk := bytes(await node.view.read(len(out), 4096)):
            out += chunk
        return out

    return trio.run(read_all).decode()
