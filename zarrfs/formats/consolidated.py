"""Consolidated metadata (``.zmetadata``, zarr-python's ``consolidate_metadata``), pure.

The document maps every metadata key of the hierarchy (``a/b/.zarray``, ...) to its
parsed JSON. zarrfs lists the tree from it alone and shows each node's documents
serialised again in the style of the writer that produced the file: zarr-python 2
indents consolidated and plain documents by 4 with sorted keys, zarr-python 3 writes
``.zmetadata`` on one line and plain documents indented by 2 in their own order.
The consolidated entry is what zarr-python itself reads when it opens the group
consolidated, so it is what the mount shows and rewrites.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from zarrfs.errors import MetadataError
from zarrfs.formats.v2 import ARRAY_KEY, ATTRS_KEY, GROUP_KEY, load_json_object

NODE_DOCUMENTS = (ARRAY_KEY, GROUP_KEY, ATTRS_KEY)


@dataclass(frozen=True)
class Consolidated:
    """The hierarchy as ``.zmetadata`` describes it."""

    documents: dict[str, bytes]  # store key → document bytes as shown
    children: dict[str, tuple[str, ...]]  # node path → names of its direct children
    indent: int
    sort_keys: bool

    def read(self, path: str, names: Iterable[str]) -> dict[str, bytes]:
        """The documents ``names`` of node ``path`` that the file holds."""
        prefix = f"{path}/" if path else ""
        return {n: self.documents[prefix + n] for n in names if prefix + n in self.documents}

    def dumps(self, value: Any) -> bytes:
        return dump_document(value, self.indent, self.sort_keys)


def dump_document(value: Any, indent: int | None, sort_keys: bool) -> bytes:
    return json.dumps(
        value, indent=indent, sort_keys=sort_keys, ensure_ascii=True, allow_nan=True
    ).encode()


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


def parse_consolidated(data: bytes) -> Consolidated:
    """Raises MetadataError when ``data`` is no consolidated-metadata document."""
    doc = load_json_object(data, ".zmetadata")
    if doc.get("zarr_consolidated_format") != 1:
        fmt = doc.get("zarr_consolidated_format")
        raise MetadataError(f".zmetadata: zarr_consolidated_format is {fmt!r}, expected 1")
    entries = doc.get("metadata")
    if not isinstance(entries, dict):
        raise MetadataError(".zmetadata: 'metadata' is not a JSON object")
    _, indent, sort_keys = _style(data)
    documents: dict[str, bytes] = {}
    children: dict[str, set[str]] = {}
    for key, value in entries.items():
        path, _, name = key.rpartition("/")
        if name not in NODE_DOCUMENTS or any(p in ("", ".", "..") for p in key.split("/")[:-1]):
            continue  # not a node document (or an unsafe path): not shown
        if not isinstance(value, dict):
            raise MetadataError(f".zmetadata: entry {key!r} is not a JSON object")
        if name == GROUP_KEY:
            # zarr-python 3 nests its own consolidated view into group entries;
            # the .zgroup it writes to the store does not have it.
            value = {k: v for k, v in value.items() if k != "consolidated_metadata"}
        documents[key] = dump_document(value, indent, sort_keys)
        parts = path.split("/") if path else []
        for depth, part in enumerate(parts):
            children.setdefault("/".join(parts[:depth]), set()).add(part)
    return Consolidated(
        documents=documents,
        children={p: tuple(sorted(names)) for p, names in children.items()},
        indent=indent,
        sort_keys=sort_keys,
    )
