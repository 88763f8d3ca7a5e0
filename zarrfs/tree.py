"""The virtual namespace: Zarr groups and arrays as directories, views as files.

Directories are classified by the metadata key they hold and listed lazily, on
first use, so ``ls`` of one group reads only its children's metadata and never a
chunk; where the root holds consolidated metadata, it alone lists the hierarchy.
Which keys to read and what they mean is formats/hierarchy.py's business: this
module knows no format. Loading does store I/O and runs in worker threads; one lock
serialises it.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

from zarrfs.core.arrays import ArrayState
from zarrfs.core.chunks import ChunkCache
from zarrfs.core.writeback import WriteBack
from zarrfs.errors import InvalidValueError, MetadataError, NotFoundError, StoreError
from zarrfs.formats import hierarchy
from zarrfs.formats.hierarchy import Listing
from zarrfs.formats.model import ArrayMeta, GroupMeta, NodeMeta, join_key
from zarrfs.stores.base import Store
from zarrfs.views import chunkkeys
from zarrfs.views.base import DocumentView, View
from zarrfs.views.chunkkeys import ChunkKeyView
from zarrfs.views.control import CONTROL_NAME, control_views
from zarrfs.views.info import INFO_NAME, InfoView
from zarrfs.views.npy import NpyView
from zarrfs.views.raw import RawView
from zarrfs.views.sidecars import sidecar_views

log = logging.getLogger(__name__)

RAW_NAME = "array.raw"
NPY_NAME = "array.npy"


@dataclass(eq=False)
class FileNode:
    name: str
    view: View
    mtime: float


@dataclass(eq=False)
class DirNode:
    name: str
    meta: NodeMeta
    mtime: float
    documents: dict[str, bytes]
    state: ArrayState | None = field(default=None, repr=False)  # arrays with flat views
    entries: dict[str, Node] | None = field(default=None, repr=False)

    @property
    def path(self) -> str:
        return self.meta.path

    @property
    def is_array(self) -> bool:
        return isinstance(self.meta, ArrayMeta)


@dataclass(eq=False)
class KeyDirNode(DirNode):
    """A directory component of an array's chunk keys ("c", "c/0"): found by
    lookup, never listed (views/chunkkeys.py)."""

    array: DirNode | None = field(default=None, repr=False)
    prefix: str = ""  # its key below the array's


@dataclass(eq=False)
class KeyFileNode(FileNode):
    """A chunk key of an array, its stored value: found by lookup, never listed."""


Node = DirNode | FileNode


def unlisted(node: Node) -> bool:
    """Found by lookup alone: once the kernel forgets it, the mount may too."""
    return isinstance(node, (KeyDirNode, KeyFileNode))


def read_root_keys(
    store: Store,
    reads: dict[str, bytes | None],
    ignoring: Callable[[str, InvalidValueError], None],
) -> tuple[str, bytes] | None:
    """Read the root keys into ``reads`` (None: absent) up to the first present one:
    (key, bytes), or None. A consolidated document the store may not read is handed
    to ``ignoring`` (the store is listed instead); the root node's own document
    raises InvalidValueError (the root is unusable)."""
    for key in hierarchy.ROOT_KEYS:
        try:
            data = store.get(key, limit=hierarchy.ROOT_LIMIT)
        except InvalidValueError as e:
            if not hierarchy.shown_at_root(key):
                raise
            ignoring(key, e)
            return None
        reads[key] = data
        if data is not None:
            return key, data
    return None


def node_documents(
    store: Store,
    listing: Listing | None,
    root_reads: dict[str, bytes | None],
    path: str,
    names: tuple[str, ...] = hierarchy.NODE_KEYS,
) -> dict[str, bytes]:
    """The documents ``names`` that store directory ``path`` holds: from the
    consolidated ``listing`` when there is one, else from the store (the root's
    from ``root_reads``, read once with the root keys)."""
    if listing is not None:
        return listing.read(path, names)
    if store.remote and store.listable:
        # Over a network one listing costs less than probing every candidate:
        # only the documents the directory holds are fetched.
        present = set(store.list_dir(path).keys)
        names = tuple(n for n in names if n in present)
    docs = {}
    for name in names:
        if not path and name in root_reads:
            data = root_reads[name]
        else:
            data = store.get(join_key(path, name), limit=hierarchy.NODE_LIMIT)
        if data is not None:
            docs[name] = data
    return docs


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
        self._lock = threading.Lock()
        # Set when the hierarchy is listed from consolidated metadata alone.
        self.consolidated: Listing | None = None
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
        self.consolidated = hierarchy.open_listing(key, data)
        if self.consolidated is not None:
            self._consolidated_mtime = self.store.mtime(self.consolidated.key)

    def _load_root(self) -> DirNode:
        node = self._load_node("", "")
        if node is None:
            raise MetadataError(f"{self.store.describe()}: no Zarr group or array metadata found")
        return node

    def _read_docs(self, path: str, names: tuple[str, ...]) -> dict[str, bytes]:
        return node_documents(self.store, self.consolidated, self._root_reads, path, names)

    def _load_node(self, path: str, name: str) -> DirNode | None:
        """Classify the store directory ``path``; ``None`` if it is no Zarr node.

        Malformed metadata raises ``MetadataError`` only for the root; elsewhere the
        node is hidden with one log line and the rest of the tree stays usable.
        """
        try:
            found = hierarchy.node_at(path, self._read_docs(path, hierarchy.NODE_KEYS))
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
        return DirNode(
            name=name,
            meta=meta,
            mtime=self._mtime(path, docs),
            documents=docs,
            state=self._state(meta, docs),
        )

    def _mtime(self, path: str, docs: dict[str, bytes]) -> float:
        if self.consolidated is not None and self._consolidated_mtime is not None:
            return self._consolidated_mtime
        if self.store.remote:
            return self._loaded_at  # a request per document would cost more than it tells
        mtimes = [self.store.mtime(join_key(path, d)) for d in docs]
        return max((m for m in mtimes if m is not None), default=time.time())

    def _state(self, meta: NodeMeta, docs: dict[str, bytes]) -> ArrayState | None:
        if isinstance(meta, ArrayMeta) and meta.unsupported is None:
            return ArrayState(meta, docs, self.cache, self.writeback)
        return None

    @staticmethod
    def _document_entries(node: DirNode) -> dict[str, Node]:
        return {
            name: FileNode(name, DocumentView(node.documents, name), node.mtime)
            for name in node.documents
        }

    def _array_entries(self, node: DirNode) -> dict[str, Node]:
        entries = self._document_entries(node)
        if node.state is not None:
            entries[RAW_NAME] = FileNode(RAW_NAME, RawView(node.state), node.mtime)
            entries[NPY_NAME] = FileNode(NPY_NAME, NpyView(node.state), node.mtime)
            sibling = functools.partial(self._sibling_array, node)
            for name, view in sidecar_views(node.state, sibling).items():
                entries[name] = FileNode(name, view, node.mtime)
        assert isinstance(node.meta, ArrayMeta)
        info = InfoView(node.meta, node.documents, node.state, self.store)
        entries[INFO_NAME] = FileNode(INFO_NAME, info, node.mtime)
        return entries

    def _sibling_array(self, node: DirNode, name: str) -> ArrayState | None:
        """The array ``name`` beside ``node`` in its group (where xarray keeps
        coordinates), from entries already loaded: the parent was listed to reach it."""
        parent: Node | None = self.root if node.path else None
        for part in [*node.path.split("/")[:-1], name]:
            loaded = parent.entries if isinstance(parent, DirNode) else None
            parent = loaded.get(part) if loaded is not None else None
        return parent.state if isinstance(parent, DirNode) and parent is not node else None

    def _group_entries(self, node: DirNode) -> dict[str, Node]:
        entries = self._document_entries(node)
        for child in self._child_names(node.path):
            if child in entries:
                continue
            loaded = self._load_node(join_key(node.path, child), child)
            if loaded is not None:
                entries[child] = loaded
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
        assert self.root.entries is None, "the root is listed already"
        now = time.time()
        files = control_views(self.cache, self.writeback, self.store)
        entries: dict[str, Node] = {n: FileNode(n, v, now) for n, v in sorted(files.items())}
        meta = GroupMeta(CONTROL_NAME, 0, ())
        self.control = DirNode(CONTROL_NAME, meta, now, {}, entries=entries)

    def _add_control(self, node: DirNode, loaded: dict[str, Node]) -> None:
        if node is not self.root or self.control is None:
            return
        if CONTROL_NAME in loaded:
            # Scripts rely on the control directory being there on every mount.
            log.warning("hiding the store's %s: zarrfs's control directory", CONTROL_NAME)
        loaded[CONTROL_NAME] = self.control

    def entries(self, node: DirNode) -> dict[str, Node]:
        """The directory's children by name, sorted (blocking on first call)."""
        if node.entries is None:
            with self._lock:
                if node.entries is None:
                    if isinstance(node.meta, ArrayMeta):
                        loaded = self._array_entries(node)
                    else:
                        loaded = self._group_entries(node)
                    self._add_control(node, loaded)
                    node.entries = dict(sorted(loaded.items()))
        return node.entries

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
            node = KeyFileNode(name, view, view.mtime or array.mtime)
        elif chunkkeys.is_key_directory(meta, relative):
            known = self._unlisted.get((array.path, relative))
            if isinstance(known, KeyDirNode):
                return known
            node = KeyDirNode(
                name=name,
                meta=GroupMeta(meta.path, 0, ()),
                mtime=array.mtime,
                documents={},
                entries={},  # lists nothing
                array=array,
                prefix=relative,
            )
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
        return node.entries is not None

    def needs_io(self, node: DirNode) -> bool:
        """Whether listing ``node`` reads the store (else it is quick enough to do inline)."""
        if node.entries is not None or isinstance(node.meta, ArrayMeta):
            return False
        return self.consolidated is None
