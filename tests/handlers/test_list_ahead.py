"""fuse/ahead.py: once a walk opens a group's child, the children after it are listed
while the handlers are idle, so that the walk's next requests find them made."""

from __future__ import annotations

import errno
import json
import logging
from pathlib import Path

import pyfuse3
import pytest
import trio

from tests.support.consolidated import counting_tree, write_v2_hierarchy
from tests.support.handlers import ROOT, open_dir
from zarrfs.fuse.ahead import AHEAD
from zarrfs.fuse.operations import Operations
from zarrfs.namespace.nodes import DirNode

ARRAYS = AHEAD + 40


def _ops(root: Path, groups: int = 1) -> Operations:
    if not root.exists():
        write_v2_hierarchy(root, groups, ARRAYS)
    tree, _ = counting_tree(root)
    return Operations(tree, tree.cache.counters)


def _children(ops: Operations, group: str) -> list[DirNode]:
    node = ops.tree.resolve(group)
    assert isinstance(node, DirNode)
    return [n for n in ops.tree.entries(node).values() if type(n) is DirNode]


async def _open(ops: Operations, node: DirNode) -> None:
    assert node.parent is not None
    parent = await ops.lookup(ROOT, node.parent.name.encode())
    attr = await ops.lookup(parent.st_ino, node.name.encode())
    await ops.releasedir(await open_dir(ops, attr.st_ino))


async def _idle_until(ops: Operations, listed: int) -> None:
    """Let the handlers be idle until ``listed`` directories were listed ahead, then
    a while longer, for any that would follow."""
    with trio.fail_after(30):
        while ops.counters.listed_ahead < listed:
            await trio.sleep(0.001)
    await trio.sleep(0.05)


def _walk(ops: Operations, scenario: object) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ops.ahead.run)
            await scenario()  # type: ignore[operator]
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_the_siblings_after_an_opened_child_are_listed_while_idle(tmp_path: Path) -> None:
    ops = _ops(tmp_path / "s.zarr")
    children = _children(ops, "g0")
    assert not any(ops.tree.listed(c) for c in children)

    async def scenario() -> None:
        await _open(ops, children[0])
        await _idle_until(ops, AHEAD)

    _walk(ops, scenario)
    assert ops.counters.listed_ahead == AHEAD
    listed = [ops.tree.listed(c) for c in children]
    assert listed == [True] * (AHEAD + 1) + [False] * (ARRAYS - AHEAD - 1)
    # What the walk's next request is answered with: the array's files, sizes at hand.
    files = ops.tree.listing(children[1]).nodes
    assert files and all(f.view.size_at_hand() is not None for f in files)


def test_nothing_is_listed_ahead_while_a_task_has_work(tmp_path: Path) -> None:
    ops = _ops(tmp_path / "s.zarr")
    children = _children(ops, "g0")

    async def scenario() -> None:
        await _open(ops, children[0])
        for _ in range(200):  # runnable throughout: never idle
            await trio.lowlevel.checkpoint()
        assert ops.counters.listed_ahead == 0
        await _idle_until(ops, AHEAD)

    _walk(ops, scenario)
    assert ops.counters.listed_ahead == AHEAD


def test_what_a_walk_passed_is_not_listed_ahead(tmp_path: Path) -> None:
    ops = _ops(tmp_path / "s.zarr")
    children = _children(ops, "g0")

    async def scenario() -> None:
        await _open(ops, children[0])
        await _open(ops, children[20])  # no idle moment between: 1-19 were passed
        await _idle_until(ops, AHEAD)

    _walk(ops, scenario)
    listed = [i for i, c in enumerate(children) if ops.tree.listed(c)]
    assert listed == [0, *range(20, 21 + AHEAD)]


def test_a_group_the_walk_left_is_not_listed_ahead(tmp_path: Path) -> None:
    ops = _ops(tmp_path / "s.zarr", groups=2)
    g0, g1 = _children(ops, "g0"), _children(ops, "g1")

    async def scenario() -> None:
        await _open(ops, g0[0])
        await _open(ops, g1[5])  # no idle moment between: the walk left g0
        await _idle_until(ops, AHEAD)

    _walk(ops, scenario)
    assert [i for i, c in enumerate(g0) if ops.tree.listed(c)] == [0]
    assert [i for i, c in enumerate(g1) if ops.tree.listed(c)] == list(range(5, 6 + AHEAD))


def test_a_bad_array_ahead_is_skipped_and_reported_once_when_opened(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "s.zarr"
    write_v2_hierarchy(root, 1, ARRAYS)
    doc = json.loads((root / ".zmetadata").read_text())
    doc["metadata"]["g0/a2/.zarray"]["shape"] = "not a shape"
    (root / ".zmetadata").write_text(json.dumps(doc))
    ops = _ops(root)
    children = _children(ops, "g0")
    bad = next(c for c in children if c.name == "a2")
    caplog.set_level(logging.WARNING)

    async def scenario() -> None:
        await _open(ops, children[0])
        await _idle_until(ops, AHEAD - 1)
        with pytest.raises(pyfuse3.FUSEError) as info:
            await _open(ops, bad)
        assert info.value.errno == errno.EIO

    _walk(ops, scenario)
    assert ops.counters.listed_ahead == AHEAD - 1  # every sibling ahead but the bad one
    said = [r for r in caplog.records if "g0/a2" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in said]
