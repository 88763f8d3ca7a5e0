"""Consolidated metadata, pure: one document describing the whole hierarchy.

Two spellings, both written by ``zarr.consolidate_metadata``:

* v2's ``.zmetadata`` maps every metadata key of the hierarchy (``a/b/.zarray``,
  ...) to its parsed JSON;
* v3 keeps it inside the root group's ``zarr.json``, as ``consolidated_metadata``
  (``kind`` "inline", ``metadata`` mapping each node's path, ``a/b``, to its
  ``zarr.json``). Not part of the v3 specification; zarr-python 3 and zarrita.js
  write it.

zarrfs lists the tree from it alone and shows each node's documents serialised
again in the style of the writer that produced the file: zarr-python 2 indents
consolidated and plain documents by 4 with sorted keys, zarr-python 3 writes
``.zmetadata`` on one line and plain documents indented by 2 in their own order
(its v3 ``zarr.json`` entries take the root document's indent). The consolidated
entry is what zarr-python itself reads when it opens the group consolidated, so it
is what the mount shows and rewrites.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from zarrfs.errors import MetadataError
from zarrfs.formats.limits import MAX_DOCUMENT_BYTES, MAX_JSON_DEPTH
from zarrfs.formats.metadata import jsontext
from zarrfs.formats.metadata.v2 import (
    ARRAY_KEY,
    ATTRS_KEY,
    CONSOLIDATED_KEY,
    GROUP_KEY,
    load_json_object,
)
from zarrfs.formats.metadata.v3 import ZARR_JSON
from zarrfs.stores.base import join_key

NODE_DOCUMENTS = (ARRAY_KEY, GROUP_KEY, ATTRS_KEY)
# Group entries carry zarr-python 3's own consolidated view of their subtree; the
# documents it writes to the store do not (an empty one, or null), so it is dropped.
NESTED_MEMBER = "consolidated_metadata"
# Documents made from entries of like text are made once: the arrays of a group
# often share their metadata text (v2's .zarray). Bounded in count and in size.
_MADE_ENTRIES = 1024
_MADE_BYTES = 4096


class Children(Mapping[str, tuple[str, ...]]):
    """Node path → sorted names of its direct children, held as a tree of names.

    A path of ``n`` components costs ``n`` entries, not its ``n`` prefixes as
    strings: one key of a million ``a/a/a/...`` components would otherwise be
    terabytes of prefixes. Nodes without children (most: arrays) share one empty
    mapping.
    """

    def __init__(self) -> None:
        self._root: dict[str, dict] = {}

    def add(self, path: str) -> None:
        """Record every step of ``path`` ("" is the root) as a child of the one before."""
        node = self._root
        parts = path.split("/") if path else ()
        for i, part in enumerate(parts):
            child = node.get(part)
            if child is None or child is _LEAF:
                child = node[part] = _LEAF if i == len(parts) - 1 else {}
            node = child

    def _node(self, path: str) -> dict[str, dict] | None:
        node: dict[str, dict] | None = self._root
        for part in path.split("/") if path else ():
            node = node.get(part) if node is not None else None
        return node

    def __getitem__(self, path: str) -> tuple[str, ...]:
        node = self._node(path)
        if not node:
            raise KeyError(path)
        return tuple(sorted(node))

    def __iter__(self) -> Iterator[str]:
        stack: list[tuple[str, dict[str, dict]]] = [("", self._root)]
        while stack:
            path, node = stack.pop()
            if node:
                yield path
                stack.extend((f"{path}/{n}" if path else n, child) for n, child in node.items())

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"Children({dict(self)!r})"


_LEAF: dict[str, dict] = {}  # never written to: add() replaces it where a path goes on


class Consolidated:
    """The hierarchy as one consolidated document describes it.

    The document is held as it is, with where each node document's entry lies in it
    (one int per entry); an entry is parsed and serialised when it is read, and
    not kept (the tree keeps what it needs of the nodes in use).
    """

    def __init__(
        self,
        source: bytes,
        spans: dict[str, int],
        children: Children,
        indent: int | None,
        sort_keys: bool,
        key: str = CONSOLIDATED_KEY,
        stored: dict[str, bytes] | None = None,
        names: Iterable[str] = NODE_DOCUMENTS,
        parsed_as: dict[str, bytes] | None = None,
    ) -> None:
        self._source = source  # the document's UTF-8 text, which spans index
        self._spans = spans  # store key of a node document → its entry (jsontext.span)
        self._stored = stored or {}  # store key → a document shown as stored
        self._names = tuple(names)  # of the documents a node's entries may be (a few)
        # store key → what to parse in place of a stored document: the root zarr.json
        # without the listing it holds (parsed whole, it would be parsed twice over).
        self._parsed_as = parsed_as or {}
        self.children = children  # node path → names of its direct children
        self.indent = indent
        self.sort_keys = sort_keys
        self.key = key  # the root key holding it (its mtime is every node's)
        # (document name, entry text) → the document made of it, most recent last.
        self._made: OrderedDict[tuple[str, bytes], bytes] = OrderedDict()
        self._made_lock = threading.Lock()  # documents are read from worker threads too

    def __repr__(self) -> str:
        return f"Consolidated({self.key!r}, {len(self._spans) + len(self._stored)} documents)"

    @property
    def documents(self) -> Mapping[str, bytes]:
        """Store key → document bytes as shown (made on each read)."""
        return _Documents(self)

    def read(self, path: str, names: Iterable[str]) -> dict[str, bytes]:
        """The documents ``names`` of node ``path`` that the file holds.

        MetadataError when one of them would be larger than a node's document may be
        (MAX_DOCUMENT_BYTES): indenting may multiply a deeply nested entry.
        """
        prefix = f"{path}/" if path else ""
        found = {}
        for name in names:
            if name not in self._names:
                continue
            key = prefix + name
            if key in self._spans or key in self._stored:
                document = self.document(key)
                if document is not None:
                    found[name] = document
        return found

    def parsable(self, path: str, documents: dict[str, bytes]) -> dict[str, bytes]:
        """``documents`` of node ``path`` (from ``read``) as they are to be parsed."""
        if path or not self._parsed_as:
            return documents
        return {n: self._parsed_as.get(n, d) for n, d in documents.items()}

    def keys(self) -> Iterator[str]:
        """The store keys of every document the file holds."""
        yield from self._stored
        yield from self._spans

    def names_of(self, path: str) -> tuple[str, ...]:
        """The names of the documents of node ``path`` the file holds (none is made)."""
        prefix = f"{path}/" if path else ""
        spans, stored = self._spans, self._stored
        return tuple(n for n in self._names if prefix + n in spans or prefix + n in stored)

    def key_count(self) -> int:
        return len(self._stored) + len(self._spans)

    def document(self, key: str) -> bytes | None:
        """The document at store key ``key`` as shown; None when the file has none."""
        stored = self._stored.get(key)
        if stored is not None:
            return stored
        packed = self._spans.get(key)
        if packed is None:
            return None
        text = self._source[jsontext.start(packed) : jsontext.end(packed)]
        name = key.rpartition("/")[2]
        made_key = (name, text)
        with self._made_lock:
            made = self._made.get(made_key)
            if made is not None:
                self._made.move_to_end(made_key)
                return made
        made = self._make(key, name, text)
        if len(text) <= _MADE_BYTES and len(made) <= _MADE_BYTES:
            with self._made_lock:
                self._made[made_key] = made
                if len(self._made) > _MADE_ENTRIES:
                    self._made.popitem(last=False)
        return made

    def _make(self, key: str, name: str, text: bytes) -> bytes:
        """The document of the entry ``text`` at store key ``key`` (named ``name``)."""
        value = jsontext.loads_object(text)
        if name == GROUP_KEY or (name == ZARR_JSON and value.get("node_type") == "group"):
            value.pop(NESTED_MEMBER, None)
        # Entries as zarr-python writes them are far below the bound once indented:
        # only the others are measured while they are made.
        depth = min(text.count(b"[") + text.count(b"{"), MAX_JSON_DEPTH)
        worst = len(text) * (8 + (self.indent or 0) * depth)
        limit = MAX_DOCUMENT_BYTES if worst > MAX_DOCUMENT_BYTES else None
        try:
            return dump_document(value, self.indent, self.sort_keys, limit)
        except jsontext.TooLong:
            raise MetadataError(
                f"{key} from {self.key} is larger than {MAX_DOCUMENT_BYTES} bytes once "
                "indented as its writer indents documents"
            ) from None

    def dumps(self, value: Any) -> bytes:
        return dump_document(value, self.indent, self.sort_keys)


class _Documents(Mapping[str, bytes]):
    """A Consolidated's documents by store key, each made when read."""

    def __init__(self, listing: Consolidated) -> None:
        self._listing = listing

    def __getitem__(self, key: str) -> bytes:
        document = self._listing.document(key)
        if document is None:
            raise KeyError(key)
        return document

    def __iter__(self) -> Iterator[str]:
        return self._listing.keys()

    def __len__(self) -> int:
        return self._listing.key_count()


def dump_document(
    value: Any, indent: int | None, sort_keys: bool, limit: int | None = None
) -> bytes:
    return jsontext.dumps(value, indent, sort_keys, limit).encode()


def _style(data: bytes) -> tuple[int | None, int, bool]:
    """(indent of .zmetadata, indent of node documents, sorted keys) of its writer."""
    if data.lstrip().startswith(b"{\n"):
        return 4, 4, True  # zarr-python 2
    return None, 2, False  # zarr-python 3


def replace_entry(original: bytes, key: str, document: bytes) -> bytes | None:
    """``original`` .zmetadata with ``key``'s entry set to ``document``, in its style.

    ``None`` when the file has no entry for ``key``; MetadataError when it is invalid.
    """
    doc = load_json_object(original, ".zmetadata")
    entries = doc.get("metadata")
    if not isinstance(entries, dict):
        raise MetadataError(".zmetadata: 'metadata' is not a JSON object")
    if key not in entries:
        return None
    entries[key] = load_json_object(document, key)
    indent, _, sort_keys = _style(original)
    return dump_document(doc, indent, sort_keys)


def _read(data: bytes, what: str, path: tuple[str, ...]) -> tuple[dict[str, Any], bytes]:
    """The members of the JSON object ``data``, the object at member path ``path``
    as spans, and the text they index (jsontext.read_object)."""
    read = jsontext.read_object(data, what, path)
    if read is None:
        load_json_object(data, what)  # raises: says why it is no object
        raise MetadataError(f"{what} is not a JSON object")
    return read


def parse_consolidated(data: bytes) -> Consolidated:
    """Raises MetadataError when ``data`` is no consolidated-metadata document."""
    doc, source = _read(data, ".zmetadata", ("metadata",))
    if doc.get("zarr_consolidated_format") != 1:
        fmt = doc.get("zarr_consolidated_format")
        raise MetadataError(f".zmetadata: zarr_consolidated_format is {fmt!r}, expected 1")
    entries = doc.get("metadata")
    if not isinstance(entries, jsontext.Spans):
        raise MetadataError(".zmetadata: 'metadata' is not a JSON object")
    _, indent, sort_keys = _style(data)
    spans: dict[str, int] = {}
    children = Children()
    for key, packed in entries.items():
        path, _, name = key.rpartition("/")
        if name not in NODE_DOCUMENTS or any(p in ("", ".", "..") for p in key.split("/")[:-1]):
            continue  # not a node document (or an unsafe path): not shown
        if not jsontext.span(packed)[2]:
            raise MetadataError(f".zmetadata: entry {key!r} is not a JSON object")
        spans[key] = packed
        children.add(path)
    return Consolidated(source, spans, children, indent, sort_keys)


def open_v2(data: bytes) -> Consolidated:
    """The listing of a root ``.zmetadata``; MetadataError when it is unusable (not
    consolidated metadata, or without the root group it describes)."""
    listing = parse_consolidated(data)
    if GROUP_KEY not in listing.read("", (GROUP_KEY,)):
        raise MetadataError(f"{CONSOLIDATED_KEY} has no root group")
    return listing


def parse_v3_consolidated(data: bytes) -> Consolidated | None:
    """The listing inside a root ``zarr.json``: None when it has none (no
    ``consolidated_metadata`` member, or null), MetadataError when it is unusable.

    The root's own document is part of it, as stored; each entry is shown as its
    node's ``zarr.json``, serialised in the root document's indent and key order.
    """
    where = f"{ZARR_JSON} consolidated_metadata"
    doc, source = _read(data, ZARR_JSON, (NESTED_MEMBER, "metadata"))
    member = doc.get(NESTED_MEMBER)
    if member is None:
        return None
    if doc.get("zarr_format") != 3 or doc.get("node_type") != "group":
        raise MetadataError(f"{where}: the root is no Zarr v3 group")
    if not isinstance(member, dict):
        raise MetadataError(f"{where} is not a JSON object")
    if member.get("kind") != "inline":
        raise MetadataError(f"{where}: kind is {member.get('kind')!r}, expected 'inline'")
    entries = member.get("metadata")
    if not isinstance(entries, jsontext.Spans):
        raise MetadataError(f"{where}: 'metadata' is not a JSON object")
    spans: dict[str, int] = {}
    children = Children()
    for path, packed in entries.items():
        if not _safe(path):
            continue  # the root itself, or an unsafe path: not shown
        if not jsontext.span(packed)[2]:
            raise MetadataError(f"{where}: entry {path!r} is not a JSON object")
        spans[join_key(path, ZARR_JSON)] = packed
        children.add(path)
    return Consolidated(
        source,
        spans,
        children,
        indent=_indent(data),
        sort_keys=False,
        key=ZARR_JSON,
        stored={ZARR_JSON: data},
        names=(ZARR_JSON,),
        parsed_as={ZARR_JSON: _without(doc, NESTED_MEMBER)},
    )


def _without(doc: dict[str, Any], member: str) -> bytes:
    """The JSON object ``doc`` without ``member``, on one line."""
    return json.dumps({k: v for k, v in doc.items() if k != member}, allow_nan=True).encode()


def _safe(path: str) -> bool:
    """A relative node path of plain names ("a/b"): not the root, nothing that walks
    elsewhere."""
    return all(p not in ("", ".", "..") for p in path.split("/"))


def _indent(document: bytes) -> int | None:
    """The indent of a JSON document: its second line's, None when it is one line."""
    lines = document.lstrip().split(b"\n", 2)
    if len(lines) < 2:
        return None
    second = lines[1]
    return (len(second) - len(second.lstrip(b" "))) or None
