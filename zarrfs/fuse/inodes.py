"""Inode numbers for tree nodes, and open-handle numbers for files and directories.

Tree nodes live as long as the mount, so each keeps one inode number for the
mount's lifetime (``ls -i`` is stable); the kernel's lookup counts are tracked
so ``forget`` is answered, but a forgotten node keeps its number. Chunk keys
(found by lookup, never listed) are the exception: there may be millions, so one
the kernel has forgotten is dropped, and is numbered anew if looked up again.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

import pyfuse3

from zarrfs.errors import NotFoundError
from zarrfs.tree import Node, unlisted

T = TypeVar("T")


class InodeTable:
    def __init__(self, root: Node) -> None:
        self._nodes: dict[int, Node] = {pyfuse3.ROOT_INODE: root}
        self._inodes: dict[int, int] = {id(root): pyfuse3.ROOT_INODE}
        self._lookups: dict[int, int] = {}
        self._next = pyfuse3.ROOT_INODE + 1

    def node(self, inode: int) -> Node:
        try:
            return self._nodes[inode]
        except KeyError:
            raise NotFoundError(f"inode {inode}") from None

    def inode_of(self, node: Node) -> int:
        inode = self._inodes.get(id(node))
        if inode is None:
            inode = self._next
            self._next += 1
            self._inodes[id(node)] = inode
            self._nodes[inode] = node
        return inode

    def remember(self, inode: int) -> None:
        self._lookups[inode] = self._lookups.get(inode, 0) + 1

    def forget(self, inode: int, count: int) -> bool:
        """Count the kernel's forgets; True when a node found by lookup alone (a
        chunk key) was dropped with its number: the kernel holds it no more."""
        left = self._lookups.get(inode, 0) - count
        if left > 0:
            self._lookups[inode] = left
            return False
        self._lookups.pop(inode, None)
        node = self._nodes.get(inode)
        if node is None or not unlisted(node):
            return False
        del self._nodes[inode]
        del self._inodes[id(node)]
        return True

    def lookup_count(self, inode: int) -> int:
        return self._lookups.get(inode, 0)


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
