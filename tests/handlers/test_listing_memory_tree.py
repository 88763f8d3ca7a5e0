"""What a listed node of a consolidated hierarchy keeps, called without a mount.

The tree keeps a few hundred bytes per listed array directory; what a node is (its
parsed metadata, its documents as shown, its array state and files) is kept for
the most recently used ``MAX_LOADED_NODES`` only and made again from the document
when asked. These tests shrink that bound to a handful, so that a walk of a small
hierarchy drops and makes again most nodes, and check that nothing a program sees
changes: names, sizes, documents, inode numbers, the one array state of an array in
use, the new shape of an array resized through the mount, and the one log line.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyfuse3
import pytest
import trio

from tests.support.consolidated import write_v2_hierarchy
from tests.support.handlers import open_dir
from tests.support.stores import v2_zarray
from zarrfs.core.arrays import ArrayState
from zarrfs.daemon.build import MountOptions, build_operations
from zarrfs.fuse import operations as operations_module
from zarrfs.fuse.operations import Operations
from zarrfs.namespace import recent
from zarrfs.namespace.nodes import DirNode, FileNode
from zarrfs.namespace.tree import Tree

ROOT = pyfuse3.ROOT_INODE
FEW = 8  # nodes loaded at once in these tests
# What the tree and the inode table keep per listed array directory (7 entries),
# beside the document itself: docs/semantics.md, "Limits and hostile input".
KEPT_PER_ARRAY = 1024


def run(fn: Any, *args: Any) -> Any:
    return trio.run(fn, *args)


@pytest.fixture
def few(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recent, "MAX_LOADED_NODES", FEW)


@pytest.fixture(autouse=True)
def no_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """readdir replies go nowhere (there is no kernel)."""
    monkeypatch.setattr(operations_module.pyfuse3, "readdir_reply", lambda *_: True)


@pytest.fixture
def replies(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bytes, int]]:
    """What readdir replied: (name, inode), as the kernel would be told."""
    told: list[tuple[bytes, int]] = []

    def reply(token: object, name: bytes, attr: pyfuse3.EntryAttributes, next_id: int) -> bool:
        told.append((name, attr.st_ino))
        return True

    monkeypatch.setattr(operations_module.pyfuse3, "readdir_reply", reply)
    return told


def write_one_line(root: Path, groups: int, arrays: int) -> None:
    """Only a root group and a one-line .zmetadata (as zarr-python 3 writes it)."""
    metadata: dict[str, object] = {".zgroup": {"zarr_format": 2}}
    for g in range(groups):
        metadata[f"g{g}/.zgroup"] = {"zarr_format": 2}
        for a in range(arrays):
            metadata[f"g{g}/a{a}/.zarray"] = v2_zarray([10 + a], [2])
            metadata[f"g{g}/a{a}/.zattrs"] = {"_ARRAY_DIMENSIONS": ["x"], "n": a}
    root.mkdir(parents=True)
    (root / ".zgroup").write_text(json.dumps({"zarr_format": 2}))
    doc = {"metadata": metadata, "zarr_consolidated_format": 1}
    (root / ".zmetadata").write_text(json.dumps(doc))


async def walk(
    ops: Operations, inode: int, path: str = "", told: list[tuple[bytes, int]] | None = None
) -> dict[str, tuple[int, int]]:
    """``ls -R`` and a ``stat`` of every entry: path → (inode, size). ``told``: what
    readdir replies are recorded in (each inode must be the one lookup gives)."""
    seen = {}
    fh = await open_dir(ops, inode)
    listing = list(ops.dirs.get(fh))
    start = len(told) if told is not None else 0
    await ops.readdir(fh, 0, None)
    await ops.releasedir(fh)
    replied = dict(told[start:]) if told is not None else {}
    for name, _ in listing:
        child = f"{path}/{os.fsdecode(name)}".lstrip("/")
        attr = await ops.lookup(inode, name, None)
        assert replied.get(name, attr.st_ino) == attr.st_ino, child
        again = await ops.getattr(attr.st_ino, None)
        assert again.st_ino == attr.st_ino
        seen[child] = (attr.st_ino, again.st_size)
        if attr.st_mode & 0o040000:
            seen.update(await walk(ops, attr.st_ino, child, told))
    return seen


def shown(tree: Tree) -> dict[str, bytes | int]:
    """Every file of the tree: a document's bytes, the size of any other file."""
    found: dict[str, bytes | int] = {}
    stack: list[DirNode] = [tree.root]
    while stack:
        node = stack.pop()
        for name, child in tree.entries(node).items():
            path = f"{node.path}/{name}".lstrip("/")
            if isinstance(child, DirNode):
                stack.append(child)
            else:
                documents = getattr(child.view, "documents", None)
                found[path] = documents[name] if documents is not None else child.view.size
    return found


def live_states() -> Iterator[ArrayState]:
    return (o for o in gc.get_objects() if isinstance(o, ArrayState))


def test_a_listed_array_keeps_a_few_hundred_bytes(tmp_path: Path, few: None) -> None:
    """``ls -R`` and ``stat`` of 2 000 arrays through the handlers: what stays is
    the bytes of the listing (no parsed metadata, array state or file of an array
    not in use), and array states are freed as soon as dropped (no cycle)."""
    root = tmp_path / "s.zarr"
    arrays = 2_000
    write_one_line(root, groups=20, arrays=arrays // 20)
    gc.collect()
    gc.disable()  # what is freed must be freed by reference counting
    tracemalloc.start()
    try:
        ops = build_operations(str(root), MountOptions(read_only=True))
        opened, _ = tracemalloc.get_traced_memory()
        seen = run(walk, ops, ROOT)
        raws = sum(p.endswith("/array.raw") for p in seen)
        del seen
        states = sum(1 for _ in live_states())
        gc.collect()  # what trio and the walk itself left in cycles
        walked, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        gc.enable()
    assert raws == arrays
    assert (walked - opened) / arrays < KEPT_PER_ARRAY, (walked - opened) / arrays
    assert states <= FEW + 1, states


def test_dropped_nodes_show_what_they_showed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replies: list[tuple[bytes, int]]
) -> None:
    root = tmp_path / "s.zarr"
    write_v2_hierarchy(root, groups=4, arrays=12)
    once = build_operations(str(root), MountOptions(read_only=True))
    expected = shown(once.tree)
    first = run(walk, once, ROOT)
    monkeypatch.setattr(recent, "MAX_LOADED_NODES", FEW)
    ops = build_operations(str(root), MountOptions(read_only=True))
    assert shown(ops.tree) == expected
    replies.clear()
    walked = run(walk, ops, ROOT, "", replies)
    assert len(replies) == len(walked)
    assert walked == first  # the same inode numbers and sizes
    assert run(walk, ops, ROOT, "", replies) == walked, "made again, each keeps its number"
    inode, size = walked["g2/a5/.zarray"]
    node = ops.inodes.node(inode)
    assert isinstance(node, FileNode) and node.name == ".zarray"
    assert run(ops.getattr, inode, None).st_size == size


def test_an_array_in_use_keeps_its_one_state(tmp_path: Path, few: None) -> None:
    """An open handle holds array.raw's state: the array's node, dropped and made
    again, shows that state, not a second one (reads would miss its writes)."""
    root = tmp_path / "s.zarr"
    write_v2_hierarchy(root, groups=2, arrays=20)
    ops = build_operations(str(root), MountOptions(read_only=True))
    raw = lookup(ops, "g0/a3/array.raw")
    fh = run(ops.open, raw.st_ino, os.O_RDONLY, None).fh
    state = ops.files.get(fh).node.view.state  # type: ignore[attr-defined]
    run(walk, ops, ROOT)  # every other node loaded: g0/a3's dropped long ago
    node = ops.tree.resolve("g0/a3")
    assert isinstance(node, DirNode) and node.state is state
    again = ops.tree.resolve("g0/a3/array.raw")
    assert isinstance(again, FileNode) and again.view.state is state  # type: ignore[attr-defined]
    assert run(ops.read, fh, 0, 16) == bytes(16)
    run(ops.release, fh)


def lookup(ops: Operations, path: str) -> pyfuse3.EntryAttributes:
    inode, attr = ROOT, None
    for part in path.split("/"):
        attr = run(ops.lookup, inode, part.encode(), None)
        inode = attr.st_ino
    assert attr is not None
    return attr


def test_an_array_resized_through_the_mount_keeps_its_new_shape(tmp_path: Path, few: None) -> None:
    """The consolidated document the tree was listed from does not know the new
    shape: an array written through the mount is never made again from it."""
    root = tmp_path / "s.zarr"
    write_v2_hierarchy(root, groups=2, arrays=20)
    ops = build_operations(str(root), MountOptions(flush_interval=3600))
    fh = run(ops.open, lookup(ops, "g1/a7/array.raw").st_ino, os.O_WRONLY | os.O_TRUNC, None).fh
    run(ops.flush, fh)  # the shrink is stored: .zarray and .zmetadata rewritten
    run(ops.release, fh)
    assert json.loads((root / "g1/a7/.zarray").read_text())["shape"] == [0]
    run(walk, ops, ROOT)
    assert lookup(ops, "g1/a7/array.raw").st_size == 0
    document = ops.tree.resolve("g1/a7/.zarray")
    assert isinstance(document, FileNode)
    assert json.loads(document.view.documents[".zarray"])["shape"] == [0]  # type: ignore[attr-defined]


def test_what_a_node_had_to_say_is_logged_once(
    tmp_path: Path, few: None, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "s.zarr"
    write_v2_hierarchy(root, groups=2, arrays=20)
    zmetadata = json.loads((root / ".zmetadata").read_text())
    zmetadata["metadata"]["g0/a1/.zgroup"] = {"zarr_format": 2}  # beside its .zarray
    (root / ".zmetadata").write_text(json.dumps(zmetadata, indent=4, sort_keys=True))
    with caplog.at_level(logging.INFO):
        ops = build_operations(str(root), MountOptions(read_only=True))
        for _ in range(3):
            run(walk, ops, ROOT)
    said = [r.getMessage() for r in caplog.records if "also holds" in r.getMessage()]
    assert said == ["g0/a1 also holds .zgroup; showing it as .zarray"]


def test_a_group_of_more_arrays_than_kept_loaded_is_listed_in_linear_work(
    tmp_path: Path, few: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ls -R`` of a group of 200 arrays when the tree keeps 8 loaded: each array is
    loaded a bounded number of times (listing the group again, once let go, does not
    load every array again to decide on its group.nc)."""
    root = tmp_path / "s.zarr"
    arrays = 200
    write_one_line(root, groups=1, arrays=arrays)
    loads = 0
    make_loaded = Tree._make_loaded

    def counted(self: Tree, *args: Any) -> Any:
        nonlocal loads
        loads += 1
        return make_loaded(self, *args)

    monkeypatch.setattr(Tree, "_make_loaded", counted)
    ops = build_operations(str(root), MountOptions(read_only=True))
    seen = run(walk, ops, ROOT)
    assert sum(p.endswith("/array.raw") for p in seen) == arrays
    assert "g0/group.nc" in seen
    assert loads <= 10 * arrays, loads  # (each array: its listing, lookups, views)


def test_a_listing_leaves_the_size_of_group_nc_to_its_first_lookup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listing a group answers without working out ``group.nc`` (every array of the
    group parsed): it is given as of size 0, cached for no time, so that the
    kernel asks its first lookup, which gives the size; once made, listings give it."""
    root = tmp_path / "s.zarr"
    write_one_line(root, groups=1, arrays=50)
    told: dict[bytes, pyfuse3.EntryAttributes] = {}

    def reply(token: object, name: bytes, attr: pyfuse3.EntryAttributes, next_id: int) -> bool:
        told[name] = attr
        return True

    monkeypatch.setattr(operations_module.pyfuse3, "readdir_reply", reply)
    ops = build_operations(str(root), MountOptions(read_only=True))

    async def listed(inode: int) -> None:
        fh = await open_dir(ops, inode)
        await ops.readdir(fh, 0, None)
        await ops.releasedir(fh)

    async def check() -> None:
        group = (await ops.lookup(ROOT, b"g0", None)).st_ino
        await listed(group)
        node = ops.tree.resolve("g0/group.nc")
        assert isinstance(node, FileNode) and node.view.size_at_hand() is None
        listed_attr = told[b"group.nc"]
        assert listed_attr.st_size == 0
        assert listed_attr.attr_timeout == 0 and listed_attr.entry_timeout == 0
        assert told[b"a0"].attr_timeout > 0  # the others as ever
        looked_up = await ops.lookup(group, b"group.nc", None)
        fh = (await ops.open(looked_up.st_ino, os.O_RDONLY, None)).fh
        data = await ops.read(fh, 0, 1 << 20)
        await ops.release(fh)
        assert looked_up.st_size == len(data) > 0 and looked_up.attr_timeout > 0
        await listed(group)
        assert told[b"group.nc"].st_size == len(data) and told[b"group.nc"].attr_timeout > 0

    trio.run(check)
