"""What the kernel is told when an array's files change through the mount, so that
it serves no stale page or size (the pages of files read through the page cache,
the attributes of files whose size follows the array's shape).

Operations (fuse/operations.py) calls these after writes, truncates and resizes;
invalidations run in a thread: the kernel may make one wait for a reply to a
request of the same file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from zarrfs.fuse import kernel
from zarrfs.namespace.nodes import FileNode

if TYPE_CHECKING:
    from zarrfs.fuse.operations import Operations

# Seconds a write waits for the kernel to drop the other file's pages (``written``).
SIBLING_WAIT = 1.0


async def changed(ops: Operations, inode: int, *, data: bool) -> None:
    """Tell the kernel that an array's files changed, so no stale page is served.

    ``array.raw`` and ``array.npy`` share their bytes, so both are invalidated:
    their pages (``data``) where a reading handle may have cached some, else
    their attributes (size). Runs in a thread.
    """
    for target in _changed_inodes(ops, inode, data=data):
        await trio.to_thread.run_sync(kernel.invalidate, target, not data)


async def written(ops: Operations, inode: int) -> None:
    """``changed`` of the data after a write through ``inode``.

    Where shared writable maps exist (the kernel maps direct I/O files), a write
    may be the kernel writing back a map's pages, which stay locked until it is
    answered: dropping them waits for that answer. So the
    pages of the file written are dropped after the answer (the kernel drops a
    direct write's range from them itself), and those of its sibling (array.raw
    for array.npy) before it, but not for longer than SIBLING_WAIT (both files
    being written back at once would otherwise wait for each other).
    """
    if not ops.page_cached:
        return  # no file holds pages: the common case of a stream of writes
    if not ops.direct_maps:
        await changed(ops, inode, data=True)
        return
    targets = _changed_inodes(ops, inode, data=True)
    if inode in targets:
        trio.lowlevel.spawn_system_task(_drop_pages, inode)
    siblings = [target for target in targets if target != inode]
    if not siblings:
        return
    with trio.move_on_after(SIBLING_WAIT):
        for target in siblings:
            await trio.to_thread.run_sync(kernel.invalidate, target, False, abandon_on_cancel=True)


async def _drop_pages(inode: int) -> None:
    await trio.to_thread.run_sync(kernel.invalidate, inode, False)


def _changed_inodes(ops: Operations, inode: int, *, data: bool) -> list[int]:
    """The inodes of the files sharing ``inode``'s bytes whose pages (``data``)
    or attributes the kernel may hold."""
    parent = ops.inodes.parent(inode)
    if parent is None or not ops.mounted:
        return []
    targets = []
    files = list(ops.tree.entries(parent).values())
    group = parent.parent
    if not data and group is not None and ops.tree.listed(group):
        # A group's files made from its arrays (group.nc) change size with them.
        files += [n for n in ops.tree.entries(group).values() if isinstance(n, FileNode)]
    for sibling in files:
        if not isinstance(sibling, FileNode):
            continue
        view = sibling.view
        if not (view.writable or (view.volatile and not data)):
            continue  # metadata documents change at flush; info's size with the shape
        sibling_inode = ops.inodes.inode_of(sibling)
        if data:
            # No read since the last invalidation: the kernel holds no pages of it
            # (writing handles use direct I/O), so a stream of writes pays once.
            if sibling_inode not in ops.page_cached:
                continue
            ops.page_cached.discard(sibling_inode)
        targets.append(sibling_inode)
    return targets
