"""Which layout a store directory holds, decided from the metadata documents found in it.

Pure: the caller reads the keys in ``CANDIDATE_KEYS`` (missing ones left out) and
gets back the parsed node and the documents to show. Where documents of several
layouts coexist, the newest layout wins (``zarr.json`` over ``.zarray``/``.zgroup``/
``.zattrs`` and the v1 and pre-v1 documents, as zarr-python 3 prefers it) and every
other document found is named in the result, so the caller can log them in one line.
What the winning layout's parser had to ignore (attributes that are no JSON object)
is in the result too, one line each: the caller reports it (the mount logs it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from zarrfs.formats.metadata import legacy, v2, v3
from zarrfs.formats.model import NodeMeta


class Parser(Protocol):
    """(node path, metadata document, attributes document) → the node; what it had
    to ignore is added to ``warnings``."""

    def __call__(
        self, path: str, meta: bytes, attrs: bytes | None, /, *, warnings: list[str] | None = None
    ) -> NodeMeta: ...


# Newest first: (metadata key, attributes key, parser).
LAYOUTS: tuple[tuple[str, str, Parser], ...] = (
    (v3.ZARR_JSON, "", v3.parse_node),  # attributes live inside zarr.json
    (v2.ARRAY_KEY, v2.ATTRS_KEY, v2.parse_array),
    (v2.GROUP_KEY, v2.ATTRS_KEY, v2.parse_group),
    (legacy.V1_META_KEY, legacy.V1_ATTRS_KEY, legacy.parse_v1_array),
    (legacy.V0_META_KEY, legacy.V0_ATTRS_KEY, legacy.parse_v0_array),
)

CANDIDATE_KEYS = (
    v3.ZARR_JSON,
    v2.ARRAY_KEY,
    v2.GROUP_KEY,
    v2.ATTRS_KEY,
    legacy.V1_META_KEY,
    legacy.V1_ATTRS_KEY,
    legacy.V0_META_KEY,
    legacy.V0_ATTRS_KEY,
)


@dataclass(frozen=True)
class Detected:
    meta: NodeMeta
    documents: dict[str, bytes]
    ignored: tuple[str, ...]
    warnings: tuple[str, ...] = ()  # what was ignored inside the documents, one line each


def detect(path: str, docs: dict[str, bytes]) -> Detected | None:
    """Parse the node at ``path``; ``None`` if it holds no Zarr metadata.

    Raises MetadataError when the winning layout's metadata is invalid.
    """
    present = [layout for layout in LAYOUTS if layout[0] in docs]
    if not present:
        return None
    meta_key, attrs_key, parse = present[0]
    warnings: list[str] = []
    meta = parse(path, docs[meta_key], docs.get(attrs_key), warnings=warnings)
    shown = {name: docs[name] for name in (meta_key, attrs_key) if name in docs}
    ignored = tuple(key for key in CANDIDATE_KEYS if key in docs and key not in shown)
    return Detected(meta, shown, ignored, tuple(warnings))
