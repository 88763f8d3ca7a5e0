"""The virtual namespace: Zarr groups and arrays as directories, views as files.

Directories are classified by the metadata key they hold and listed lazily, on
first use, so ``ls`` of one group reads only its children's metadata and never a
chunk; where the root holds consolidated metadata, it alone lists the hierarchy.
Which keys to read and what they mean is formats/metadata/hierarchy.py's business: this
module knows no format. Loading does store I/O and runs in worker threads; one lock
serialises it.

Memory. A directory keeps what names it (``DirNode``: a few slots, the names of a
group's children); what it is (its parsed metadata, its documents as shown, an
array's state and its files: ``_Loaded``) is loaded on first use. Listed from
consolidated metadata, a node's ``_Loaded`` is made again from the document
whenever asked, so only the most recently used ones are kept (``MAX_LOADED_NODES``,
``MAX_LOADED_BYTES`` of documents); listed from the store, it is kept for the
mount's lifetime (loading it again would read the store again, and could differ).
Kept for good as well: the root, and an array written through the mount (its
documents may have changed since the document listed it). What a node's first
loading had to say (documents of another layout beside it, an unsupported data
type) is logged then only; a consolidated entry, valid JSON, makes formats/ log
nothing. An array's state is never made twice: while anything holds it (an open
file, unflushed chunks, another array's header using it as a coordinate), loading
its node again finds it.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from zarrfs.core.arrays import ArrayState
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.write.writeback import WriteBack
from zarrfs.errors import MetadataError, NotFoundError, StoreError
from zarrfs.formats.metadata import hierarchy
from zarrfs.formats.metadata.consolidated import Consolidated
from zarrfs.formats.metadata.hierarchy import node_documents, read_root_keys
from zarrfs.formats.model import ArrayMeta, GroupMeta, NodeMeta
from zarrfs.stores.base import Store, join_key
from zarrfs.views import chunkkeys
from zarrfs.views.base import DocumentView, View
from zarrfs.views.chunkkeys import ChunkKeyView
from zarrfs.views.control import CONTROL_NAME, control_views
from zarrfs.views.info import INFO_NAME, InfoView
from zarrfs.views.npy import NpyView
from zarrfs.views.raw import RawView
from zarrfs.views.sidecars import HDR_NAME, sidecar_views

log = logging.getLogger(__name__)

RAW_NAME = "array.raw"
NPY_NAME = "array.npy"

# The nodes listed from consolidated metadata whose parsed metadata, documents and
# files are kept at once (docs/semantics.md, "Limits and hostile input"): a group of
# 10 000 arrays fits, so that each pass of ls -R, find, stat loads each array once.
MAX_LOADED_NODES = 12_288
MAX_LOADED_BYTES = 8 << 20  # of their documents as shown


@dataclass(eq=False, slots=True)
class FileNode:
    name: str
    view: View
    mtime: float
    parent: DirNode | None = field(default=None, repr=False)
    index: int = 0  # its position among the parent's entries (sorted by name)
    # What the FUSE layer made of it (its attributes): kept as long as the node.
    attributes: Any = field(default=None, repr=False)


class _Loaded:
    """What a directory is, loaded from its documents."""

    __slots__ = ("documents", "entries", "meta", "names", "order", "state", "used", "weight")

    def __init__(self, meta: NodeMeta, documents: dict[str, bytes], state: ArrayState | None):
        self.meta = meta
        self.documents = documents  # shared with the array state, which may rewrite them
        self.state = state  # arrays with flat views
        self.entries: dict[str, Node] | None = None  # by name, sorted; made when listed
        self.order: tuple[Node, ...] = ()  # the entries by position
        self.names: tuple[bytes, ...] | None = None  # theirs as the kernel is told them
        self.weight = sum(map(len, documents.values()))
        self.used = False  # since the tree last looked whether to drop it


class DirNode:
    """A group or array directory: what names it; the rest is loaded by its tree."""

    __slots__ = (
        "_children",
        "_coordinates",
        "_loaded",
        "_tree",
        "first_inode",
        "index",
        "mtime",
        "name",
        "parent",
    )

    def __init__(self, tree: Tree, parent: DirNode | None, name: str, mtime: float) -> None:
        self.name = name
        self.parent = parent
        self.index = 0  # its position among the parent's entries (sorted by name)
        self.mtime = mtime
        self.first_inode = 0  # the inode of its first entry (fuse/inodes.py); 0: none yet
        self._tree = tree
        # What it is, while loaded: for good, or while recent (then in tree._recent).
        self._loaded: _Loaded | None = None
        self._children: dict[str, DirNode] | None = None  # a group's, once listed
        self._coordinates: object = None  # an array's header coordinates, once listed

    def __repr__(self) -> str:
        return f"DirNode({self.path or '/'!r})"

    @property
    def path(self) -> str:
        if self.parent is None:
            return ""
        return join_key(self.parent.path, self.name)

    @property
    def meta(self) -> NodeMeta:
        return self._tree.loaded_node(self).meta

    @property
    def documents(self) -> dict[str, bytes]:
        return self._tree.loaded_node(self).documents

    @property
    def state(self) -> ArrayState | None:
        return self._tree.loaded_node(self).state

    @property
    def is_array(self) -> bool:
        return isinstance(self.meta, ArrayMeta)


class KeyDirNode(DirNode):
    """A directory component of an array's chunk keys ("c", "c/0"): found by
    lookup, never listed (views/chunkkeys.py). It lists nothing, and what it is
    is kept with it: it is no node of the hierarchy to load again."""

    __slots__ = ("__weakref__", "array", "prefix")

    def __init__(
        self, tree: Tree, parent: DirNode, name: str, array: DirNode, prefix: str
    ) -> None:
        super().__init__(tree, parent, name, array.mtime)
        self.array = array
        self.prefix = prefix  # its key below the array's
        self._loaded = _Loaded(GroupMeta(array.path, 0, ()), {}, None)
        self._loaded.entries = {}
        self._children = {}


class KeyFileNode(FileNode):
    """A chunk key of an array, its stored value: found by lookup, never listed."""

    __slots__ = ("__weakref__",)


Node = DirNode | FileNode


def unlisted(node: Node) -> bool:
    """Found by lookup alone: once the kernel forgets it, the mount may too."""
    return isinstance(node, (KeyDirNode, KeyFileNode))


class DirListing(Sequence[tuple[bytes, Node]]):
    """A directory's (name as bytes, entry) pairs by position; made once per loaded
    directory and shared by every handle."""

    __slots__ = ("names", "nodes")

    def __init__(self, names: tuple[bytes, ...], nodes: tuple[Node, ...]) -> None:
        self.names = names
        self.nodes = nodes

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, index: int) -> tuple[bytes, Node]:  # type: ignore[override]
        return self.names[index], self.nodes[index]


_NO_COORDINATES = object()  # listed: its header has none


class Tree:
    control: DirNode | None = None  # .zarrfs/ at the root, on mounts (show_control)

    def __init__(
        self,
        store: Store,
        cache: ChunkCache,
        writeback: WriteBack | None = None,
        *,
        consolidated: bool = True,
    ) -> None:
        self.store = store
        self.cache = cache
        self.writeback = writeback
        self._lock = threading.RLock()  # loading an array may load its siblings
        # Set when the hierarchy is listed from consolidated metadata alone.
        self.consolidated: Consolidated | None = None
        self._consolidated_mtime: float | None = None
        # The root keys read once (None: absent), and the document among them shown
        # beside a root group's own (.zmetadata).
        self._root_reads: dict[str, bytes | None] = {}
        self._root_extra: dict[str, bytes] = {}
        self._loaded_at = time.time()
        # Chunk-key nodes the kernel holds, by (array path, key below it): one node
        # (one inode) per name while it is known, none once forgotten.
        self._unlisted: weakref.WeakValueDictionary[tuple[str, str], Node] = (
            weakref.WeakValueDictionary()
        )
        # Nodes loaded from consolidated metadata, oldest first, and the weight of
        # their documents; one that was used since it came to the front gets a
        # second turn (the clock algorithm: a use costs a flag, not a reordering).
        self._recent: OrderedDict[DirNode, None] = OrderedDict()
        self._recent_bytes = 0
        # The array states of those dropped, while anything holds them.
        self._states: weakref.WeakValueDictionary[DirNode, ArrayState] = (
            weakref.WeakValueDictionary()
        )
        source = self._read_root()
        if consolidated and source is not None:
            self._open_consolidated(*source)
        if self.consolidated is None and not store.listable:
            log.warning(
                "%s cannot be listed and holds no consolidated metadata: only the node "
                "at its root is shown (zarr.consolidate_metadata() on the store lists "
                "all of it in one document)",
                store.describe(),
            )
        self.root = self._load_root()
        if writeback is not None:
            writeback.root_documents = self.root.documents

    # -- loading (blocking: worker threads) -------------------------------------------

    def _read_root(self) -> tuple[str, bytes] | None:
        """Read the root keys up to the first present one: (key, bytes), or None."""
        source = read_root_keys(
            self.store, self._root_reads, lambda key, e: log.warning("ignoring %s: %s", key, e)
        )
        if source is not None and hierarchy.shown_at_root(source[0]):
            self._root_extra[source[0]] = source[1]
        return source

    def _open_consolidated(self, key: str, data: bytes) -> None:
        opened = hierarchy.open_listing(key, data)
        for warning in opened.warnings:
            log.warning("%s", warning)
        self.consolidated = opened.listing
        if self.consolidated is not None:
            self._consolidated_mtime = self.store.mtime(self.consolidated.key)

    def _load_root(self) -> DirNode:
        node = self._new_node(None, "", "")
        if node is None:
            raise MetadataError(f"{self.store.describe()}: no Zarr group or array metadata found")
        return node

    def _read_docs(self, path: str, names: tuple[str, ...]) -> dict[str, bytes]:
        return node_documents(self.store, self.consolidated, self._root_reads, path, names)

    def _new_node(self, parent: DirNode | None, name: str, path: str) -> DirNode | None:
        """Classify the store directory ``path``, ``name`` in ``parent`` (None: the
        root); ``None`` if it is no Zarr node.

        Malformed metadata raises ``MetadataError`` only for the root; elsewhere the
        node is hidden with one log line and the rest of the tree stays usable.
        """
        try:
            docs = self._read_docs(path, hierarchy.NODE_KEYS)
            found = hierarchy.node_in(self.consolidated, path, docs)
        except (MetadataError, StoreError) as e:
            # A bad document, or one the store may not read (a symlink, a FIFO,
            # too large): the node is hidden, the rest of the tree stays usable.
            if not path:
                raise
            log.warning("hiding %s: %s", path, e)
            return None
        if found is None:
            return None
        meta, docs = found.meta, dict(found.documents)
        for warning in found.warnings:
            log.warning("%s", warning)
        if found.ignored:
            log.warning(
                "%s also holds %s; showing it as %s",
                path or "/",
                ", ".join(found.ignored),
                next(iter(docs)),
            )
        if isinstance(meta, GroupMeta) and not path:
            docs.update(self._root_extra)
        if isinstance(meta, ArrayMeta) and meta.unsupported:
            log.info("array %s: %s; showing its metadata only", meta.display_name, meta.unsupported)
        node = DirNode(self, parent, name, self._mtime(path, docs))
        loaded = self._make_loaded(node, meta, docs)
        if self.consolidated is None or not path:
            node._loaded = loaded  # for good
        else:
            self._remember(node, loaded)
        return node

    def _make_loaded(self, node: DirNode, meta: NodeMeta, docs: dict[str, bytes]) -> _Loaded:
        state = None
        if isinstance(meta, ArrayMeta) and meta.unsupported is None:
            state = ArrayState(meta, docs, self.cache, self.writeback)
        return _Loaded(meta, docs, state)

    def _reload(self, node: DirNode) -> _Loaded:
        """What a node listed from consolidated metadata is, again: its state where
        something still holds it, else parsed again from the document (which made
        it once already, logging what it had to say)."""
        state = self._states.get(node)
        if state is not None:
            return _Loaded(state.meta, state.documents, state)
        path = node.path
        docs = self._read_docs(path, hierarchy.NODE_KEYS)
        found = hierarchy.node_in(self.consolidated, path, docs)
        if found is None:  # it was a node: the document has not changed
            raise MetadataError(f"{path}: no longer a node")
        return self._make_loaded(node, found.meta, dict(found.documents))

    def loaded_node(self, node: DirNode) -> _Loaded:
        """What ``node`` is: kept, recently used, or loaded again."""
        loaded = node._loaded
        if loaded is not None:
            loaded.used = True
            return loaded
        with self._lock:
            loaded = node._loaded
            if loaded is None:
                loaded = self._reload(node)
                self._remember(node, loaded)
            return loaded

    def _remember(self, node: DirNode, loaded: _Loaded) -> None:
        recent = self._recent
        with self._lock:
            node._loaded = loaded
            recent[node] = None
            self._recent_bytes += loaded.weight
            while len(recent) > 1 and (
                len(recent) > MAX_LOADED_NODES or self._recent_bytes > MAX_LOADED_BYTES
            ):
                oldest, _ = recent.popitem(last=False)
                dropped = oldest._loaded
                assert dropped is not None
                if dropped.used or oldest is node:  # the one just loaded stays
                    dropped.used = False
                    recent[oldest] = None
                    continue
                oldest._loaded = None
                self._recent_bytes -= dropped.weight
                if dropped.state is not None:
                    self._states[oldest] = dropped.state  # found again while in use

    def pin(self, node: DirNode) -> None:
        """Keep what ``node`` is for good: an array about to be written (a resize
        changes its documents, which the consolidated document would not show)."""
        with self._lock:
            loaded = self.loaded_node(node)
            if node in self._recent:
                del self._recent[node]
                self._recent_bytes -= loaded.weight

    def _mtime(self, path: str, docs: dict[str, bytes]) -> float:
        if self.consolidated is not None and self._consolidated_mtime is not None:
            return self._consolidated_mtime
        if self.store.remote:
            return self._loaded_at  # a request per document would cost more than it tells
        mtimes = [self.store.mtime(join_key(path, d)) for d in docs]
        return max((m for m in mtimes if m is not None), default=time.time())

    # -- entries ------------------------------------------------------------------------

    @staticmethod
    def _document_entries(node: DirNode, loaded: _Loaded) -> dict[str, Node]:
        return {
            name: FileNode(name, DocumentView(loaded.documents, name), node.mtime, node)
            for name in loaded.documents
        }

    def _array_entries(self, node: DirNode, loaded: _Loaded) -> dict[str, Node]:
        entries = self._document_entries(node, loaded)
        state = loaded.state
        if state is not None:
            entries[RAW_NAME] = FileNode(RAW_NAME, RawView(state), node.mtime, node)
            entries[NPY_NAME] = FileNode(NPY_NAME, NpyView(state), node.mtime, node)
            for name, view in self._sidecar_views(node, state).items():
                entries[name] = FileNode(name, view, node.mtime, node)
        assert isinstance(loaded.meta, ArrayMeta)
        info = InfoView(loaded.meta, loaded.documents, state, self.store)
        entries[INFO_NAME] = FileNode(INFO_NAME, info, node.mtime, node)
        return entries

    def _sidecar_views(self, node: DirNode, state: ArrayState) -> dict[str, View]:
        """The headers, with the coordinates settled when the array was first listed:
        which siblings they are is decided from metadata once (a sibling resized
        since gives no map info; it is not replaced by another)."""
        if node._coordinates is None:
            views = sidecar_views(state, functools.partial(self._sibling_array, node))
            found = getattr(views.get(HDR_NAME), "coordinates", None)
            node._coordinates = _NO_COORDINATES if found is None else found
            return views
        views = sidecar_views(state, lambda name: None)
        header = views.get(HDR_NAME)
        if header is not None and node._coordinates is not _NO_COORDINATES:
            header.coordinates = node._coordinates  # type: ignore[attr-defined]
        return views

    def _sibling_array(self, node: DirNode, name: str) -> ArrayState | None:
        """The array ``name`` beside ``node`` in its group (where xarray keeps
        coordinates), from the group's children: the parent was listed to reach it."""
        children = node.parent._children if node.parent is not None else None
        sibling = children.get(name) if children is not None else None
        return sibling.state if sibling is not None and sibling is not node else None

    def _group_entries(self, node: DirNode, loaded: _Loaded) -> dict[str, Node]:
        entries = self._document_entries(node, loaded)
        if node._children is None:
            children = {}
            path = node.path
            for child in self._child_names(path):
                if child in entries:
                    continue
                made = self._new_node(node, child, join_key(path, child))
                if made is not None:
                    children[child] = made
            node._children = children
        entries.update(node._children)
        return entries

    def _child_names(self, path: str) -> tuple[str, ...]:
        if self.consolidated is not None:
            return self.consolidated.children.get(path, ())
        try:
            return self.store.list_dir(path).prefixes
        except StoreError as e:
            log.warning("cannot list %s: %s", path or "/", e)
            return ()

    def show_control(self) -> None:
        """Show the control directory (views/control.py) at the root, as a mount does
        (``zarrfs tree`` and tests of the tree do not); before the root is listed."""
        assert self.root._children is None, "the root is listed already"
        now = time.time()
        files = control_views(self.cache, self.writeback, self.store)
        control = DirNode(self, self.root, CONTROL_NAME, now)
        control._loaded = _Loaded(GroupMeta(CONTROL_NAME, 0, ()), {}, None)
        control._children = {}
        _listed(
            control._loaded,
            {n: FileNode(n, v, now, control) for n, v in sorted(files.items())},
        )
        self.control = control

    def _add_control(self, node: DirNode, loaded: dict[str, Node]) -> None:
        if node is not self.root or self.control is None:
            return
        if CONTROL_NAME in loaded:
            # Scripts rely on the control directory being there on every mount.
            log.warning("hiding the store's %s: zarrfs's control directory", CONTROL_NAME)
        loaded[CONTROL_NAME] = self.control

    def _listed(self, node: DirNode) -> _Loaded:
        loaded = self.loaded_node(node)
        if loaded.entries is None:
            with self._lock:
                if loaded.entries is None:
                    if isinstance(loaded.meta, ArrayMeta):
                        entries = self._array_entries(node, loaded)
                    else:
                        entries = self._group_entries(node, loaded)
                    self._add_control(node, entries)
                    _listed(loaded, entries)
        return loaded

    def entries(self, node: DirNode) -> Mapping[str, Node]:
        """The directory's children by name, sorted (blocking on first call)."""
        loaded = node._loaded
        if loaded is not None and loaded.entries is not None:
            loaded.used = True
            return loaded.entries
        entries = self._listed(node).entries
        assert entries is not None
        return entries

    def child(self, node: DirNode, index: int) -> Node:
        """The entry at ``index`` of the directory (IndexError: none)."""
        loaded = node._loaded
        if loaded is None or loaded.entries is None:
            loaded = self._listed(node)
        loaded.used = True
        return loaded.order[index]

    def listing(self, node: DirNode) -> DirListing:
        """The directory's entries as the kernel is told them (blocking on first call)."""
        loaded = self._listed(node)
        if loaded.names is None:
            assert loaded.entries is not None
            loaded.names = tuple(map(os.fsencode, loaded.entries))
        return DirListing(loaded.names, loaded.order)

    def lookup(self, node: DirNode, name: str) -> Node:
        try:
            return self.entries(node)[name]
        except KeyError:
            raise NotFoundError(name) from None

    async def find_unlisted(self, parent: DirNode, name: str) -> Node | None:
        """A name ``parent`` does not list: a chunk key of its array (the node of
        its stored value: NotFoundError when the unit is not stored) or a directory
        component of one; None for anything else (views/chunkkeys.py)."""
        if isinstance(parent, KeyDirNode):
            array, relative = parent.array, f"{parent.prefix}/{name}"
        else:
            array, relative = parent, name
        if array is None or not isinstance(array.meta, ArrayMeta):
            return None
        meta = array.state.meta if array.state is not None else array.meta
        unit = chunkkeys.unit_named(meta, relative)
        if unit is not None:
            view = ChunkKeyView(self.store, meta, unit, array.state, self.writeback)
            await view.find()
            known = self._unlisted.get((array.path, relative))
            if isinstance(known, KeyFileNode):
                assert isinstance(known.view, ChunkKeyView)
                if known.view.same_value(view):
                    return known  # same version: same inode, the kernel keeps its dentry
            node = KeyFileNode(name, view, view.mtime or array.mtime, parent)
        elif chunkkeys.is_key_directory(meta, relative):
            known = self._unlisted.get((array.path, relative))
            if isinstance(known, KeyDirNode):
                return known
            node = KeyDirNode(self, parent, name, array, relative)
        else:
            return None
        self._unlisted[(array.path, relative)] = node
        return node

    async def store_shapes(self, node: DirNode | None) -> None:
        """Before a metadata document of ``node`` is read on a write mount: the
        shapes changed through the mount are stored (with the chunks they hold),
        so the document is the array's as ``array.raw`` shows it; at the root,
        where consolidated metadata holds them all, every array's."""
        writeback = self.writeback
        if writeback is None or node is None:
            return
        for state in writeback.states():
            if node is not self.root and state is not node.state:
                continue
            if state.metadata_changed or state.stale_range() is not None:
                await writeback.store_array(state)

    def resolve(self, path: str) -> Node:
        """A node by its virtual path ("a/b/array.raw"); for tests and tools."""
        node: Node = self.root
        for part in [p for p in path.split("/") if p]:
            if not isinstance(node, DirNode):
                raise NotFoundError(path)
            node = self.lookup(node, part)
        return node

    def loaded(self, node: DirNode) -> bool:
        """Whether the directory has been listed."""
        loaded = node._loaded
        return node._children is not None or (loaded is not None and loaded.entries is not None)

    def needs_io(self, node: DirNode) -> bool:
        """Whether listing ``node`` reads the store (else it is quick enough to do inline)."""
        if self.consolidated is not None:
            return False
        return not self.loaded(node) and not isinstance(node.meta, ArrayMeta)


def _listed(loaded: _Loaded, entries: dict[str, Node]) -> None:
    """Set the entries, sorted by name, each knowing its position."""
    ordered = dict(sorted(entries.items()))
    order = tuple(ordered.values())
    for index, entry in enumerate(order):
        entry.index = index
    loaded.order = order
    loaded.entries = ordered
