"""Bounds on what a store's metadata may make zarrfs allocate or compute (pure).

A store is untrusted input: these limits turn an absurd document into one
metadata error (the node hidden, or shown without flat files) instead of an
allocation or a computation sized by the document. docs/semantics.md ("Limits and
hostile input") lists them for users.
"""

from __future__ import annotations

from typing import Any

from zarrfs.errors import MetadataError

# A node's own metadata document (.zarray, .zattrs, meta, ...): read into memory whole.
MAX_DOCUMENT_BYTES = 16 << 20
# Consolidated metadata describes a whole hierarchy in one document.
MAX_CONSOLIDATED_BYTES = 128 << 20
# Nesting of JSON values: deeper documents are refused before anything recurses
# over them (json.dumps for xattrs, the consolidated rewrite) near Python's limit.
MAX_JSON_DEPTH = 256
# One decoded chunk is allocated whole; larger chunks are shown as metadata only.
MAX_CHUNK_NBYTES = 2 << 30
# numpy's own limit is 64; layout math recurses once per dimension.
MAX_DIMENSIONS = 32
# One element (its fill value is held and repeated): larger ones likewise.
MAX_ITEMSIZE = 16 << 20
# Text made from metadata for info and xattrs (a fill value of a 300 MB element).
MAX_VALUE_TEXT = 256


def check_depth(value: Any, what: str) -> None:
    """MetadataError when ``value`` nests lists/objects deeper than MAX_JSON_DEPTH.

    Iterative: the check itself must not recurse.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > MAX_JSON_DEPTH:
            raise MetadataError(f"{what} nests deeper than {MAX_JSON_DEPTH} levels")
        stack.extend((child, depth + 1) for child in children)


def clip(text: str, limit: int = MAX_VALUE_TEXT) -> str:
    """``text`` cut to ``limit`` characters, saying how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"
