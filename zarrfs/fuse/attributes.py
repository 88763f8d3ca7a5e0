"""What the kernel is told of each node: its attributes (``stat``), as lookups,
``getattr`` and listings give them.

pyfuse3 copies an ``EntryAttributes`` into each reply, so one object per node can be
reused: a file's is kept with the file (as long as the tree keeps it), a directory's
for the most recently asked directories only, and a listing writes a file's into one
scratch object rather than keeping one per file.
"""

from __future__ import annotations

import os
import stat
from collections import OrderedDict
from collections.abc import Callable

import pyfuse3

from zarrfs.fuse.inodes import InodeTable
from zarrfs.namespace.nodes import DirNode, FileNode, Node, unlisted

# Directories' attributes are kept for the most recently asked ones only, so that a
# listed node costs nothing here (docs/semantics.md, "Limits and hostile input");
# a file's are kept with it, as long as the tree keeps the file.
MAX_DIRECTORY_ATTRIBUTES = 16_384
BLOCK_SIZE = 128 * 1024  # st_blksize: what `cp` and `dd` read at a time
_FILE_MODE = stat.S_IFREG | 0o444
_WRITABLE_FILE_MODE = _FILE_MODE | 0o200


class Attributes:
    """The attributes of the nodes ``inodes`` numbers, cached by the kernel for
    ``ttl`` seconds; on a read-only mount nothing is writable."""

    def __init__(self, inodes: InodeTable, ttl: float, read_only: bool) -> None:
        self._inodes = inodes
        self.ttl = ttl
        self.read_only = read_only
        self._uid = os.getuid()
        self._gid = os.getgid()
        self._directories: OrderedDict[int, pyfuse3.EntryAttributes] = OrderedDict()

    def of(self, node: Node) -> pyfuse3.EntryAttributes:
        """The node's attributes; built once per node while it is kept, the size kept
        current."""
        if isinstance(node, FileNode):
            attr = node.attributes
            if attr is None:
                attr = node.attributes = self.new(node, self._inodes.inode_of(node))
            attr.st_size = node.view.size
            attr.st_blocks = -(-attr.st_size // 512)
            return attr
        inode = self._inodes.inode_of(node)
        directories = self._directories
        attr = directories.get(inode)
        if attr is None:
            attr = directories[inode] = self.new(node, inode)
            if len(directories) > MAX_DIRECTORY_ATTRIBUTES:
                directories.popitem(last=False)
        return attr

    def lister(self) -> Callable[[Node], pyfuse3.EntryAttributes]:
        """What one listing (READDIRPLUS) gives of each of its nodes: their
        attributes. A file's are written into one scratch object unless a lookup made
        them already (pyfuse3 copies them into the reply): a walk of 10 000 arrays
        keeps no attributes object per file. The fields every file shares are written
        once, and a file's mode, cache times and mtime only where they differ from
        the file's before it (a listing's files mostly share them).

        A file whose size would cost more than a listing should (``group.nc``: every
        array of its group parsed) is given as of size 0 and cached for no time, so
        that the kernel asks its first lookup or stat, which works the size out."""
        scratch = pyfuse3.EntryAttributes()
        scratch.generation = 0
        scratch.st_nlink = 1
        scratch.st_uid = self._uid
        scratch.st_gid = self._gid
        scratch.st_blksize = BLOCK_SIZE
        inodes, of = self._inodes, self.of
        file_mode, file_timeouts = self._file_mode, self._file_timeouts
        written: list[object] = [None, None, None]  # mode, (entry, attr) timeouts, mtime

        def listed(node: Node) -> pyfuse3.EntryAttributes:
            if type(node) is not FileNode:  # a directory (chunk keys are never listed)
                return of(node)
            view = node.view
            size = view.size_at_hand()
            attr = node.attributes
            if attr is None or size is None:
                attr = scratch
                parent = node.parent
                assert parent is not None
                attr.st_ino = (parent.first_inode or inodes.first_of(parent)) + node.index
                mode = file_mode(node)
                if mode != written[0]:
                    attr.st_mode = written[0] = mode
                timeouts = (0.0, 0.0) if size is None else file_timeouts(node)
                if timeouts != written[1]:
                    attr.entry_timeout, attr.attr_timeout = written[1] = timeouts
                mtime = node.mtime
                if mtime != written[2]:
                    written[2] = mtime
                    attr.st_atime_ns = attr.st_mtime_ns = attr.st_ctime_ns = int(mtime * 1e9)
                if size is None:
                    size = 0
            attr.st_size = size
            attr.st_blocks = -(-size // 512)
            return attr

        return listed

    def fresh_document(self, node: Node) -> bool:
        """A metadata document of a write mount: a flush may rewrite it at any time,
        so the kernel keeps neither its size nor its pages."""
        return not self.read_only and isinstance(node, FileNode) and node.view.document

    def new(self, node: Node, inode: int) -> pyfuse3.EntryAttributes:
        """``node``'s attributes numbered ``inode``, but for a file's size."""
        return self.fill(pyfuse3.EntryAttributes(), node, inode)

    def fill(
        self, attr: pyfuse3.EntryAttributes, node: Node, inode: int
    ) -> pyfuse3.EntryAttributes:
        """``attr`` made ``node``'s (numbered ``inode``), but for a file's size."""
        attr.st_ino = inode
        attr.generation = 0
        attr.entry_timeout = self.ttl
        attr.attr_timeout = self.ttl
        if isinstance(node, DirNode):
            attr.st_mode = stat.S_IFDIR | 0o555
            attr.st_nlink = 2
            attr.st_size = 0
        else:
            attr.st_mode = self._file_mode(node)
            attr.st_nlink = 1
            attr.entry_timeout, attr.attr_timeout = self._file_timeouts(node)
        attr.st_uid = self._uid
        attr.st_gid = self._gid
        attr.st_blksize = BLOCK_SIZE
        mtime_ns = int(node.mtime * 1e9)
        attr.st_atime_ns = attr.st_mtime_ns = attr.st_ctime_ns = mtime_ns
        return attr

    def _file_mode(self, node: FileNode) -> int:
        writable = not self.read_only and node.view.writable
        return _WRITABLE_FILE_MODE if writable else _FILE_MODE

    def _file_timeouts(self, node: FileNode) -> tuple[float, float]:
        """How long the kernel keeps a file's (entry, attributes)."""
        if unlisted(node):
            # Looked up at each open: the lookup stores what the mount holds
            # unstored and finds the value's current size.
            return 0.0, 0.0
        if self.fresh_document(node):
            return self.ttl, 0.0
        return self.ttl, self.ttl

    def drop(self, inode: int) -> None:
        """Forget the attributes kept for ``inode`` (they changed, or the kernel forgot it)."""
        self._directories.pop(inode, None)

    def held(self, inode: int) -> bool:
        return inode in self._directories

    def clear(self) -> None:
        self._directories.clear()
