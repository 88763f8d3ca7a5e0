"""What a directory lists: its metadata documents, an array's files, the control
directory at a mount's root; sorted by name, each entry knowing its position.

An array directory shows its documents, ``array.raw`` and ``array.npy`` over the
array's live state, the sidecar headers its data type allows, ``array.tif`` where
TIFF can show it, and ``info``; a
group its documents and its child nodes (namespace/tree.py loads those). Which
sibling arrays an ENVI header takes its map info from is settled when the array
is first listed, from metadata alone, and kept with the node: a sibling resized
since gives no map info, it is not replaced by another.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Sequence

from zarrfs.core.arrays import ArrayState
from zarrfs.core.write.writeback import WriteBack
from zarrfs.errors import MetadataError, StoreError
from zarrfs.formats.conventions import Axis, Conventions, Surroundings, conventions_of
from zarrfs.formats.model import ArrayMeta, GroupMeta
from zarrfs.formats.netcdf import has_netcdf_type
from zarrfs.namespace.nodes import NO_DOCUMENTS, DirNode, FileNode, Loaded, Loader, Node
from zarrfs.stores.base import Store
from zarrfs.views.base import DocumentView, View
from zarrfs.views.control import CONTROL_NAME
from zarrfs.views.info import INFO_NAME, InfoView
from zarrfs.views.netcdf import NC_NAME, NetcdfView
from zarrfs.views.npy import NpyView
from zarrfs.views.nrrd import VOLUMES_DIR, nrrd_views, volume_views
from zarrfs.views.raw import RawView
from zarrfs.views.sidecars import Coordinates, find_coordinates, sidecar_views
from zarrfs.views.tiff import TIFF_NAME, tiff_view

log = logging.getLogger(__name__)

RAW_NAME = "array.raw"
NPY_NAME = "array.npy"

_NO_COORDINATES = object()  # listed: its header has none


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


def set_entries(loaded: Loaded, entries: dict[str, Node]) -> None:
    """Set the entries, sorted by name, each knowing its position."""
    ordered = dict(sorted(entries.items()))
    order = tuple(ordered.values())
    for index, entry in enumerate(order):
        entry.index = index
    loaded.order = order
    loaded.entries = ordered


def document_entries(node: DirNode, loaded: Loaded) -> dict[str, Node]:
    return {
        name: FileNode(name, DocumentView(loaded.documents, name), node.mtime, node)
        for name in loaded.documents
    }


def array_entries(
    node: DirNode, loaded: Loaded, store: Store, writeback: WriteBack | None
) -> dict[str, Node]:
    entries = document_entries(node, loaded)
    state = loaded.state
    meta = loaded.meta
    assert isinstance(meta, ArrayMeta)
    conventions = _ConventionsOnce(node, state, meta)
    if state is not None:
        views: dict[str, View] = {
            RAW_NAME: RawView(state, writeback),
            NPY_NAME: NpyView(state, writeback),
        }
        coordinates = functools.partial(_coordinates, node, state)
        sibling = functools.partial(_sibling_array, node)
        views.update(sidecar_views(state, coordinates, writeback, conventions, sibling))
        axes = conventions().axes
        views.update(nrrd_views(state, writeback, axes))
        tiff = tiff_view(
            state,
            writeback,
            conventions,
            functools.partial(_tiff_coordinates, node, state),
            sibling,
        )
        if tiff is not None and TIFF_NAME not in entries:  # never over a store's member
            views[TIFF_NAME] = tiff
        for name, view in views.items():
            entries[name] = FileNode(name, view, node.mtime, node)
        volumes = _volumes_directory(node, state, writeback, axes)
        if volumes is not None:
            entries[VOLUMES_DIR] = volumes
    info = InfoView(meta, loaded.documents, state, store, conventions)
    entries[INFO_NAME] = FileNode(INFO_NAME, info, node.mtime, node)
    return entries


class _ConventionsOnce:
    """What the attributes of the array of ``node`` mean, worked out once, when a
    header or info first asks (cheaper to make than a functools.cache of a lambda,
    at every array listed)."""

    __slots__ = ("_found", "_meta", "_node", "_state")

    def __init__(self, node: DirNode, state: ArrayState | None, meta: ArrayMeta) -> None:
        self._node = node
        self._state = state
        self._meta = meta
        self._found: Conventions | None = None

    def __call__(self) -> Conventions:
        found = self._found
        if found is None:
            meta = self._state.meta if self._state is not None else self._meta
            found = self._found = conventions_of(meta, surroundings(self._node))
        return found


def _coordinates(node: DirNode, state: ArrayState) -> Coordinates | None:
    """The coordinates of the array's header, as settled when it was first listed."""
    if node.coordinates is None:
        found = find_coordinates(state.meta, functools.partial(_sibling_array, node))
        node.coordinates = _NO_COORDINATES if found is None else found
    found = node.coordinates
    return found if isinstance(found, Coordinates) else None


def _tiff_coordinates(
    node: DirNode, state: ArrayState, names: tuple[str, str] | None
) -> Coordinates | None:
    """The coordinates of ``array.tif``'s position: those the conventions name (y,
    x), else the header's."""
    if names is None:
        return _coordinates(node, state)
    return find_coordinates(state.meta, functools.partial(_sibling_array, node), names)


def _sibling_array(node: DirNode, name: str) -> ArrayState | None:
    """The array ``name`` beside ``node`` in its group (where xarray keeps
    coordinates), from the group's children: the parent was listed to reach it."""
    children = node.parent.children if node.parent is not None else None
    sibling = children.get(name) if children is not None else None
    if sibling is None or sibling is node:
        return None
    try:
        return sibling.state
    except (MetadataError, StoreError):  # a sibling that cannot be shown is none
        return None


def _volumes_directory(
    node: DirNode, state: ArrayState, writeback: WriteBack | None, axes: tuple[Axis, ...] | None
) -> DirNode | None:
    """``volumes/`` (views/nrrd.py) in the array directory ``node``, where it has one."""
    files = volume_views(state, writeback, axes)
    if files is None:
        return None
    # Made with the array's listing, never loaded from the store: it is the array's.
    volumes = virtual_directory(node.loader, node, VOLUMES_DIR, files, node.mtime)
    volumes.checked = math.inf  # nothing in the store to check it against
    return volumes


def surroundings(node: DirNode) -> Surroundings:
    """Where the array of ``node`` sits, for the conventions that write facts
    beside it (formats/conventions): its siblings' metadata and its group's
    attributes, both loaded already (the group was listed to reach the array)."""
    parent = node.parent
    group_attrs = parent.meta.attrs if parent is not None else {}

    def sibling(name: str) -> ArrayMeta | None:
        state = _sibling_array(node, name)
        return state.meta if state is not None else None

    return Surroundings(node.name, sibling, group_attrs)


def _netcdf_array(child: DirNode) -> bool:
    """Whether ``child`` is an array of a netCDF type (one that cannot be shown is not)."""
    try:
        meta = child.meta
    except (MetadataError, StoreError):
        return False
    return isinstance(meta, ArrayMeta) and has_netcdf_type(meta)


def _netcdf_arrays(node: DirNode) -> tuple[str, ...]:
    """The children of ``node`` that are variables of its ``group.nc``, settled at
    the first use of the file: once per group, since a group of more arrays than the
    tree keeps loaded would otherwise load them all again at each use."""
    names = node.netcdf_arrays
    if names is None:
        children = node.children or {}
        names = tuple(name for name, child in children.items() if _netcdf_array(child))
        node.netcdf_arrays = names
    return names


def add_group_file(node: DirNode, entries: dict[str, Node]) -> None:
    """``group.nc`` (views/netcdf.py) among a listed group's ``entries``, where a
    child array has a netCDF type; never over a store member of that name. The
    children are parsed up to the first such array only: listing a group of 10 000
    arrays parses one of them."""
    if node.netcdf_arrays is not None:
        if not node.netcdf_arrays:
            return
    elif not any(_netcdf_array(child) for child in (node.children or {}).values()):
        node.netcdf_arrays = ()  # every child was asked
        return
    if NC_NAME in entries:
        log.info("%s: its member %s is shown, not the netCDF view", node.path or "/", NC_NAME)
        return

    def arrays() -> list[tuple[str, ArrayState]]:
        # Asked on each use: a node listed from consolidated metadata may be loaded
        # again (namespace/recent.py), with a new state.
        found = []
        for name in _netcdf_arrays(node):
            child = (node.children or {}).get(name)
            state = child.state if child is not None else None
            if state is not None:
                found.append((name, state))
        return found

    view = NetcdfView(node.path, arrays, lambda: node.meta.attrs)
    entries[NC_NAME] = FileNode(NC_NAME, view, node.mtime, node)


# -- the control directory ------------------------------------------------------------


def virtual_directory(
    loader: Loader, parent: DirNode, name: str, files: dict[str, View], mtime: float
) -> DirNode:
    """A directory of the mount's own in ``parent``, holding ``files``."""
    directory = DirNode(loader, parent, name, mtime)
    directory.loaded = Loaded(GroupMeta(name, 0, ()), NO_DOCUMENTS, None)
    directory.children = {}
    set_entries(
        directory.loaded,
        {n: FileNode(n, view, mtime, directory) for n, view in sorted(files.items())},
    )
    return directory


def control_directory(loader: Loader, root: DirNode, files: dict[str, View]) -> DirNode:
    """``.zarrfs/`` (views/control.py) in ``root``, holding ``files``."""
    return virtual_directory(loader, root, CONTROL_NAME, files, time.time())


def add_control(entries: dict[str, Node], control: DirNode) -> None:
    """The root's entries with the control directory, over a store node of its name."""
    if CONTROL_NAME in entries:
        # Scripts rely on the control directory being there on every mount.
        log.warning("hiding the store's %s: zarrfs's control directory", CONTROL_NAME)
    entries[CONTROL_NAME] = control
