"""Inode numbers for tree nodes, and open-handle numbers for files and directories.

Each node keeps one inode number for the mount's lifetime (``ls -i`` is stable)
while its directory's entries stay those the store had when they were numbered,
without a table entry per node: when a directory's entries are first numbered,
they get consecutive numbers (a block) in their sorted order, and an entry's
number is its directory's first plus its position. So the number finds the node
again (its directory, then the position) even where the tree has let go of the
node itself and makes it again (namespace/recent.py), and a listed node costs the table 8
bytes: which directory numbers it, and the kernel's count of lookups of it. Those
counts are tracked so ``forget`` is answered, but a forgotten node keeps its
number. A directory whose entries changed in the store (namespace/tree.py's
``revalidate``) is numbered anew in a new block; its old block is retired, its
numbers finding the entries of the names they numbered, by name (``Retired``).

Chunk keys (found by lookup, never listed) are the exception: they have no
position in a listing, and there may be millions. They are numbered from a range
of their own (from ``UNLISTED_FIRST``, far above any block), kept in a table entry
while the kernel holds them, dropped once it has forgotten them, and numbered
anew if looked up again.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import pyfuse3

from zarrfs.errors import NotFoundError
from zarrfs.namespace.nodes import DirNode, FileNode, Node, unlisted

T = TypeVar("T")

_MAX_COUNT = 2**32 - 1
# The first number of a node found by lookup alone: listed blocks never reach it
# (2**48 listed entries would cost the table 2 PiB), and numbers stay below 2**63.
UNLISTED_FIRST = 1 << 48


@dataclass(frozen=True)
class Retired:
    """The block of a directory whose entries changed in the store and were numbered
    anew: its numbers still find the entries of the names they numbered (the kernel
    may use one before it has forgotten the old names), by name."""

    directory: DirNode
    first: int
    names: tuple[str, ...]


class InodeTable:
    def __init__(
        self,
        root: DirNode,
        entries: Callable[[DirNode], int],
        child: Callable[[DirNode, int], Node],
        named: Callable[[DirNode, str], Node | None],
    ) -> None:
        """``entries``: how many entries a directory has; ``child``: its entry at a
        position; ``named``: its entry of a name, if any (all from namespace/tree.py,
        which may make them again)."""
        self._root = root
        self._count_entries = entries
        self._child = child
        self._named = named
        # Each numbered one, in numbering order (or its retired block).
        self._directories: list[DirNode | Retired] = []
        self._next = pyfuse3.ROOT_INODE + 1
        # By inode: which of them holds it, and the kernel's lookups of it.
        self._holders = array("I", bytes(4 * self._next))
        self._lookups = array("I", bytes(4 * self._next))
        # Nodes found by lookup alone, while the kernel holds them: by inode, the
        # inode by node, and the kernel's lookups of each.
        self._unlisted_nodes: dict[int, Node] = {}
        self._unlisted_inodes: dict[int, int] = {}
        self._unlisted_lookups: dict[int, int] = {}
        self._next_unlisted = UNLISTED_FIRST

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

    def first_of(self, directory: DirNode) -> int:
        """The inode of the directory's first entry (numbered now if need be)."""
        return directory.first_inode or self._first(directory)

    def node(self, inode: int) -> Node:
        if inode == pyfuse3.ROOT_INODE:
            return self._root
        if not pyfuse3.ROOT_INODE < inode < self._next:
            try:
                return self._unlisted_nodes[inode]
            except KeyError:
                raise NotFoundError(f"inode {inode}") from None
        directory = self._directories[self._holders[inode]]
        if isinstance(directory, Retired):
            found = self._named(directory.directory, directory.names[inode - directory.first])
            if found is None:
                raise NotFoundError(f"inode {inode}: gone from the store")
            return found
        return self._child(directory, inode - directory.first_inode)

    def parent(self, inode: int) -> DirNode | None:
        """The directory holding the node numbered ``inode`` (None: the root, a node
        found by lookup alone, or no node)."""
        if not pyfuse3.ROOT_INODE < inode < self._next:
            return None
        directory = self._directories[self._holders[inode]]
        return directory.directory if isinstance(directory, Retired) else directory

    def renumber(self, directory: DirNode, names: tuple[str, ...]) -> range:
        """Number ``directory``'s entries anew at their next use: they changed, from
        ``names`` (sorted, as numbered). The old numbers, returned, find the entry of
        the same name while there is one."""
        first = directory.first_inode
        directory.first_inode = 0
        if not first or first >= self._next:
            return range(0)  # never numbered, or numbered with no entries (last)
        holder = self._holders[first]
        if self._directories[holder] is not directory:
            return range(0)  # numbered with no entries: the number is another's
        end = first
        while end < self._next and self._holders[end] == holder:
            end += 1
        # The names it was numbered with, where known (else none is found by name).
        numbered = names if len(names) == end - first else ("",) * (end - first)
        self._directories[holder] = Retired(directory, first, numbered)
        return range(first, end)

    def held(self) -> list[int]:
        """The numbers the kernel holds (looked up and not forgotten), root first."""
        held = [pyfuse3.ROOT_INODE]
        held += [inode for inode, count in enumerate(self._lookups) if count and inode > 1]
        held += [inode for inode, count in self._unlisted_lookups.items() if count]
        return held

    def inode_of(self, node: Node) -> int:
        if unlisted(node):
            inode = self._unlisted_inodes.get(id(node))
            if inode is None:
                inode = self._next_unlisted
                self._next_unlisted += 1
                self._unlisted_inodes[id(node)] = inode
                self._unlisted_nodes[inode] = node  # which keeps id(node) its own
            return inode
        parent = node.parent
        if parent is None:
            if node is not self._root:
                raise NotFoundError(f"{node.name}: in no directory")
            return pyfuse3.ROOT_INODE
        return (parent.first_inode or self._first(parent)) + node.index

    def remember(self, inode: int) -> None:
        if inode < self._next:
            if self._lookups[inode] < _MAX_COUNT:
                self._lookups[inode] += 1
        elif inode in self._unlisted_nodes:
            self._unlisted_lookups[inode] = self._unlisted_lookups.get(inode, 0) + 1

    def forget(self, inode: int, count: int) -> bool:
        """Count the kernel's forgets; True when a node found by lookup alone (a
        chunk key) was dropped with its number: the kernel holds it no more."""
        if inode < self._next:
            self._lookups[inode] = max(self._lookups[inode] - count, 0)
            return False
        left = self._unlisted_lookups.get(inode, 0) - count
        if left > 0:
            self._unlisted_lookups[inode] = left
            return False
        self._unlisted_lookups.pop(inode, None)
        node = self._unlisted_nodes.pop(inode, None)
        if node is None:
            return False
        del self._unlisted_inodes[id(node)]
        if isinstance(node, FileNode):
            # Its attributes name the number just dropped: a node still held (by an
            # open file) and found again is numbered anew.
            node.attributes = None
        return True

    def lookup_count(self, inode: int) -> int:
        if inode < self._next:
            return self._lookups[inode]
        return self._unlisted_lookups.get(inode, 0)


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
