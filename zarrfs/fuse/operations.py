"""The thin pyfuse3 layer: inode and handle bookkeeping over the tree and its views.

Every handler passes through one error boundary (fuse/boundary.py): zarrfs errors
become their errno, anything unexpected is logged with its traceback and becomes
EIO. pyfuse3 ends ``main()`` on any other exception, so nothing else may escape.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyfuse3
import trio

from zarrfs.core.counters import Counters
from zarrfs.core.write.writeback import WriteBack
from zarrfs.errors import AccessDeniedError, ReadOnlyError, ZarrfsError
from zarrfs.formats.model import ArrayMeta
from zarrfs.fuse import kernel, pages
from zarrfs.fuse.ahead import ListAhead
from zarrfs.fuse.attributes import Attributes
from zarrfs.fuse.boundary import boundary
from zarrfs.fuse.inodes import HandleTable, InodeTable
from zarrfs.namespace.listing import DirListing
from zarrfs.namespace.nodes import Changes, DirNode, FileNode, Node, unlisted
from zarrfs.namespace.tree import Tree
from zarrfs.views.xattrs import array_xattrs, group_xattrs

# The pyfuse3 scripts/build_libfuse.sh builds lets opendir ask the kernel to keep a
# directory's listing (FOPEN_CACHE_DIR); another pyfuse3 takes an int, and every
# listing reaches the daemon.
CACHED_LISTINGS = hasattr(pyfuse3.FileInfo(), "cache_readdir")

log = logging.getLogger(__name__)

PID_XATTR = b"user.zarrfs.pid"
STREAM_SLACK = 4  # requests a streaming read may arrive behind the newest one
# A first read this large from the start of a file begins a stream at once (dd,
# cat, cp, np.fromfile, the kernel's own read-ahead): its read-ahead overlaps the
# first reply instead of waiting for it. Smaller ones (a header probed by file(1),
# GDAL or np.load) wait for a second read that continues them.
STREAM_START = 128 * 2**10
DIRECT_READS = "reads of array data bypass the page cache (one copy each)"
NO_DIRECT_READS = (
    "reads of array data go through the page cache (two copies each): this kernel "
    "or libfuse cannot map direct_io files shared (kernel 6.6+ and the libfuse of "
    "scripts/build_libfuse.sh can)"
)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND | os.O_CREAT


@dataclass(eq=False)
class OpenFile:
    node: FileNode
    inode: int
    wrote: bool = False
    next_offset: int = -1  # where the reads so far ended: the next one is sequential


class Operations(pyfuse3.Operations):
    supports_dot_lookup = False
    enable_writeback_cache = False

    def __init__(
        self,
        tree: Tree,
        counters: Counters,
        writeback: WriteBack | None = None,
        *,
        read_only: bool = True,
    ) -> None:
        """``counters`` and ``writeback`` are the mount's, as ``tree`` was given
        them (``writeback`` None: a read-only mount)."""
        super().__init__()
        self.tree = tree
        self.counters = counters
        self.writeback = writeback
        self.read_only = read_only or writeback is None
        self.inodes = InodeTable(
            tree.root,
            lambda d: len(tree.entries(d)),
            tree.child,
            lambda d, name: tree.entries(d).get(name),
        )
        self.files: HandleTable[OpenFile] = HandleTable()
        # Inodes whose pages the kernel may hold: they served a read through the page
        # cache since they were last invalidated.
        self.page_cached: set[int] = set()
        self.mounted = False  # set once the kernel is attached (invalidation needs it)
        # Set when the kernel's INIT has been answered: its settings are in force.
        self.initialised = trio.Event()
        self.dirs: HandleTable[DirListing] = HandleTable()
        # The kernel keeps names and attributes as long as the tree serves them
        # unchecked: what changes through the mount is invalidated when it changes,
        # what changes in the store is seen after the TTL (namespace/freshness.py).
        self.ttl = tree.freshness.ttl
        self.attrs = Attributes(self.inodes, self.ttl, self.read_only)
        tree.add_refresh_listener(self._refreshed)
        # Whether the kernel maps direct I/O files shared is asked once, at the first
        # open of array data (fuse/directio.py); None: never (handler tests). Reads of
        # array data then bypass the page cache, unless ``kernel_cache``.
        self.direct_probe: Callable[[], bool] | None = None
        self.direct_maps = False
        self.kernel_cache = False
        self._probed = trio.Lock()
        # A walk's next directories, made while the mount waits (run in its nursery).
        self.ahead = ListAhead(tree, counters)

    def init(self) -> None:
        # Called while answering INIT; waiters run after the reply has been sent.
        self.initialised.set()

    # -- helpers ----------------------------------------------------------------------

    async def _entries(self, node: DirNode) -> dict[str, Node]:
        # A thread hop costs more than building entries that need no store I/O.
        if not self.tree.needs_io(node):
            return self.tree.entries(node)
        return await trio.to_thread.run_sync(self.tree.entries, node)

    async def _fresh(self, directory: DirNode | None) -> None:
        """Check ``directory`` against the store where the TTL says so (close-to-open:
        every lookup, stat and open comes here first), and tell the kernel what
        changed."""
        if directory is None or self.tree.fresh(directory):
            return
        changes = await trio.to_thread.run_sync(self.tree.revalidate, directory)
        if changes:
            await self._tell_kernel(changes)

    async def _tell_kernel(self, changes: Changes) -> None:
        """Forget the old numbers of relisted directories (and make the kernel look
        their names up again), and drop the pages and attributes of the files of
        reloaded ones. Invalidations run in a thread: the kernel may make one wait
        for a reply to a read of the same file."""
        names: list[tuple[int, bytes]] = []
        inodes: list[tuple[int, bool]] = []
        for directory, old_names in changes.relisted:
            directory_inode = self.inodes.inode_of(directory)
            for inode in self.inodes.renumber(directory, old_names):
                self.attrs.drop(inode)
                self.page_cached.discard(inode)
            names += [(directory_inode, os.fsencode(name)) for name in old_names]
            self.attrs.drop(directory_inode)
            # Its listing, as the kernel may have kept it, too.
            directory.kernel_listing = -1
            inodes.append((directory_inode, False))
        for directory in changes.reloaded:
            directory_inode = self.inodes.inode_of(directory)
            self.attrs.drop(directory_inode)
            inodes.append((directory_inode, True))
            if not directory.first_inode:
                continue  # never numbered: the kernel holds none of its files
            for entry in self.tree.entries(directory).values():
                if isinstance(entry, FileNode):
                    inode = self.inodes.inode_of(entry)
                    # Pages only where a read may have left some: a stream of opens
                    # past the TTL pays one invalidation per read file.
                    cached = inode in self.page_cached
                    self.page_cached.discard(inode)
                    inodes.append((inode, not cached))
        if self.mounted:
            await trio.to_thread.run_sync(kernel.invalidate_all, names, inodes)

    async def _refreshed(self) -> None:
        """``.zarrfs/refresh``: the kernel forgets every attribute and page it holds,
        so that each next use comes here, and is checked."""
        self.attrs.clear()
        self.page_cached.clear()
        if self.mounted:
            held = [(inode, False) for inode in self.inodes.held()]
            await trio.to_thread.run_sync(kernel.invalidate_all, [], held)

    def _dir(self, inode: int) -> DirNode:
        node = self.inodes.node(inode)
        if not isinstance(node, DirNode):
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        return node

    # -- namespace --------------------------------------------------------------------

    @boundary
    async def lookup(
        self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext | None = None
    ) -> pyfuse3.EntryAttributes:
        parent = self._dir(parent_inode)
        await self._fresh(parent)
        entries = await self._entries(parent)
        node = entries.get(os.fsdecode(name))
        if node is None:
            # A chunk key, as a Zarr reader of the mount asks for it (never listed).
            node = await self.tree.find_unlisted(parent, os.fsdecode(name))
            if node is None:
                raise pyfuse3.FUSEError(errno.ENOENT)
        attr = self.attrs.of(node)
        self.inodes.remember(attr.st_ino)
        return attr

    @boundary
    async def forget(self, inode_list: list[tuple[int, int]]) -> None:
        for inode, count in inode_list:
            if self.inodes.forget(inode, count):
                self.attrs.drop(inode)
                self.page_cached.discard(inode)

    @boundary
    async def getattr(
        self, inode: int, ctx: pyfuse3.RequestContext | None = None
    ) -> pyfuse3.EntryAttributes:
        node = self.inodes.node(inode)
        directory = node if isinstance(node, DirNode) else node.parent
        if directory is not None and not self.tree.fresh(directory):
            await self._fresh(directory)
            node = self.inodes.node(inode)  # made anew if its directory changed
        attr = self.attrs.of(node)
        if attr.st_ino != inode:
            # An old number of an entry numbered anew (its directory changed): it is
            # answered under the number asked, until the kernel has forgotten it.
            attr = self.attrs.new(node, inode)
            attr.st_size = self.attrs.of(node).st_size
            attr.st_blocks = -(-attr.st_size // 512)
        return attr

    @boundary
    async def setattr(
        self, inode: int, attr: Any, fields: Any, fh: int | None, ctx: Any = None
    ) -> pyfuse3.EntryAttributes:
        node = self.inodes.node(inode)
        if self.read_only:
            raise ReadOnlyError("setattr on a read-only mount")
        if fields is not None and fields.update_size:
            if not isinstance(node, FileNode):
                raise pyfuse3.FUSEError(errno.EISDIR)
            self._pin(node)
            node.view.truncate(attr.st_size)
            if fh is not None:  # ftruncate: that handle's close stores the change
                with contextlib.suppress(ZarrfsError):
                    self.files.get(fh).wrote = True
            await self._changed(inode, data=True)
        # Times, mode and owner follow the store; changing them is accepted and ignored,
        # as on sshfs, so `touch` and `cp -p` work.
        return self.attrs.of(node)

    @boundary
    async def opendir(
        self, inode: int, ctx: pyfuse3.RequestContext | None = None
    ) -> int | pyfuse3.FileInfo:
        directory = self._dir(inode)
        await self._fresh(directory)
        await self._entries(directory)
        # A directory's names never change once listed: encoded once while the tree
        # keeps the directory, every handle shares them (ls -R then find: each
        # directory opened twice).
        listing = self.tree.listing(directory)
        fh = self.dirs.add(listing)
        self.ahead.opened(directory)
        if not CACHED_LISTINGS or not len(listing) or unlisted(directory):
            return fh  # (a chunk key's directory lists nothing)
        return pyfuse3.FileInfo(fh=fh, keep_cache=self._listing_kept(directory), cache_readdir=True)

    def _listing_kept(self, directory: DirNode) -> bool:
        """Whether the listing the kernel may hold of ``directory`` is still its own.

        Every open comes here, checked against the store first (``_fresh``), so a
        listing the kernel keeps follows the TTL as names do. The kernel's copy
        names each entry's inode: it stays right while the entries keep their
        numbers, which they lose only when the names change (fuse/inodes.py's
        ``renumber``); then the kernel drops its copy at this open."""
        first = self.inodes.first_of(directory)
        kept = directory.kernel_listing == first
        directory.kernel_listing = first
        return kept

    @boundary
    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        self.counters.directory_reads += 1
        listing = self.dirs.get(fh)
        names, nodes = listing.names, listing.nodes
        attributes = self.attrs.lister()
        for position in range(start_id, len(names)):
            if not pyfuse3.readdir_reply(
                token, names[position], attributes(nodes[position]), position + 1
            ):
                break

    @boundary
    async def releasedir(self, fh: int) -> None:
        self.dirs.pop(fh)

    # -- files ------------------------------------------------------------------------

    @boundary
    async def open(
        self, inode: int, flags: int, ctx: pyfuse3.RequestContext | None = None
    ) -> pyfuse3.FileInfo:
        node = self.inodes.node(inode)
        if isinstance(node, DirNode):
            raise pyfuse3.FUSEError(errno.EISDIR)
        if node.parent is not None and not self.tree.fresh(node.parent):
            await self._fresh(node.parent)
            node = self.inodes.node(inode)  # made anew if its directory changed
            assert isinstance(node, FileNode)
        if flags & _WRITE_FLAGS:
            if self.read_only:
                raise ReadOnlyError(f"{node.name}: opened for writing on a read-only mount")
            if not node.view.writable:
                raise AccessDeniedError(f"{node.name}: metadata documents are read-only")
            self._pin(node)
        handle = OpenFile(node, inode)
        # Before any handle of array data exists, the kernel is asked whether it maps
        # direct I/O files shared: how reads are served, and how writes drop pages.
        direct = node.view.reads_counted and await self._direct_reads()
        if self.attrs.fresh_document(node):
            await self.tree.store_shapes(self.inodes.parent(inode))
            return pyfuse3.FileInfo(fh=self.files.add(handle), direct_io=True)
        if flags & _WRITE_FLAGS:
            if flags & os.O_TRUNC:
                node.view.open_truncated()
                handle.wrote = True
                await self._changed(inode, data=True)
            # A handle that writes bypasses the page cache: the kernel would otherwise
            # keep the zeros it put past the old end of file where the array reads
            # fill value, in pages it holds locked while it waits for our reply.
            return pyfuse3.FileInfo(fh=self.files.add(handle), direct_io=True)
        if node.view.volatile:
            return pyfuse3.FileInfo(fh=self.files.add(handle), direct_io=True)
        if direct:
            # One copy per read, straight into the reader's buffer; the kernel still
            # maps the file shared through its page cache (fuse/directio.py).
            return pyfuse3.FileInfo(fh=self.files.add(handle), direct_io=True)
        return pyfuse3.FileInfo(fh=self.files.add(handle), keep_cache=True)

    @boundary
    async def read(self, fh: int, off: int, size: int) -> bytes | memoryview:
        handle = self.files.get(fh)
        view = handle.node.view
        # A read that continues the previous ones is part of a stream (dd, cat,
        # np.load), as is a large first read from the start: load what follows in
        # the background. The kernel's read-ahead sends requests concurrently, so
        # they may arrive slightly out of order.
        ahead = handle.next_offset
        if ahead - STREAM_SLACK * size <= off <= ahead or (
            off == 0 and ahead < 0 and size >= STREAM_START
        ):
            handle.next_offset = max(ahead, off + size)
            view.prefetch(handle.next_offset)
        else:
            handle.next_offset = off + size
        if not view.volatile:  # volatile views' handles bypass the page cache
            # Before the read, not after: a write landing while it runs must
            # invalidate the pages it fills (the kernel makes that invalidation wait
            # for them), or they would keep the bytes from before the write.
            self.page_cached.add(handle.inode)
        data = await view.read(off, size)
        if view.reads_counted:
            self.counters.bytes_read += len(data)
        return data

    @boundary
    async def write(self, fh: int, off: int, buf: bytes) -> int:
        handle = self.files.get(fh)
        view = handle.node.view
        # A full cache that cannot be stored refuses data (not .zarrfs/flush, which
        # adds none and must try the store at once).
        await view.admit()
        before = view.size
        written = await view.write(off, buf)
        handle.wrote = True
        await self._written(handle.inode)
        if view.size != before:
            await self._changed(handle.inode, data=False)
        if self.writeback is not None:
            await self.writeback.relieve()
        return written

    @boundary
    async def flush(self, fh: int) -> None:
        # close(): the chunks this handle wrote are in the store before it returns.
        handle = self.files.get(fh)
        if not handle.wrote:
            return
        try:
            await handle.node.view.sync()
        finally:
            pending = handle.node.view.unstored()
            if pending is not None:
                # close() fails with EINVAL, but a shell's `printf .. >> f` closes
                # through dup2, which drops the error: the log must say it.
                log.warning(
                    "%s are pending after close; complete the row, or they are dropped at unmount",
                    pending,
                )

    @boundary
    async def fsync(self, fh: int, datasync: bool) -> None:
        await self.files.get(fh).node.view.sync()

    @boundary
    async def release(self, fh: int) -> None:
        handle = self.files.pop(fh)
        if handle is not None and handle.wrote:
            handle.node.view.closed()

    def _pin(self, node: FileNode) -> None:
        # What an array written through the mount is (its state, its documents) is
        # kept for good: the consolidated document that listed it would not show a
        # resize. A chunk key is never written.
        if node.parent is not None and not unlisted(node):
            self.tree.pin(node.parent)

    async def _direct_reads(self) -> bool:
        """Whether reads of array data bypass the page cache: the probe's answer, asked
        at most once (its own open of ``.zarrfs/stats`` is answered meanwhile)."""
        async with self._probed:
            probe, self.direct_probe = self.direct_probe, None
            if probe is not None:
                self.direct_maps = await trio.to_thread.run_sync(probe)
                direct = self.direct_maps and not self.kernel_cache
                self.counters.direct_reads = direct
                if not self.kernel_cache:
                    log.info("%s", DIRECT_READS if direct else NO_DIRECT_READS)
        return self.counters.direct_reads

    async def _changed(self, inode: int, *, data: bool) -> None:
        await pages.changed(self, inode, data=data)

    async def _written(self, inode: int) -> None:
        await pages.written(self, inode)

    # -- the tree's shape is the store's: no names are created, removed or renamed ----

    async def _refuse(self, *args: Any) -> Any:
        raise pyfuse3.FUSEError(errno.EROFS if self.read_only else errno.EPERM)

    create = mkdir = mknod = symlink = link = unlink = rmdir = rename = _refuse

    # -- filesystem -------------------------------------------------------------------

    @boundary
    async def statfs(self, ctx: pyfuse3.RequestContext | None = None) -> pyfuse3.StatvfsData:
        data = pyfuse3.StatvfsData()
        known = self.tree.store.statvfs()
        bsize, blocks, free = known if known else (4096, 0, 0)
        data.f_bsize = data.f_frsize = bsize
        data.f_blocks = blocks
        data.f_bfree = data.f_bavail = 0 if self.read_only else free
        data.f_files = data.f_ffree = data.f_favail = 0
        data.f_namemax = 255
        return data

    def _xattrs(self, inode: int) -> dict[str, bytes]:
        node = self.inodes.node(inode)
        if node is self.tree.control or unlisted(node):
            return {}  # .zarrfs/ is no Zarr group; chunk keys have no attributes
        if isinstance(node, FileNode):
            return node.view.xattrs()
        if node.state is not None:
            return array_xattrs(node.state.meta)
        if isinstance(node.meta, ArrayMeta):
            return array_xattrs(node.meta)
        return group_xattrs(node.meta)

    @boundary
    async def getxattr(
        self, inode: int, name: bytes, ctx: pyfuse3.RequestContext | None = None
    ) -> bytes:
        # The daemon's pid lets `zarrfs umount` wait until the daemon has exited.
        if inode == pyfuse3.ROOT_INODE and name == PID_XATTR:
            return str(os.getpid()).encode()
        value = self._xattrs(inode).get(os.fsdecode(name))
        if value is None:
            raise pyfuse3.FUSEError(pyfuse3.ENOATTR)
        return value

    @boundary
    async def listxattr(self, inode: int, ctx: pyfuse3.RequestContext | None = None) -> list:
        return [os.fsencode(name) for name in self._xattrs(inode)]

    async def setxattr(self, *args: Any) -> None:
        raise pyfuse3.FUSEError(errno.EROFS if self.read_only else errno.EPERM)

    removexattr = setxattr
