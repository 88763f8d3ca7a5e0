"""namespace/recent.py: which directories listed from consolidated metadata keep
what they are, and the array states of the ones dropped."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import pytest

from zarrfs.core.read.chunks import ChunkCache
from zarrfs.formats.model import GroupMeta
from zarrfs.namespace import recent
from zarrfs.namespace.nodes import DirNode, Loaded
from zarrfs.namespace.recent import RecentNodes
from zarrfs.namespace.tree import Tree
from zarrfs.stores.directory import DirectoryStore


class _NoLoader:
    def loaded_node(self, node: DirNode) -> Loaded:
        raise AssertionError("these nodes are never loaded again")


def node(name: str) -> tuple[DirNode, Loaded]:
    made = DirNode(_NoLoader(), None, name, 0.0)
    return made, Loaded(GroupMeta(name, 2, ()), {".zgroup": b"{}"}, None)


@pytest.fixture
def two(monkeypatch: pytest.MonkeyPatch) -> RecentNodes:
    monkeypatch.setattr(recent, "MAX_LOADED_NODES", 2)
    return RecentNodes(threading.RLock())


def test_the_oldest_unused_node_is_dropped(two: RecentNodes) -> None:
    (a, la), (b, lb), (c, lc) = node("a"), node("b"), node("c")
    for made, loaded in ((a, la), (b, lb), (c, lc)):
        two.remember(made, loaded)
    assert a.loaded is None and b.loaded is lb and c.loaded is lc


def test_a_node_used_since_gets_a_second_turn(two: RecentNodes) -> None:
    (a, la), (b, lb), (c, lc) = node("a"), node("b"), node("c")
    two.remember(a, la)
    two.remember(b, lb)
    la.used = True
    two.remember(c, lc)
    assert a.loaded is la and not la.used  # its turn is spent
    assert b.loaded is None and c.loaded is lc


def test_a_kept_node_is_never_dropped(two: RecentNodes) -> None:
    (a, la), (b, lb), (c, lc), (d, ld) = node("a"), node("b"), node("c"), node("d")
    two.remember(a, la)
    two.keep(a, la)
    for made, loaded in ((b, lb), (c, lc), (d, ld)):
        two.remember(made, loaded)
    assert a.loaded is la and b.loaded is None and (c.loaded, d.loaded) == (lc, ld)


def test_a_dropped_array_state_is_found_while_held(
    example_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(str(example_store))
    array = Tree(store, ChunkCache(store, 1 << 20)).resolve("foo/bar")
    assert isinstance(array, DirNode) and array.loaded is not None
    state = array.loaded.state
    assert state is not None
    monkeypatch.setattr(recent, "MAX_LOADED_NODES", 1)
    nodes = RecentNodes(threading.RLock())
    nodes.remember(array, array.loaded)
    other, loaded = node("other")
    nodes.remember(other, loaded)
    assert array.loaded is None
    held = nodes.held(array)
    assert held is not None and held.state is state and held.documents is state.documents
    del held, state
    gc.collect()
    assert nodes.held(array) is None
