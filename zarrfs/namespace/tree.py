"""The tree: Zarr groups and arrays as directories, views as files.

Directories are classified by the metadata key they hold and listed lazily, on
first use, so ``ls`` of one group reads only its children's metadata and never a
chunk; where the root holds consolidated metadata, it alone lists the hierarchy, and
a group's children are made from their names there, each parsed at its first use.
Which keys to read and what they mean is formats/metadata/hierarchy.py's business: this
module knows no format. Loading does store I/O and runs in worker threads; one lock
serialises it.

Memory. A directory keeps what names it (``DirNode``); what it is (``Loaded``) is
loaded on first use (namespace/nodes.py). Listed from consolidated metadata, a
node's ``Loaded`` is made again from the document whenever asked, so only the most
recently used ones are kept (namespace/recent.py); listed from the store, it is
kept until a check finds its documents changed in the store (loading it again
would read the store again). Kept for good as well: the root, and an array written
through the mount (its documents may have changed since the document listed it).

Freshness (close-to-open, namespace/freshness.py). What a node is and lists was
checked against the store at some moment; past the TTL, ``revalidate`` checks it
again before it is used, and says what changed (``Changes``) for the kernel. What a
node's first loading had to say (documents of another layout beside it, an
unsupported data type) is logged then only; a consolidated entry, valid JSON,
makes formats/ log nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Mapping

from zarrfs.core.arrays import ArrayState
from zarrfs.core.counters import Counters
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.write.documents import Documents
from zarrfs.core.write.writeback import WriteBack
from zarrfs.errors import MetadataError, NotFoundError, StoreError
from zarrfs.formats.metadata import hierarchy
from zarrfs.formats.metadata.consolidated import Consolidated
from zarrfs.formats.model import ArrayMeta, GroupMeta, NodeMeta
from zarrfs.namespace.freshness import Freshness
from zarrfs.namespace.keys import ChunkKeys
from zarrfs.namespace.listing import (
    DirListing,
    add_control,
    add_group_file,
    array_entries,
    control_directory,
    document_entries,
    set_entries,
)
from zarrfs.namespace.nodes import Changes, DirNode, KeyDirNode, Loaded, Node
from zarrfs.namespace.recent import RecentNodes
from zarrfs.namespace.rootlisting import RootListing
from zarrfs.stores.base import Store, join_key
from zarrfs.views.control import control_views

log = logging.getLogger(__name__)

# Siblings parsed with a node a consolidated listing named, at its first use.
PARSE_AHEAD = 256


def _report(path: str, found: hierarchy.Detected) -> None:
    """Log what a node's first loading has to say of its documents."""
    for warning in found.warnings:
        log.warning("%s", warning)
    if found.ignored:
        log.warning(
            "%s also holds %s; showing it as %s",
            path or "/",
            ", ".join(found.ignored),
            next(iter(found.documents)),
        )
    meta = found.meta
    if isinstance(meta, ArrayMeta) and meta.unsupported:
        log.info("array %s: %s; showing its metadata only", meta.display_name, meta.unsupported)


def _said(error: MetadataError | StoreError) -> MetadataError | StoreError:
    """``error``, logged already: the FUSE boundary answers it without a line more."""
    error.logged = True  # type: ignore[attr-defined]
    return error


class Tree:
    control: DirNode | None = None  # .zarrfs/ at the root, on mounts (show_control)

    def __init__(
        self,
        store: Store,
        cache: ChunkCache,
        writeback: WriteBack | None = None,
        *,
        consolidated: bool = True,
        freshness: Freshness | None = None,
    ) -> None:
        self.store = store
        self.freshness = freshness or Freshness()
        self.cache = cache
        self.writeback = writeback
        self._lock = threading.RLock()  # loading an array may load its siblings
        self.source = RootListing(store, self.freshness, consolidated)
        # Arrays written through a read-write mount: the mount is their writer, so
        # they are never checked against the store (their shape is the mount's).
        self._written: set[DirNode] = set()
        self._refresh_listeners: list[Callable[[], Awaitable[None]]] = []
        self._loaded_at = time.time()
        self._recent = RecentNodes(self._lock)
        self._keys = ChunkKeys(self, store, writeback)
        if self.consolidated is None and not store.listable:
            log.warning(
                "%s cannot be listed and holds no consolidated metadata: only the node "
                "at its root is shown (zarr.consolidate_metadata() on the store lists "
                "all of it in one document)",
                store.describe(),
            )
        self.root = self._load_root()

    @property
    def consolidated(self) -> Consolidated | None:
        """The consolidated metadata the hierarchy is listed from, if any."""
        return self.source.consolidated

    # -- loading (blocking: worker threads) -------------------------------------------

    def _load_root(self) -> DirNode:
        node = self._new_node(None, "", "")
        if node is None:
            raise MetadataError(f"{self.store.describe()}: no Zarr group or array metadata found")
        return node

    def _read_docs(self, path: str, names: tuple[str, ...]) -> dict[str, bytes]:
        return self.source.read_docs(path, names)

    def _new_node(self, parent: DirNode | None, name: str, path: str) -> DirNode | None:
        """Classify the store directory ``path``, ``name`` in ``parent`` (None: the
        root); ``None`` if it is no Zarr node.

        Malformed metadata raises ``MetadataError`` only for the root; elsewhere the
        node is hidden with one log line and the rest of the tree stays usable. A
        node a consolidated listing names is made from its name alone (``_named``).
        """
        if path and self.consolidated is not None:
            return self._named(parent, name, path)
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
        _report(path, found)
        if isinstance(meta, GroupMeta) and not path:
            docs.update(self.source.extra)
        node = DirNode(self, parent, name, self._mtime(path, docs))
        node.checked = self.freshness.now()
        node.parsed = True
        node.loaded = self._make_loaded(path, meta, docs)  # for good
        return node

    def _named(self, parent: DirNode | None, name: str, path: str) -> DirNode | None:
        """The node ``path`` the consolidated listing names, made from the names of
        its documents alone: listing a group parses none of its children. What it is,
        is parsed at its first use (``_reload``); an entry that makes no node fails
        there (EIO), with one log line, instead of being hidden from the listing."""
        assert self.consolidated is not None
        names = hierarchy.listed_documents(self.consolidated, path)
        if not names:
            return None
        node = DirNode(self, parent, name, self._mtime(path, dict.fromkeys(names, b"")))
        node.checked = self.freshness.now()
        return node

    def _make_loaded(self, path: str, meta: NodeMeta, docs: dict[str, bytes]) -> Loaded:
        # The root's documents hold the consolidated metadata that may name the node.
        documents = Documents(docs, self.root.documents if path else None)
        if isinstance(meta, ArrayMeta) and meta.unsupported is None:
            return Loaded(meta, documents, None, self._make_state)
        return Loaded(meta, documents, None)

    def _make_state(self, loaded: Loaded) -> ArrayState:
        """The state of the array ``loaded`` is, made once (any thread may ask)."""
        with self._lock:
            state = loaded.made_state
            if state is None:
                meta = loaded.meta
                assert isinstance(meta, ArrayMeta)
                state = ArrayState(meta, loaded.documents, self.cache, self.writeback)
                loaded.set_state(state)
            return state

    def _reload(self, node: DirNode) -> Loaded:
        """What a node listed from consolidated metadata is, parsed from the
        document: at its first use, logging what it has to say then, or again once
        let go. One that cannot be made fails at every use, logged once."""
        path = node.path
        if isinstance(node.parsed, str):
            raise _said(MetadataError(node.parsed))
        try:
            docs = self._read_docs(path, hierarchy.NODE_KEYS)
            found = hierarchy.node_in(self.consolidated, path, docs)
            if found is None:  # its documents name no layout's metadata
                raise MetadataError(f"{path}: no Zarr metadata in its entry")
        except (MetadataError, StoreError) as e:
            if node.parsed is False:
                node.parsed = str(e)
                log.warning("cannot show %s: %s", path, e)
                raise _said(e) from None
            raise
        if node.parsed is False:
            _report(path, found)
            node.parsed = True
        return self._make_loaded(path, found.meta, dict(found.documents))

    def loaded_node(self, node: DirNode) -> Loaded:
        """What ``node`` is: kept, recently used, or loaded again (its state where
        something still holds it)."""
        loaded = node.loaded
        if loaded is not None:
            loaded.used = True
            return loaded
        with self._lock:
            loaded = node.loaded
            if loaded is None:
                # (a state is held only of a node parsed before)
                loaded = self._recent.held(node) if node.parsed is True else None
                if loaded is None:
                    first = node.parsed is False
                    loaded = self._reload(node)
                    if first:
                        self._parse_ahead(node)
                self._recent.remember(node, loaded)
            return loaded

    def _parse_ahead(self, node: DirNode) -> None:
        """Parse the siblings after ``node`` that were never parsed, up to
        ``PARSE_AHEAD``: a group's children are mostly used in order (ls -R, find, a
        program walking the group), and parsed together they cost less each than
        one at a time; a use out of order pays for a few hundred at most."""
        parent = node.parent
        loaded = parent.loaded if parent is not None else None
        order = loaded.order if loaded is not None else ()
        for sibling in order[node.index + 1 : node.index + 1 + PARSE_AHEAD]:
            if type(sibling) is DirNode and sibling.loaded is None and sibling.parsed is False:
                with contextlib.suppress(MetadataError, StoreError):  # (said once)
                    self._recent.remember(sibling, self._reload(sibling))

    def pin(self, node: DirNode) -> None:
        """Keep what ``node`` is for good: an array about to be written (a resize
        changes its documents, which the consolidated document would not show)."""
        with self._lock:
            self._recent.keep(node, self.loaded_node(node))
            self._written.add(node)

    def _mtime(self, path: str, docs: dict[str, bytes]) -> float:
        mtime = self.source.mtime
        if self.consolidated is not None and mtime is not None:
            return mtime
        if self.store.remote:
            return self._loaded_at  # a request per document would cost more than it tells
        mtimes = [self.store.mtime(join_key(path, d)) for d in docs]
        return max((m for m in mtimes if m is not None), default=time.time())

    # -- checking against the store (close-to-open) ----------------------------------------

    def fresh(self, node: DirNode) -> bool:
        """Whether what the mount knows of ``node`` may be served without a check
        (cheap: the FUSE thread asks it at every lookup, stat and open)."""
        checked = node.checked
        return checked >= self.source.changed and not self.freshness.stale(checked)

    def revalidate(self, node: DirNode) -> Changes:
        """Check ``node`` against the store if it is not fresh (blocking: a worker
        thread): its documents (an array's shape), a group's children, and, where
        consolidated metadata lists the hierarchy, that document first (at most once
        per TTL for the whole tree, conditionally where the store can). An array's
        cached chunks are dropped: the store may hold others now."""
        changes = Changes()
        with self._lock:
            if self.fresh(node):
                return changes
            now = self.freshness.now()
            if node is self.control or isinstance(node, KeyDirNode) or node in self._written:
                node.checked = now
                return changes
            if self._root_checkable():
                self.source.check(now)
            self._revalidate_node(node, now, changes)
        return changes

    def _root_checkable(self) -> bool:
        # A read-write mount owns the consolidated document (its resizes rewrite it,
        # from the root documents every array's documents refer to): it lists the
        # hierarchy as it found it, with its own changes.
        return self.consolidated is not None and self.writeback is None

    def _revalidate_node(self, node: DirNode, now: float, changes: Changes) -> None:
        path = node.path
        loaded = node.loaded
        try:
            if not path and self.consolidated is None:
                self.source.read_root_again()
            docs = self._read_docs(path, hierarchy.NODE_KEYS)
            found = hierarchy.node_in(self.consolidated, path, docs)
        except (MetadataError, StoreError) as e:
            if not isinstance(node.parsed, str):  # (one that fails said why already)
                log.warning("cannot check %s: %s; showing it as it was", path or "/", e)
            node.checked = now
            return
        node.checked = now
        if found is None:
            if node.parent is not None:
                node.parent.checked = float("-inf")  # its listing drops the node
            return
        if isinstance(node.parsed, str):
            node.parsed = False  # parsed again at its next use, from the new entry
            return
        if node.parsed is False:
            _report(path, found)
            node.parsed = True
        documents = dict(found.documents)
        if isinstance(found.meta, GroupMeta) and not path:
            documents.update(self.source.extra)
        is_array = isinstance(found.meta, ArrayMeta) or (loaded is not None and loaded.has_state)
        if loaded is None or dict(loaded.documents.items()) != documents:
            self._replace(node, loaded, found.meta, documents, changes)
        elif is_array:
            changes.reloaded.append(node)
        if is_array:
            self.cache.invalidate(path)
        if isinstance(found.meta, GroupMeta):
            self._relist(node, changes)

    def _replace(
        self,
        node: DirNode,
        loaded: Loaded | None,
        meta: NodeMeta,
        documents: dict[str, bytes],
        changes: Changes,
    ) -> None:
        """``node``'s documents changed in the store: it is loaded from the new ones."""
        path = node.path
        if loaded is not None:
            log.info("%s changed in the store: showing its new metadata", path or "/")
        old_names = tuple(loaded.entries) if loaded is not None and loaded.entries else None
        if old_names is None and node.first_inode:
            # Numbered while loaded, then let go (namespace/recent.py): what it listed
            # is not known, so it is numbered anew whatever it lists now.
            old_names = ()
        new = self._make_loaded(path, meta, documents)
        node.mtime = self._mtime(path, documents) if not self.store.remote else time.time()
        node.coordinates = None
        node.netcdf_arrays = None
        if node.parent is not None:
            node.parent.netcdf_arrays = None  # (its dtype may have changed)
        if self.consolidated is None or not path:
            node.loaded = new
        else:
            self._recent.replace(node, new)
        changes.reloaded.append(node)
        if old_names is not None:
            listed = self._listed(node).entries
            assert listed is not None
            if tuple(listed) != old_names:
                changes.relisted.append((node, old_names))

    def _relist(self, node: DirNode, changes: Changes) -> None:
        """A group's children as the store lists them now; those still there are kept."""
        old = node.children
        if old is None:
            return  # never listed: the first listing reads the store anyway
        loaded = self.loaded_node(node)
        shown = set(loaded.documents)
        children: dict[str, DirNode] = {}
        for name in self._child_names(node.path):
            if name in shown:
                continue
            child = old.get(name) or self._new_node(node, name, join_key(node.path, name))
            if child is not None:
                children[name] = child
        if children.keys() == old.keys():
            return
        log.info("%s: its children changed in the store", node.path or "/")
        old_names = tuple(loaded.entries) if loaded.entries is not None else ()
        node.children = children
        node.netcdf_arrays = None
        loaded.entries = None
        loaded.names = None
        self._listed(node)
        changes.relisted.append((node, old_names))

    def add_refresh_listener(self, listener: Callable[[], Awaitable[None]]) -> None:
        """``listener`` is awaited after each ``refresh`` (the FUSE layer drops the
        kernel's caches)."""
        self._refresh_listeners.append(listener)

    async def refresh(self) -> None:
        """Everything is checked against the store again at its next use
        (``.zarrfs/refresh``)."""
        self.freshness.refresh()
        log.info("refresh: everything is checked against the store at its next use")
        for listener in self._refresh_listeners:
            await listener()

    # -- entries ------------------------------------------------------------------------

    def _children(self, node: DirNode, shown: Mapping[str, Node]) -> dict[str, DirNode]:
        """A group's child nodes (but those ``shown`` already), made once."""
        if node.children is None:
            children = {}
            path = node.path
            for child in self._child_names(path):
                if child in shown:
                    continue
                made = self._new_node(node, child, join_key(path, child))
                if made is not None:
                    children[child] = made
            node.children = children
        return node.children

    def _child_names(self, path: str) -> tuple[str, ...]:
        if self.consolidated is not None:
            return self.consolidated.children.get(path, ())
        try:
            return self.store.list_dir(path).prefixes
        except StoreError as e:
            log.warning("cannot list %s: %s", path or "/", e)
            return ()

    def show_control(self, counters: Counters) -> None:
        """Show the control directory (views/control.py) at the root, as a mount does
        (``zarrfs tree`` and tests of the tree do not); before the root is listed.
        ``counters`` are the mount's, which ``.zarrfs/stats`` shows."""
        assert self.root.children is None, "the root is listed already"
        files = control_views(self.cache, counters, self.writeback, self.store, self.refresh)
        self.control = control_directory(self, self.root, files)

    def _listed(self, node: DirNode) -> Loaded:
        loaded = self.loaded_node(node)
        if loaded.entries is None:
            with self._lock:
                if loaded.entries is None:
                    if isinstance(loaded.meta, ArrayMeta):
                        entries = array_entries(node, loaded, self.store, self.writeback)
                    else:
                        entries = document_entries(node, loaded)
                        entries.update(self._children(node, entries))
                        add_group_file(node, entries)
                    if node is self.root and self.control is not None:
                        add_control(entries, self.control)
                    set_entries(loaded, entries)
        return loaded

    def entries(self, node: DirNode) -> Mapping[str, Node]:
        """The directory's children by name, sorted (blocking on first call)."""
        loaded = node.loaded
        if loaded is not None and loaded.entries is not None:
            loaded.used = True
            return loaded.entries
        entries = self._listed(node).entries
        assert entries is not None
        return entries

    def child(self, node: DirNode, index: int) -> Node:
        """The entry at ``index`` of the directory (IndexError: none)."""
        loaded = node.loaded
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
        """A name ``parent`` does not list: a chunk key of its array or a directory
        component of one (namespace/keys.py); None for anything else."""
        return await self._keys.find(parent, name)

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

    def listed(self, node: DirNode) -> bool:
        """Whether the directory has been listed."""
        loaded = node.loaded
        return node.children is not None or (loaded is not None and loaded.entries is not None)

    def needs_io(self, node: DirNode) -> bool:
        """Whether listing ``node`` reads the store (else it is quick enough to do inline)."""
        if self.consolidated is not None:
            return False
        return not self.listed(node) and not isinstance(node.meta, ArrayMeta)
