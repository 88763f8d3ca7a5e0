"""Checking what the mount knows against the store (close-to-open), without a mount:
the TTL rule, what a check reads, what it changes, and the inode numbers of a
directory whose entries changed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyfuse3
import pytest
import trio
import zarr

from tests.support.handlers import ROOT, fuse_errno, lookup_path, run
from tests.support.stores import CountingStore, v2_zarray
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.fuse.operations import Operations
from zarrfs.namespace.freshness import Freshness
from zarrfs.namespace.nodes import DirNode, FileNode
from zarrfs.namespace.tree import Tree


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# (ttl, checked relative to now, refreshed after the check, stale?)
CASES = [
    (5.0, 0.0, False, False),
    (5.0, -4.9, False, False),
    (5.0, -5.0, False, True),
    (5.0, -60.0, False, True),
    (5.0, 0.0, True, True),
    (0.0, 0.0, False, True),  # a TTL of 0 checks at every use
    (600.0, -599.0, False, False),
    (600.0, -1.0, True, True),
]


@pytest.mark.parametrize(("ttl", "age", "refreshed", "stale"), CASES)
def test_the_ttl_rule(ttl: float, age: float, refreshed: bool, stale: bool) -> None:
    clock = Clock()
    freshness = Freshness(ttl, clock)
    clock.now += 10_000  # long after the mount began: only the TTL and refreshes count
    checked = clock.now + age
    if refreshed:
        freshness.refresh()
    assert freshness.stale(checked) is stale


@pytest.mark.parametrize("ttl", [-1.0, 7 * 86400.0 + 1, float("nan")])
def test_ttls_out_of_range_are_refused(ttl: float) -> None:
    with pytest.raises(ValueError):
        Freshness(ttl)


def _write_array(root: Path, shape: list[int], value: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / ".zarray").write_text(json.dumps(v2_zarray(shape, [2])))
    for index in range(-(-shape[0] // 2)):
        (root / str(index)).write_bytes(np.full(2, value, dtype="<i4").tobytes())


def _tree(root: Path, clock: Clock, ttl: float = 5.0) -> tuple[Tree, CountingStore]:
    store = CountingStore(str(root))
    tree = Tree(store, ChunkCache(store, 1 << 20), freshness=Freshness(ttl, clock))
    return tree, store


def _read(tree: Tree, path: str) -> bytes:
    node = tree.resolve(path)
    assert isinstance(node, FileNode)
    return trio.run(node.view.read, 0, node.view.size)


def _group_of_one_array(tmp_path: Path, clock: Clock) -> tuple[Tree, CountingStore, DirNode]:
    """A v2 group holding array "a" of 4 ones, its tree, store and the array's node."""
    root = tmp_path / "s.zarr"
    (root / ".zgroup").parent.mkdir(parents=True)
    (root / ".zgroup").write_text('{"zarr_format": 2}')
    _write_array(root / "a", [4], 1)
    tree, store = _tree(root, clock)
    array = tree.resolve("a")
    assert isinstance(array, DirNode)
    return tree, store, array


def test_within_the_ttl_a_check_reads_nothing_after_it_reads_again(tmp_path: Path) -> None:
    clock = Clock()
    tree, store, array = _group_of_one_array(tmp_path, clock)
    assert _read(tree, "a/array.raw") == np.full(4, 1, "<i4").tobytes()
    gets = sum(store.gets.values())
    clock.now += 4
    assert tree.fresh(array) and not tree.revalidate(array)
    assert sum(store.gets.values()) == gets
    clock.now += 2
    assert not tree.fresh(array)
    changes = tree.revalidate(array)
    assert store.gets["a/.zarray"] == 2
    assert changes.reloaded == [array] and not changes.relisted
    assert tree.fresh(array)
    # Unchanged documents, but the chunks may have changed: they are dropped.
    assert not tree.cache.has("a", (0,))


def test_a_changed_document_makes_the_array_anew(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    _write_array(root, [4], 1)
    clock = Clock()
    tree, _ = _tree(root, clock)
    assert _read(tree, "array.raw") == np.full(4, 1, "<i4").tobytes()
    old_state = tree.root.state
    _write_array(root, [6], 2)
    clock.now += 10
    changes = tree.revalidate(tree.root)
    assert changes.reloaded == [tree.root]
    assert tree.root.state is not old_state
    assert _read(tree, "array.raw") == np.full(6, 2, "<i4").tobytes()
    assert tree.resolve("array.raw").view.size == 24


def test_consolidated_metadata_is_read_once_per_ttl_for_the_whole_tree(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    group = zarr.open_group(str(root), mode="w", zarr_format=2)
    for name in "abc":
        group.create_array(name, shape=(4,), chunks=(2,), dtype="<i4", fill_value=0)[:] = 3
    zarr.consolidate_metadata(str(root))
    clock = Clock()
    tree, store = _tree(root, clock)
    nodes = [tree.resolve(name) for name in "abc"]
    assert store.gets[".zmetadata"] == 1
    clock.now += 10
    for node in nodes:
        assert isinstance(node, DirNode)
        tree.revalidate(node)
    assert store.gets[".zmetadata"] == 2  # one check for the three
    assert store.gets["a/.zarray"] == 0  # documents come from the consolidated one
    group["b"].resize((6,))
    zarr.consolidate_metadata(str(root))
    clock.now += 10
    node_b = tree.resolve("b")
    assert isinstance(node_b, DirNode)
    tree.revalidate(node_b)
    assert tree.resolve("b/array.raw").view.size == 24


def test_an_array_written_through_the_mount_is_never_checked(tmp_path: Path) -> None:
    clock = Clock()
    tree, store, array = _group_of_one_array(tmp_path, clock)
    tree.pin(array)
    clock.now += 10
    assert not tree.revalidate(array)
    assert store.gets["a/.zarray"] == 1


def test_a_refresh_makes_a_fresh_node_stale(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    _write_array(root, [4], 1)
    clock = Clock()
    tree, _ = _tree(root, clock, ttl=600)
    assert tree.fresh(tree.root)
    trio.run(tree.refresh)
    assert not tree.fresh(tree.root)


def _ops(root: Path, clock: Clock) -> Operations:
    tree, _ = _tree(root, clock)
    return Operations(tree, tree.cache.counters, read_only=True)


def test_entries_added_and_removed_are_numbered_anew(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    (root / ".zgroup").parent.mkdir(parents=True)
    (root / ".zgroup").write_text('{"zarr_format": 2}')
    for name in ("a", "b"):
        _write_array(root / name, [4], 1)
    clock = Clock()
    ops = _ops(root, clock)
    old_a = lookup_path(ops, "a").st_ino
    old_b = lookup_path(ops, "b").st_ino
    shutil.rmtree(root / "b")
    _write_array(root / "c", [2], 5)
    clock.now += 10
    new_c = lookup_path(ops, "c").st_ino  # the lookup checks the root first
    assert run(ops.getattr, new_c, None).st_mode & 0o040000
    # The old number of a name still there finds it; that of a name gone is ENOENT.
    assert run(ops.getattr, old_a, None).st_ino == old_a
    assert fuse_errno(ops.getattr, old_b, None) == 2
    assert fuse_errno(ops.lookup, ROOT, b"b", None) == 2
    names = [name for name, _ in ops.tree.listing(ops.tree.root)]
    assert names == [b".zgroup", b"a", b"c", b"group.nc"]


def test_getattr_after_the_ttl_shows_the_new_size(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    _write_array(root, [4], 1)
    clock = Clock()
    ops = _ops(root, clock)
    raw = lookup_path(ops, "array.raw")
    assert raw.st_size == 16
    _write_array(root, [8], 1)
    assert run(ops.getattr, raw.st_ino, None).st_size == 16  # within the TTL
    clock.now += 10
    assert run(ops.getattr, raw.st_ino, None).st_size == 32


def _opened_dir(ops: Operations, inode: int) -> pyfuse3.FileInfo:
    opened = run(ops.opendir, inode, None)
    assert isinstance(opened, pyfuse3.FileInfo)
    run(ops.releasedir, opened.fh)
    return opened


def test_the_kernel_keeps_a_listing_until_its_names_change(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    (root / ".zgroup").parent.mkdir(parents=True)
    (root / ".zgroup").write_text('{"zarr_format": 2}')
    _write_array(root / "a", [4], 1)
    clock = Clock()
    ops = _ops(root, clock)
    first = _opened_dir(ops, ROOT)
    # The kernel may keep every listing; the first open has nothing kept to keep.
    assert first.cache_readdir and not first.keep_cache
    assert _opened_dir(ops, ROOT).keep_cache
    # Past the TTL, unchanged names: what the kernel kept is still right.
    clock.now += 10
    assert _opened_dir(ops, ROOT).keep_cache
    # New names: the kernel drops what it kept of the root at the next open, and
    # keeps the new listing from then on.
    _write_array(root / "b", [2], 5)
    clock.now += 10
    changed = _opened_dir(ops, ROOT)
    assert changed.cache_readdir and not changed.keep_cache
    assert _opened_dir(ops, ROOT).keep_cache
    # A document rewritten, the same names: kept.
    array = lookup_path(ops, "a").st_ino
    assert not _opened_dir(ops, array).keep_cache
    _write_array(root / "a", [8], 2)
    clock.now += 10
    assert _opened_dir(ops, array).keep_cache


def test_the_directory_of_a_chunk_key_is_not_kept(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    zarr.create_array(str(root), shape=(4, 4), chunks=(2, 2), dtype="u1", zarr_format=3)[:] = 1
    ops = _ops(root, Clock())
    key_dir = lookup_path(ops, "c/0").st_ino
    assert isinstance(run(ops.opendir, key_dir, None), int)
