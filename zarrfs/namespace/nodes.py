"""The nodes of the tree: directories, and the files in them.

A ``FileNode`` is a name and the view that makes its content (views/). A
``DirNode`` is a group or an array directory: it keeps what names it (a few
slots, the names of a group's children) and, while loaded, what it is
(``Loaded``: its parsed metadata, its documents as shown, an array's state, its
entries once listed), which it asks its loader (the tree) for. Which directories
keep that, and for how long, is namespace/recent.py's business. Chunk keys
(``KeyDirNode``, ``KeyFileNode``) are found by lookup and never listed
(namespace/keys.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from zarrfs.core.arrays import ArrayState
from zarrfs.core.write.documents import Documents
from zarrfs.formats.model import ArrayMeta, GroupMeta, NodeMeta
from zarrfs.stores.base import join_key
from zarrfs.views.base import View

# Directories of no node (.zarrfs/, chunk-key directories) show no documents; with
# none, nothing can replace one, so they share one.
NO_DOCUMENTS = Documents({})


@dataclass(eq=False, slots=True)
class FileNode:
    name: str
    view: View
    mtime: float
    parent: DirNode | None = field(default=None, repr=False)
    index: int = 0  # its position among the parent's entries (sorted by name)
    # What the FUSE layer made of it (its attributes): kept as long as the node.
    attributes: Any = field(default=None, repr=False)


class Loaded:
    """What a directory is, loaded from its documents. An array's state is made at
    its first use (``make_state``), not when its group is listed: listing a group
    of 10 000 arrays makes none."""

    __slots__ = (
        "_make_state",
        "_state",
        "documents",
        "entries",
        "meta",
        "names",
        "order",
        "used",
        "weight",
    )

    def __init__(
        self,
        meta: NodeMeta,
        documents: Documents,
        state: ArrayState | None,
        make_state: Callable[[Loaded], ArrayState] | None = None,
    ):
        self.meta = meta
        self.documents = documents  # shared with the array state; a resize's flush rewrites them
        self._state = state  # arrays with flat views
        self._make_state = make_state if state is None else None
        self.entries: dict[str, Node] | None = None  # by name, sorted; made when listed
        self.order: tuple[Node, ...] = ()  # the entries by position
        self.names: tuple[bytes, ...] | None = None  # theirs as the kernel is told them
        self.weight = sum(map(len, documents.values()))
        self.used = False  # since the tree last looked whether to drop it

    @property
    def state(self) -> ArrayState | None:
        """The array's state (arrays with flat views; None for the others), made
        at the first ask."""
        state = self._state
        if state is None:
            make = self._make_state
            # None: no array, or made meanwhile (set_state sets _state first)
            state = make(self) if make is not None else self._state
        return state

    @property
    def made_state(self) -> ArrayState | None:
        """The array's state if it has been made (asking makes none)."""
        return self._state

    @property
    def has_state(self) -> bool:
        """Whether the node is an array with flat views (asking makes no state)."""
        return self._state is not None or self._make_state is not None

    def set_state(self, state: ArrayState) -> None:
        self._state = state
        self._make_state = None


class Loader(Protocol):
    def loaded_node(self, node: DirNode) -> Loaded:
        """What ``node`` is: kept, recently used, or loaded again."""
        ...


class DirNode:
    """A group or array directory: what names it; the rest is loaded by its tree."""

    __slots__ = (
        "_loader",
        "checked",
        "children",
        "coordinates",
        "first_inode",
        "index",
        "kernel_listing",
        "loaded",
        "mtime",
        "name",
        "netcdf_arrays",
        "parent",
        "parsed",
    )

    def __init__(self, loader: Loader, parent: DirNode | None, name: str, mtime: float) -> None:
        self.name = name
        self.parent = parent
        self.index = 0  # its position among the parent's entries (sorted by name)
        self.mtime = mtime
        # When what it is and lists was last checked against the store (a
        # Freshness clock reading: namespace/freshness.py); never, until its tree says.
        self.checked = float("-inf")
        self.first_inode = 0  # the inode of its first entry (fuse/inodes.py); 0: none yet
        # Its first entry's inode when the kernel was last given its listing to keep
        # (fuse/operations.py); -1: never.
        self.kernel_listing = -1
        self._loader = loader
        # What it is, while loaded: for good, or while recent (namespace/recent.py).
        self.loaded: Loaded | None = None
        self.children: dict[str, DirNode] | None = None  # a group's, once listed
        # An array's header coordinates, settled when first listed (namespace/listing.py).
        self.coordinates: object = None
        # A group's children that are variables of its group.nc, settled when first
        # listed: listing it again (once let go) parses none of them again.
        self.netcdf_arrays: tuple[str, ...] | None = None
        # Whether what it is was ever parsed: a node a consolidated listing names is
        # made from its name alone and parsed at its first use; a str says why that
        # failed (every use fails alike, said once).
        self.parsed: bool | str = False

    def __repr__(self) -> str:
        return f"DirNode({self.path or '/'!r})"

    @property
    def path(self) -> str:
        if self.parent is None:
            return ""
        return join_key(self.parent.path, self.name)

    @property
    def loader(self) -> Loader:
        """What loads this node (the tree): directories made beside it share it."""
        return self._loader

    @property
    def meta(self) -> NodeMeta:
        return self._loader.loaded_node(self).meta

    @property
    def documents(self) -> Documents:
        return self._loader.loaded_node(self).documents

    @property
    def state(self) -> ArrayState | None:
        return self._loader.loaded_node(self).state

    @property
    def is_array(self) -> bool:
        return isinstance(self.meta, ArrayMeta)


class KeyDirNode(DirNode):
    """A directory component of an array's chunk keys ("c", "c/0"): found by
    lookup, never listed (views/chunkkeys.py). It lists nothing, and what it is
    is kept with it: it is no node of the hierarchy to load again."""

    __slots__ = ("__weakref__", "array", "prefix")

    def __init__(
        self, loader: Loader, parent: DirNode, name: str, array: DirNode, prefix: str
    ) -> None:
        super().__init__(loader, parent, name, array.mtime)
        self.array = array
        self.prefix = prefix  # its key below the array's
        self.loaded = Loaded(GroupMeta(array.path, 0, ()), NO_DOCUMENTS, None)
        self.loaded.entries = {}
        self.children = {}


class KeyFileNode(FileNode):
    """A chunk key of an array, its stored value: found by lookup, never listed."""

    __slots__ = ("__weakref__",)


Node = DirNode | FileNode


@dataclass
class Changes:
    """What a check of a node against the store changed (namespace/tree.py's
    ``revalidate``), for the FUSE layer to tell the kernel."""

    # Directories whose files' bytes or sizes may have changed (an array whose chunks
    # were dropped, a node whose documents changed): their pages and attributes.
    reloaded: list[DirNode] = field(default_factory=list)
    # Directories whose entries changed, with the names they listed before: their
    # entries are numbered anew, the old names forgotten by the kernel.
    relisted: list[tuple[DirNode, tuple[str, ...]]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.reloaded or self.relisted)


def unlisted(node: Node) -> bool:
    """Found by lookup alone: once the kernel forgets it, the mount may too."""
    return isinstance(node, (KeyDirNode, KeyFileNode))
