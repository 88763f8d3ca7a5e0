"""Revalidating a disk cache's entries in bulk: one listing of an array's keys with
their versions, instead of one conditional request per entry.

A mount about to read an array says so (``Store.reading_under``). When an entry of
a key under such a prefix is found stale, the store's keys under the prefix are
listed with their versions (``Store.versions``: on S3, GCS and Azure a request per
thousand keys), and the listing serves for the cache's TTL from when it was asked.
An entry whose version is the one listed is valid as of the listing, with no
request of its own; any other (listed at another version, or not listed) is
revalidated as before, by its own conditional request. Equal versions name the
same bytes, so a listing can spare requests, never serve a changed value.

An array's listing may also be asked ahead (``list_soon``), when its metadata is
found stale: in a thread of its own, so that the first reads of its chunks find it
at hand instead of waiting a round trip for it.

Bounded: at most MAX_PREFIXES prefixes are remembered (the oldest forgotten), a
listing of more than MAX_LISTED keys is not kept (its entries are revalidated one
by one), one thread lists a prefix while the others that need it wait, and at most
MAX_LISTING_AHEAD listings are asked ahead at once (past that, none is: the first
stale chunk asks for it as before).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from zarrfs.errors import ZarrfsError

log = logging.getLogger(__name__)

UNLISTED = -1  # validated_at without listing: a listing would have to be asked
MAX_PREFIXES = 4096
MAX_LISTED = 100_000  # keys of one listing (some 100 bytes each while kept)
MAX_LISTING_AHEAD = 4
_NS = 1_000_000_000

# (prefix, most) -> {key relative to prefix: version tag}, or None (Store.versions)
ListVersions = Callable[[str, int], "dict[str, str] | None"]


@dataclass(frozen=True)
class Listing:
    asked: int  # time.time_ns() when it was asked: what it says holds from then
    tags: dict[str, str] | None  # None: no versions (too many keys, or it failed)


class ListedVersions:
    def __init__(self, list_versions: ListVersions, ttl: float) -> None:
        self._list = list_versions
        self._ttl = int(ttl * _NS)
        self._prefixes: OrderedDict[str, None] = OrderedDict()
        self._listings: dict[str, Listing] = {}
        self._listing_locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._ahead = threading.BoundedSemaphore(MAX_LISTING_AHEAD)
        self.listings = 0  # listings asked of the store

    def expect(self, prefix: str) -> None:
        """Keys under ``prefix`` (an array's, "" for a store that is one array) are
        about to be read."""
        prefix = prefix.strip("/")
        with self._lock:
            if prefix in self._prefixes:
                self._prefixes.move_to_end(prefix)
                return
            self._prefixes[prefix] = None
            if len(self._prefixes) > MAX_PREFIXES:
                old, _ = self._prefixes.popitem(last=False)
                self._listings.pop(old, None)
                self._listing_locks.pop(old, None)

    def list_soon(self, prefix: str, not_before: int) -> None:
        """Keys under ``prefix`` are about to be read: their listing is asked now in
        a thread of its own, unless one is current, under way, or too many are."""
        if self._ttl <= 0:
            return
        self.expect(prefix)
        prefix = prefix.strip("/")
        with self._lock:
            if self._current(prefix, not_before) is not None:
                return
            lock = self._listing_locks.setdefault(prefix, threading.Lock())
            if lock.locked():
                return
        if not self._ahead.acquire(blocking=False):
            return
        try:
            threading.Thread(
                target=self._list_ahead,
                args=(prefix, not_before),
                name="zarrfs-list-ahead",
                daemon=True,
            ).start()
        except RuntimeError:  # no thread to be had: the first stale chunk lists
            self._ahead.release()

    def _list_ahead(self, prefix: str, not_before: int) -> None:
        try:
            self._listing(prefix, not_before)
        except Exception as e:  # a hint: its reads ask again, and say what fails
            log.debug("disk cache: listing %r ahead failed: %s", prefix, e)
        finally:
            self._ahead.release()

    def validated_at(
        self, key: str, tag: str, not_before: int, *, may_list: bool = True
    ) -> int | None:
        """When a listing (asked at or after ``not_before``, within the TTL) saw
        ``key`` at version ``tag``; None when none did (ask the store for the key).
        Without ``may_list``, UNLISTED where the listing is yet to be asked."""
        if self._ttl <= 0:
            return None  # every read is checked: a listing would serve one entry
        prefix = self._prefix_of(key)
        if prefix is None:
            return None
        if may_list:
            listing = self._listing(prefix, not_before)
        else:
            with self._lock:
                listing = self._current(prefix, not_before)
            if listing is None:
                return UNLISTED
        if listing is None or listing.tags is None:
            return None
        name = key[len(prefix) + 1 :] if prefix else key
        return listing.asked if listing.tags.get(name) == tag else None

    def _prefix_of(self, key: str) -> str | None:
        """The longest expected prefix holding ``key``."""
        with self._lock:
            if not self._prefixes:
                return None
            parent = key
            while "/" in parent:
                parent = parent.rpartition("/")[0]
                if parent in self._prefixes:
                    return parent
            return "" if "" in self._prefixes else None

    def _current(self, prefix: str, not_before: int) -> Listing | None:
        listing = self._listings.get(prefix)
        if listing is None or listing.asked < not_before:
            return None
        return listing if time.time_ns() - listing.asked < self._ttl else None

    def _listing(self, prefix: str, not_before: int) -> Listing | None:
        with self._lock:
            listing = self._current(prefix, not_before)
            if listing is not None:
                return listing
            lock = self._listing_locks.setdefault(prefix, threading.Lock())
        with lock:  # one thread lists; the others wait for its listing
            with self._lock:
                listing = self._current(prefix, not_before)
            if listing is not None:
                return listing
            asked = time.time_ns()
            try:
                tags = self._list(prefix, MAX_LISTED)
            except ZarrfsError as e:
                log.debug("disk cache: listing %r failed (%s): each entry asked alone", prefix, e)
                tags = None
            listing = Listing(asked, tags)
            with self._lock:
                self.listings += 1
                if prefix in self._prefixes:
                    self._listings[prefix] = listing
            return listing
