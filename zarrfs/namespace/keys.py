"""The names a directory does not list but finds: an array's chunk keys.

A Zarr reader of the mount asks for each chunk by its key (views/chunkkeys.py
says which names those are). Each name the kernel holds has one node (one inode)
while it is known, none once forgotten: the nodes are kept by weak reference, by
(array path, key below the array).
"""

from __future__ import annotations

import weakref

from zarrfs.core.write.writeback import WriteBack
from zarrfs.formats.model import ArrayMeta
from zarrfs.namespace.nodes import DirNode, KeyDirNode, KeyFileNode, Loader, Node
from zarrfs.stores.base import Store
from zarrfs.views import chunkkeys
from zarrfs.views.chunkkeys import ChunkKeyView


class ChunkKeys:
    """The chunk-key nodes of a tree, found by lookup."""

    def __init__(self, loader: Loader, store: Store, writeback: WriteBack | None) -> None:
        self._loader = loader
        self._store = store
        self._writeback = writeback
        self._known: weakref.WeakValueDictionary[tuple[str, str], Node] = (
            weakref.WeakValueDictionary()
        )

    async def find(self, parent: DirNode, name: str) -> Node | None:
        """A name ``parent`` does not list: a chunk key of its array (the node of
        its stored value: NotFoundError when the unit is not stored) or a directory
        component of one; None for anything else."""
        if isinstance(parent, KeyDirNode):
            array, relative = parent.array, f"{parent.prefix}/{name}"
        else:
            array, relative = parent, name
        if array is None or not isinstance(array.meta, ArrayMeta):
            return None
        meta = array.state.meta if array.state is not None else array.meta
        unit = chunkkeys.unit_named(meta, relative)
        key = (array.path, relative)
        node: Node
        if unit is not None:
            view = ChunkKeyView(self._store, meta, unit, array.state, self._writeback)
            await view.find()
            known = self._known.get(key)
            if isinstance(known, KeyFileNode):
                assert isinstance(known.view, ChunkKeyView)
                if known.view.version == view.version:
                    return known  # same version: same inode, the kernel keeps its dentry
            node = KeyFileNode(name, view, view.mtime or array.mtime, parent)
        elif chunkkeys.is_key_directory(meta, relative):
            known = self._known.get(key)
            if isinstance(known, KeyDirNode):
                return known
            node = KeyDirNode(self._loader, parent, name, array, relative)
        else:
            return None
        self._known[key] = node
        return node
