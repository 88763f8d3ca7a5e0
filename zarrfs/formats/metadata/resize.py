"""What a resize rewrites (pure): the array's own metadata document with the new
shape, and the entry of the root's consolidated metadata that names it (v2's
``.zmetadata``, or the ``consolidated_metadata`` inside a v3 root ``zarr.json``),
each in its format's own spelling and style."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from zarrfs.errors import MetadataError
from zarrfs.formats.metadata.consolidated import replace_entry
from zarrfs.formats.metadata.v2 import CONSOLIDATED_KEY, rewrite_shape
from zarrfs.formats.metadata.v3 import ZARR_JSON, replace_consolidated_entry
from zarrfs.formats.model import ArrayMeta
from zarrfs.stores.base import join_key

log = logging.getLogger(__name__)


def resized_documents(
    meta: ArrayMeta, documents: Mapping[str, bytes], root_documents: Mapping[str, bytes] | None
) -> tuple[str, bytes, tuple[str, bytes] | None]:
    """(the array's document name, its new content, and (root key, new content)
    of the consolidated metadata, or None when the store has none naming it)."""
    name = meta.documents[0]
    document = rewrite_shape(documents[name], meta.shape)
    return name, document, _consolidated(meta, name, document, root_documents)


def _consolidated(
    meta: ArrayMeta, name: str, document: bytes, docs: Mapping[str, bytes] | None
) -> tuple[str, bytes] | None:
    if docs is None:
        return None
    try:
        # The newest layout first, as the tree lists the store (formats/metadata/hierarchy.py).
        if ZARR_JSON in docs and meta.path:
            new = replace_consolidated_entry(docs[ZARR_JSON], meta.path, document)
            return None if new is None else (ZARR_JSON, new)
        if CONSOLIDATED_KEY in docs:
            new = replace_entry(docs[CONSOLIDATED_KEY], join_key(meta.path, name), document)
            return None if new is None else (CONSOLIDATED_KEY, new)
    except MetadataError as e:
        log.warning("not updating the consolidated metadata: %s", e)
    return None
