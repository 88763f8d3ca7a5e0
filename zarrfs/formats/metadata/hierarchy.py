"""The hierarchy as the tree sees it: the one entry point of formats/ for listing (pure).

namespace/tree.py knows no format. What it asks, it asks here:

* ``ROOT_KEYS``: the keys to read once at the store root, in this order, until one
  exists: where consolidated metadata may live. The newest layout present decides,
  as it does for the root node itself (zarr-python 3 also prefers ``zarr.json``):
  v3 keeps it inside the root ``zarr.json``, v2 in ``.zmetadata``. Each may be as
  large as ``ROOT_LIMIT``.
* ``open_listing(key, data)``: the consolidated listing that root document holds
  (every node's documents and the names below each node), or none: then the store
  itself is listed (with a warning when the document was unusable).
* ``shown_at_root(key)``: whether that document is shown in a root group beside
  the group's own documents (``.zmetadata``), or is one of them (``zarr.json``).
* ``NODE_KEYS`` and ``node_at(path, documents)``: which keys of a store directory
  may make it a node (each up to ``NODE_LIMIT``), and the node they make
  (``node_in`` for the documents of a consolidated listing; ``listed_documents``
  for which of them it holds, read from its index alone).
* ``read_root_keys`` and ``node_documents``: those reads, from a store (the tree's,
  and the walk of ``zarrfs check``/``tree``).

Nothing here logs: what had to be ignored (an unusable consolidated document,
attributes that are no JSON object) comes back as ``warnings``, one line each, which
the tree logs and the walk reports.

A new format is added by its own module and an entry in detect.py's ``LAYOUTS``
(and here, if it has consolidated metadata); namespace/tree.py does not change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from zarrfs.errors import InvalidValueError, MetadataError
from zarrfs.formats.limits import MAX_CONSOLIDATED_BYTES, MAX_DOCUMENT_BYTES
from zarrfs.formats.metadata import consolidated, detect, v2, v3
from zarrfs.formats.metadata.consolidated import Consolidated
from zarrfs.formats.metadata.detect import Detected
from zarrfs.stores.base import Store, Version, join_key

# Root key → its consolidated listing (None: it holds none), newest layout first.
_LISTINGS: dict[str, Callable[[bytes], Consolidated | None]] = {
    v3.ZARR_JSON: consolidated.parse_v3_consolidated,
    v2.CONSOLIDATED_KEY: consolidated.open_v2,
}

ROOT_KEYS: tuple[str, ...] = tuple(_LISTINGS)
ROOT_LIMIT = MAX_CONSOLIDATED_BYTES
NODE_KEYS: tuple[str, ...] = detect.CANDIDATE_KEYS
NODE_LIMIT = MAX_DOCUMENT_BYTES


# What ``array_keys`` says of an array whose document names no regular grid.
MANY_KEYS = 2**63


def array_keys(key: str, value: bytes | memoryview) -> int | None:
    """At most how many keys the directory of ``key`` holds, if ``key`` holding
    ``value`` is an array's own metadata document (v2 ``.zarray``, or a v3
    ``zarr.json`` of node_type "array"): its chunks (or shards) on their regular
    grid, and its documents; MANY_KEYS where the document names no such grid (a
    ``.zarray`` that is no JSON object is still taken for an array's). None for any
    other document, an oversized one, or a ``zarr.json`` that is no JSON object."""
    name = key.rpartition("/")[2]
    if name not in (v2.ARRAY_KEY, v3.ZARR_JSON) or len(value) > NODE_LIMIT:
        return None
    try:
        document = v2.load_json_object(bytes(value), key)
    except MetadataError:
        return MANY_KEYS if name == v2.ARRAY_KEY else None
    if name == v2.ARRAY_KEY:
        chunks = document.get("chunks")
    elif document.get("node_type") != "array":
        return None
    else:
        grid = document.get("chunk_grid")
        regular = isinstance(grid, dict) and grid.get("name") == "regular"
        configuration = grid.get("configuration") if regular else None
        chunks = configuration.get("chunk_shape") if isinstance(configuration, dict) else None
    return _grid_keys(document.get("shape"), chunks)


def _grid_keys(shape: object, chunks: object) -> int:
    """The chunks of ``shape`` cut into ``chunks``, and a few documents beside them;
    MANY_KEYS where either is not a list of as many integers (chunks positive,
    shape not negative)."""
    if not (
        isinstance(shape, list)
        and isinstance(chunks, list)
        and len(shape) == len(chunks)
        and all(type(n) is int and n >= 0 for n in shape)
        and all(type(n) is int and n > 0 for n in chunks)
    ):
        return MANY_KEYS
    count = 1
    for n, c in zip(shape, chunks, strict=True):
        count *= -(-n // c)
        if count >= MANY_KEYS:
            return MANY_KEYS
    return count + 3


@dataclass(frozen=True)
class OpenedListing:
    listing: Consolidated | None  # None: the store itself is listed
    warnings: tuple[str, ...] = ()  # why the root document's listing was ignored


def open_listing(key: str, data: bytes) -> OpenedListing:
    """The hierarchy as the root document ``key`` lists it; none when it lists
    nothing, or (with a warning) when it is unusable: the store is listed instead."""
    try:
        return OpenedListing(_LISTINGS[key](data))
    except MetadataError as e:
        return OpenedListing(
            None, (f"ignoring the consolidated metadata: {e}; listing the store instead",)
        )


@dataclass(frozen=True)
class RootDocument:
    """The first root key present: its bytes and the version they were read at."""

    key: str
    data: bytes
    version: Version | None


def read_root_keys(
    store: Store,
    reads: dict[str, bytes | None],
    ignoring: Callable[[str, InvalidValueError], None],
) -> RootDocument | None:
    """Read the root keys into ``reads`` (None: absent) up to the first present one,
    or None. A consolidated document the store may not read is handed to
    ``ignoring`` (the store is listed instead); the root node's own document raises
    InvalidValueError (the root is unusable). One request per key read: the
    version comes with the value."""
    for key in ROOT_KEYS:
        try:
            fetched = store.fetch(key, limit=ROOT_LIMIT)
        except InvalidValueError as e:
            if not shown_at_root(key):
                raise
            ignoring(key, e)
            return None
        data = None if fetched is None else bytes(fetched.value)
        reads[key] = data
        if fetched is not None and data is not None:
            return RootDocument(key, data, fetched.version)
    return None


def node_documents(
    store: Store,
    listing: Consolidated | None,
    root_reads: dict[str, bytes | None],
    path: str,
    names: tuple[str, ...] = NODE_KEYS,
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
            data = store.get(join_key(path, name), limit=NODE_LIMIT)
        if data is not None:
            docs[name] = data
    return docs


# The documents that make a node (attributes alone make none).
_NODE_MAKERS = frozenset(layout[0] for layout in detect.LAYOUTS)


def listed_documents(listing: Consolidated, path: str) -> tuple[str, ...]:
    """The documents of node ``path`` the consolidated ``listing`` holds, none of
    them made or parsed; none at all where none of them makes a node."""
    names = listing.names_of(path)
    return names if not _NODE_MAKERS.isdisjoint(names) else ()


def shown_at_root(key: str) -> bool:
    """Whether the root document ``key`` is shown beside a root group's own documents."""
    return key not in NODE_KEYS


def node_at(path: str, documents: dict[str, bytes]) -> Detected | None:
    """The node the documents found in store directory ``path`` make (``None``: no
    node); MetadataError when its metadata is invalid."""
    return detect.detect(path, documents)


def node_in(
    listing: Consolidated | None, path: str, documents: dict[str, bytes]
) -> Detected | None:
    """``node_at`` for the documents ``node_documents`` read: the root document that
    holds a consolidated listing is parsed without it, and shown as stored."""
    if listing is None:
        return node_at(path, documents)
    found = node_at(path, listing.parsable(path, documents))
    if found is None:
        return None
    return replace(found, documents={n: documents[n] for n in found.documents})
