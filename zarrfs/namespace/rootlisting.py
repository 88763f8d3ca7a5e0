"""What lists a tree's hierarchy: the store's root keys, read once, and the
consolidated document among them when there is one, checked again within its TTL.

The root keys (formats/metadata/hierarchy.py's ``ROOT_KEYS``) are read once, up to
the first present one; where it holds consolidated metadata (and the tree may use
it) the hierarchy is listed from that document alone. A check reads it again at
most once per TTL, conditionally where the store can: a new version is the listing
from then on, and every node checked before is checked again (``changed``).
"""

from __future__ import annotations

import logging
import time

from zarrfs.errors import MetadataError, StoreError
from zarrfs.formats.metadata import hierarchy
from zarrfs.formats.metadata.consolidated import Consolidated
from zarrfs.formats.metadata.hierarchy import node_documents, read_root_keys
from zarrfs.namespace.freshness import Freshness
from zarrfs.stores.base import UNCHANGED, Store

log = logging.getLogger("zarrfs.namespace.tree")  # its lines are the tree's


class RootListing:
    def __init__(self, store: Store, freshness: Freshness, consolidated: bool) -> None:
        self.store = store
        self.freshness = freshness
        # Set when the hierarchy is listed from consolidated metadata alone.
        self.consolidated: Consolidated | None = None
        self.mtime: float | None = None  # the consolidated document's: every node's
        # The root keys read once (None: absent), and the document among them shown
        # beside a root group's own (.zmetadata).
        self.reads: dict[str, bytes | None] = {}
        self.extra: dict[str, bytes] = {}
        # The root document that holds the listing, as last read (its bytes, version),
        # when it was last checked, and when a check last found it changed: every node
        # checked before then is checked again against the new listing.
        self.document = self.read_root()
        self._checked = freshness.now()
        self.changed = float("-inf")
        if consolidated and self.document is not None:
            self._open(self.document)

    def read_root(self) -> hierarchy.RootDocument | None:
        """Read the root keys up to the first present one, or None."""
        source = read_root_keys(
            self.store, self.reads, lambda key, e: log.warning("ignoring %s: %s", key, e)
        )
        if source is not None and hierarchy.shown_at_root(source.key):
            self.extra[source.key] = source.data
        return source

    def read_root_again(self) -> None:
        """The root's own documents are read again (a store listed, not consolidated)."""
        self.reads.clear()
        self.document = self.read_root()

    def _open(self, source: hierarchy.RootDocument) -> None:
        opened = hierarchy.open_listing(source.key, source.data)
        for warning in opened.warnings:
            log.warning("%s", warning)
        self.consolidated = opened.listing
        self.document = source
        if self.consolidated is not None:
            # The time came with the document (a GET's Last-Modified): no request more.
            version = source.version
            self.mtime = version.mtime if version is not None else None
            if self.mtime is None:
                self.mtime = self.store.mtime(self.consolidated.key)

    def read_docs(self, path: str, names: tuple[str, ...]) -> dict[str, bytes]:
        return node_documents(self.store, self.consolidated, self.reads, path, names)

    def check(self, now: float) -> None:
        """Read the document that lists the hierarchy again, if not checked within the
        TTL; a new one is the listing from now on, and every node is checked again."""
        current = self.document
        if current is None or not self.freshness.stale(self._checked):
            return
        self._checked = now
        try:
            fetched = self.store.fetch(
                current.key, limit=hierarchy.ROOT_LIMIT, unless=current.version
            )
        except (StoreError, MetadataError) as e:
            log.warning("cannot check %s: %s; showing it as it was", current.key, e)
            return
        if fetched is UNCHANGED:
            return
        if fetched is None:
            log.warning("%s is gone from the store; showing it as it was", current.key)
            return
        data = bytes(fetched.value)
        if data == current.data:
            return
        source = hierarchy.RootDocument(current.key, data, fetched.version)
        opened = hierarchy.open_listing(source.key, source.data)
        if opened.listing is None:
            log.warning("%s no longer lists the hierarchy; showing it as it was", source.key)
            return
        log.info("%s changed in the store: listing the hierarchy from its new version", source.key)
        self.consolidated = opened.listing
        self.document = source
        self.reads[source.key] = data
        if hierarchy.shown_at_root(source.key):
            self.extra[source.key] = data
        version = source.version
        self.mtime = version.mtime if version and version.mtime else time.time()
        self.changed = now
