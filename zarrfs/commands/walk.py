"""A store's whole hierarchy at once, for ``zarrfs check`` and ``zarrfs tree``.

The rules are the mount tree's (namespace/tree.py): where the root holds consolidated metadata
it alone lists the hierarchy (unless ``consolidated=False``), otherwise each store
directory is listed; what a directory's documents make of it is formats/metadata/hierarchy.py's
business. Unlike the tree, which hides a node whose metadata is broken and keeps
serving the rest, a walk keeps such a node with the reason, so that the commands can
report it. Reads only: nothing here writes to the store, and nothing here prints: the
commands print what it found (commands/output.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from zarrfs.errors import InvalidValueError, MetadataError, StoreError
from zarrfs.formats.metadata import hierarchy
from zarrfs.formats.metadata.consolidated import Consolidated
from zarrfs.formats.metadata.hierarchy import node_documents, read_root_keys
from zarrfs.formats.model import ArrayMeta, NodeMeta
from zarrfs.stores.base import Store, join_key
from zarrfs.stores.location import StoreOptions, open_store
from zarrfs.stores.readonly import ReadOnlyStore


@dataclass
class Node:
    """One group or array; ``meta`` is None when its metadata cannot be read."""

    name: str
    path: str  # "" for the root
    meta: NodeMeta | None
    # Metadata that could not be read (the reason the node has no meta, attributes
    # read as empty, a directory that could not be listed), one line each.
    problems: list[str] = field(default_factory=list)
    children: list[Node] = field(default_factory=list)

    @property
    def is_array(self) -> bool:
        return isinstance(self.meta, ArrayMeta)

    def nodes(self) -> Iterator[Node]:
        """This node and every one below it, depth first, children by name."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))


@dataclass
class Hierarchy:
    root: Node
    consolidated: str | None  # the key the hierarchy was listed from, if one
    listed: bool  # False: a store that cannot list and has no consolidated metadata
    problems: list[str]  # of the store as a whole (consolidated metadata ignored, ...)

    def problem_lines(self) -> list[str]:
        """Every metadata problem found, one line each, naming where."""
        found = list(self.problems)
        for node in self.root.nodes():
            found += [f"/{node.path}: {problem}" for problem in node.problems]
        return found


class _Walker:
    def __init__(self, store: Store, consolidated: bool) -> None:
        self.store = store
        self.problems: list[str] = []
        self.listing: Consolidated | None = None
        self.root_reads: dict[str, bytes | None] = {}
        source = self._read_root()
        if consolidated and source is not None:
            opened = hierarchy.open_listing(source.key, source.data)
            self.listing = opened.listing
            self.problems += opened.warnings

    def _read_root(self) -> hierarchy.RootDocument | None:
        """As RootListing.read_root, the problems kept instead of logged."""
        try:
            return read_root_keys(
                self.store,
                self.root_reads,
                lambda key, e: self.problems.append(f"ignoring {key}: {e}"),
            )
        except InvalidValueError as e:
            raise MetadataError(str(e)) from None  # the root's own document

    def _documents(self, path: str) -> dict[str, bytes]:
        return node_documents(self.store, self.listing, self.root_reads, path)

    def child_names(self, path: str) -> tuple[tuple[str, ...], str | None]:
        if self.listing is not None:
            return tuple(sorted(self.listing.children.get(path, ()))), None
        if not self.store.listable:
            return (), None
        try:
            return tuple(sorted(self.store.list_dir(path).prefixes)), None
        except StoreError as e:
            return (), f"cannot list {path or '/'}: {e}"

    def node(self, path: str, name: str) -> Node | None:
        """The node at ``path``, without its children; None: no Zarr node there."""
        try:
            found = hierarchy.node_at(path, self._documents(path))
        except (MetadataError, StoreError) as e:
            if not path:
                raise
            return Node(name, path, None, [str(e)])
        if found is None:
            return None
        return Node(name, path, found.meta, list(found.warnings))


def walk(store: Store, *, consolidated: bool = True) -> Hierarchy:
    """Every group and array of ``store``. MetadataError when its root is no Zarr node
    or its root metadata cannot be read."""
    walker = _Walker(store, consolidated)
    root = walker.node("", "")
    if root is None:
        raise MetadataError(f"{store.describe()}: no Zarr group or array metadata found")
    # With a stack, not recursion: a consolidated document may nest paths deeper than
    # Python's recursion limit.
    stack = [root]
    while stack:
        node = stack.pop()
        if node.meta is None or node.is_array:
            continue
        names, problem = walker.child_names(node.path)
        if problem is not None:
            node.problems.append(problem)
        for name in names:
            child = walker.node(join_key(node.path, name), name)
            if child is not None:
                node.children.append(child)
                stack.append(child)
    listed = walker.listing is not None or store.listable
    key = walker.listing.key if walker.listing is not None else None
    return Hierarchy(root, key, listed, walker.problems)


def open_walk(
    location: str, *, anonymous: bool, consolidated: bool
) -> tuple[ReadOnlyStore, Hierarchy]:
    """The store at ``location`` opened read-only, and walked; ZarrfsError when
    either fails."""
    opened = ReadOnlyStore(open_store(location, StoreOptions(anonymous=anonymous)))
    return opened, walk(opened, consolidated=consolidated)
