"""The pyfuse3 layer: kernel requests answered from the tree (namespace/) and its
views (views/).

- ``operations.py``: ``Operations``, the handlers, each behind one error boundary
  (zarrfs errors become their errno, anything else is logged and becomes EIO).
  Whoever builds the mount (daemon/) gives it the tree, the mount's counters
  (it counts failed requests and the array bytes it returns) and the write-back
  (None: read-only; each write waits on it while it stores past its budget).
  It owns the inode and handle tables and the directories' attributes.
- ``boundary.py``: the error boundary of every handler; ``kernel.py``: telling the
  kernel which names, attributes and pages are stale (in a worker thread).
- ``inodes.py``: inode numbers for nodes (by position in a directory's listing,
  so the tree may drop a node and make it again) and open-handle numbers.

What the layer needs of a file is its view (views/base.py ``View``): its size;
``read``, ``write``, ``truncate``, ``open_truncated``, ``prefetch`` and ``closed``;
whether it may be written (``writable``), whether the kernel may cache it
(``volatile``: never; ``document``: a metadata document a flush may rewrite),
whether reads count as array bytes (``reads_counted``); and the hooks ``admit``
(before a write), ``sync`` (fsync, and close after writes), ``unstored`` (what
close leaves pending, for the log) and ``xattrs``. A view is never asked for
anything else.
"""
