"""Telling the kernel what changed: names to forget, attributes and pages to drop.

Called in a worker thread: the kernel may make an invalidation wait for the reply
to a request of the same file (a read filling the pages being dropped), which the
FUSE thread must stay free to send. Without a kernel (handler tests) or for an
inode the kernel has forgotten, an invalidation does nothing.
"""

from __future__ import annotations

import logging

import pyfuse3

log = logging.getLogger("zarrfs.fuse.operations")


def invalidate(inode: int, attr_only: bool) -> None:
    log.debug("invalidate inode %d%s", inode, " (attributes)" if attr_only else "")
    try:
        pyfuse3.invalidate_inode(inode, attr_only=attr_only)
    except OSError as e:
        log.debug("invalidate_inode(%d): %s", inode, e)


def invalidate_all(names: list[tuple[int, bytes]], inodes: list[tuple[int, bool]]) -> None:
    """Forget each (directory, name) of ``names``, then drop each (inode, attributes
    only?) of ``inodes``."""
    for parent, name in names:
        try:
            pyfuse3.invalidate_entry_async(parent, name, ignore_enoent=True)
        except OSError as e:
            log.debug("invalidate_entry(%d, %r): %s", parent, name, e)
    for inode, attr_only in inodes:
        invalidate(inode, attr_only)
