"""Inode numbers for tree nodes, and open-handle numbers for files and directories.

Each node keeps one inode number for the mount's lifetime (``ls -i`` is stable),
without a table entry per node: when a directory's entries are first numbered,
they get consecutive numbers (a block) in their sorted order, and an entry's
number is its directory's first plus its position. So the number finds the node
again (its directory, then the position) even where the tree has let go of the
node itself and makes it again (tree.py), and a listed node costs the table 8
bytes: which directory numbers it, and the kernel's count of lookups of it. Those
counts are tracked so ``forget`` is answered, but a forgotten node keeps its
number.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

import pyfuse3

from zarrfs.errors import NotFoundError
from zarrfs.tree import DirNode, Node

T = TypeVar("T")

_MAX_COUNT = 2**32 - 1


class InodeTable:
    def __init__(
        self,
        root: DirNode,
        entries: Callable[[DirNode], int],
        child: Callable[[DirNode, int], Node],
    ) -> None:
        """``entries``: how many entries a directory has; ``child``: its entry at a
        position (both from tree.py, which may make them again)."""
        self._root = root
        self._count_entries = entries
        self._child = child
        self._directories: list[DirNode] = []  # each numbered one, in numbering order
        self._next = pyfuse3.ROOT_INODE + 1
        # By inode: which of them holds it, and the kernel's lookups of it.
        self._holders = array("I", bytes(4 * self._next))
        self._lookups = array("I", bytes(4 * self._next))

    def _first(self, directory: DirNode) -> int:
        """The inode of the directory's first entry, numbering them if need be."""
        first = directory.first_inode
        if not first:
            first = directory.first_inode = self._next
            count = self._count_entries(directory)
            self._next += count
            self._holders.extend([len(self._directories)] * count)
            self._lookups.frombytes(bytes(4 * count))
            self._directories.append(directory)
        return first

    def node(self, inode: int) -> Node:
        if inode == pyfuse3.ROOT_INODE:
            return self._root
        if not pyfuse3.ROOT_INODE < inode < self._next:
            raise NotFoundError(f"inode {inode}")
        directory = self._directories[self._holders[inode]]
        return self._child(directory, inode - directory.first_inode)

    def parent(self, inode: int) -> DirNode | None:
        """The directory holding the node numbered ``inode`` (None: the root, or no node)."""
        if not pyfuse3.ROOT_INODE < inode < self._next:
            return None
        return self._directories[self._holders[inode]]

    def inode_of(self, node: Node) -> int:
        parent = node.parent
        if parent is None:
            if node is not self._root:
                raise NotFoundError(f"{node.name}: in no directory")
            return pyfuse3.ROOT_INODE
        return (parent.first_inode or self._first(parent)) + node.index

    def remember(self, inode: int) -> None:
        if inode < self._next and self._lookups[inode] < _MAX_COUNT:
            self._lookups[inode] += 1

    def forget(self, inode: int, count: int) -> None:
        if inode < self._next:
            self._lookups[inode] = max(self._lookups[inode] - count, 0)

    def lookup_count(self, inode: int) -> int:
        return self._lookups[inode] if inode < self._next else 0


class HandleTable(Generic[T]):
    """Small integers for open files/directories (``fh``), reused after release."""

    def __init__(self) -> None:
        self._items: dict[int, T] = {}
        self._next = 1

    def add(self, item: T) -> int:
        fh = self._next
        self._next += 1
        self._items[fh] = item
        return fh

    def get(self, fh: int) -> T:
        try:
            return self._items[fh]
        except KeyError:
            raise NotFoundError(f"handle {fh}") from None

    def pop(self, fh: int) -> T | None:
        return self._items.pop(fh, None)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[T]:
        return iter(self._items.values())
