"""The tree of nodes the mount shows: Zarr groups and arrays as directories,
their documents and flat views as files.

The parts, and who owns whom:

- ``tree.py``: ``Tree``, the one object the FUSE layer asks (entries, lookups,
  listings as the kernel is told them). It is given the store, the chunk cache
  and the write-back (None: read-only) by whoever builds the mount, reads the
  root and any consolidated metadata, and loads each directory from its
  documents on first use, making its ``ArrayState`` (handed the cache and the
  write-back) when it is first used. It owns the root node, the control directory, the recent-node
  cache and the chunk-key nodes; one lock serialises its loading.
- ``nodes.py``: ``DirNode`` (a group or array directory: what names it, and while
  loaded what it is, ``Loaded``: metadata, documents, array state, entries) and
  ``FileNode`` (a name and its view). A directory owns its entries; a file its
  view; a node asks the tree, its loader, for what it is.
- ``recent.py``: ``RecentNodes``, which of the directories listed from
  consolidated metadata keep what they are (the most recently used), and the
  array states of dropped ones while anything holds them.
- ``listing.py``: what a directory lists: documents, an array's views (handed its
  state and the write-back), ``info``, the sidecar headers and their
  coordinates, the control directory at the root; sorted, each entry knowing its
  position (which fuse/inodes.py numbers it by).
- ``keys.py``: ``ChunkKeys``, the names found by lookup and never listed (an
  array's chunk keys), one node per name while the kernel holds it.

Views (views/) make the files' content; the namespace chooses which exist and
where. Nothing here talks to the kernel (fuse/).
"""
