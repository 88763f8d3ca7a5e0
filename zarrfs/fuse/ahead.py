"""Listing ahead: the next directories of a walk made while the daemon waits.

A program walking a hierarchy (``ls -R``, ``find``, ``du``, ``os.walk``) opens a
group's children one after another, and between two of its requests the daemon
sits idle while the walker and the kernel work through the last reply. Listing an
array for the first time is the daemon's largest share of such a walk (its
metadata parsed, its files made, their sizes worked out), so once a walk has
opened a child, the children after it are listed in those idle moments: when its
next request comes, the answer is at hand, and the two cores work side by side.

Only what needs no store I/O is made ahead (a consolidated hierarchy, an array's
own files), and only while every task of the mount is blocked, a step at a time (a
node parsed, its listing, one file's size): a request that arrives waits for the
step under way, tens of µs. Where the step parses a node never parsed, the tree
parses the siblings after it with it (namespace/tree.py's parse-ahead, once per 256:
a few ms), which still makes a walk faster than parsing one node per step. A walk
that stops early costs at most ``AHEAD`` directories made for nothing.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterator

import trio

# trio.testing's own, imported from where it is defined: trio.testing imports pytest
# (some 50 ms of every mount's start).
from trio._core import wait_all_tasks_blocked

from zarrfs.core.counters import Counters
from zarrfs.errors import ZarrfsError
from zarrfs.namespace.nodes import DirNode, FileNode
from zarrfs.namespace.tree import Tree

log = logging.getLogger(__name__)

AHEAD = 32  # siblings made ahead of the one a walk opened


class ListAhead:
    def __init__(self, tree: Tree, counters: Counters) -> None:
        self._tree = tree
        self._counters = counters
        self._queue: collections.deque[DirNode] = collections.deque()
        self._parent: DirNode | None = None
        self._until = 0  # the parent's children before this index are queued or done
        self._wake = trio.Event()

    def opened(self, directory: DirNode) -> None:
        """A directory was opened: a walk may list its next siblings soon."""
        parent = directory.parent
        if parent is None or not self._tree.listed(parent):
            return
        if parent is not self._parent:
            self._queue.clear()
            self._parent, self._until = parent, 0
        queue = self._queue
        while queue and queue[0].index <= directory.index:
            queue.popleft()  # the walk has passed it: made by its request
        start = max(directory.index + 1, self._until)
        end = directory.index + 1 + AHEAD
        for index in range(start, end):
            try:
                sibling = self._tree.child(parent, index)
            except IndexError:
                break
            if type(sibling) is DirNode:
                queue.append(sibling)
        self._until = max(self._until, end)
        if queue:
            self._wake.set()

    async def run(self) -> None:
        """Make the queued directories while the mount is idle, a step at a time (in
        the mount's nursery, for as long as it runs)."""
        while True:
            if not self._queue:
                self._wake = trio.Event()
                await self._wake.wait()
                continue
            node = self._queue.popleft()
            for _ in self._steps(node):
                # Returns only when every other task waits (for a request, a
                # thread): a request that is ready is answered first.
                await wait_all_tasks_blocked()

    def make(self, node: DirNode) -> None:
        """Make ``node``'s listing now, all its steps at once."""
        for _ in self._steps(node):
            pass

    def _steps(self, node: DirNode) -> Iterator[None]:
        """Make ``node``'s listing, yielding between steps (a few tens of µs each)."""
        tree = self._tree
        try:
            yield
            if tree.listed(node) or tree.needs_io(node) or not tree.fresh(node):
                return
            tree.loaded_node(node)  # parsed
            yield
            if tree.listed(node):
                return
            nodes = tree.listing(node).nodes
            for child in nodes:
                if type(child) is FileNode:
                    yield
                    child.view.size_at_hand()
        except ZarrfsError:
            return  # said (once) when a request uses the node
        except Exception:  # the request that uses the node reports it, with EIO
            log.debug("listing %s ahead failed", node.path, exc_info=True)
            return
        self._counters.listed_ahead += 1
