"""A node's metadata documents as the mount shows them: one owner, one writer.

The tree (namespace/tree.py) makes a node's ``Documents`` when it loads the node,
from what the store holds; the node's document files and its ``info`` (views/) read
them, and its array state holds them. The one writer is a resize's flush
(core/write/resizes.py), through ``replace``, once the store has the new document:
readers see the new bytes from then on. ``root`` is the root node's documents,
where consolidated metadata (``.zmetadata``, or a v3 root ``zarr.json``) may name
this node, so that the flush rewrites that entry too.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping


class Documents(Mapping[str, bytes]):
    __slots__ = ("_documents", "root")

    def __init__(self, documents: Mapping[str, bytes], root: Documents | None = None) -> None:
        self._documents = dict(documents)
        self.root = root  # None: these are the root's

    def __getitem__(self, name: str) -> bytes:
        return self._documents[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._documents)

    def __len__(self) -> int:
        return len(self._documents)

    def __repr__(self) -> str:
        return f"Documents({sorted(self._documents)!r})"

    def replace(self, name: str, document: bytes) -> None:
        """``name`` now holds ``document`` in the store. Only a document shown
        already is replaced: the node's files were listed from these names."""
        if name not in self._documents:
            raise KeyError(name)
        self._documents[name] = document
