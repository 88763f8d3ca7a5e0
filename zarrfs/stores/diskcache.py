"""A persistent cache on local disk of what a remote store answered: whole values,
byte ranges, versions and missing keys, kept in a directory that several mounts
of the machine may share and that outlives them (``zarrfs mount --disk-cache``).

``DiskCacheStore`` wraps the store. An entry is keyed by the store's identity (its
public URL), the key and the part (value, range, version), and records the version
it holds and when it was last validated against the store. Within ``ttl`` seconds
of that an entry is served without any request; after it, it is revalidated: by a
listing of its array's keys with their versions, where the store gives one
(stores/cacheversions.py: one request for a thousand entries), else with a
conditional request (``fetch(key, unless=version)``): UNCHANGED keeps it and stamps
it valid again, anything else replaces it. ``refresh()`` makes every entry stale for
this wrapper at once. Writes go to the store, and drop the key's entries.

The files, their checks and the eviction rule are cachefiles.py's; the directory,
its lock, its size bound and its disk errors are cachedir.py's. A cache file that
fails its check is removed and the value read from the store again: a cache file
is never trusted more than the store.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from zarrfs.errors import InvalidValueError
from zarrfs.stores.base import (
    UNCHANGED,
    Bytes,
    Fetched,
    Listing,
    NotAtHand,
    Store,
    Version,
    check_ranges,
    resolve_range,
)
from zarrfs.stores.cachedir import CacheDir
from zarrfs.stores.cachefiles import (
    MAX_HEADER,
    OVERHEAD,
    STAT,
    VALUE,
    CorruptEntry,
    Entry,
    decode,
    encode,
    file_name,
    key_digest,
    range_part,
)
from zarrfs.stores.cachereads import RecentReads, Writes
from zarrfs.stores.cacheversions import UNLISTED, ListedVersions

log = logging.getLogger(__name__)

DEFAULT_TTL = 60.0  # seconds an entry is served without asking the store
_NS = 1_000_000_000
_SKEW = _NS  # a validation stamp this far in the future is not believed
# Keys one listing request returns (S3's and GCS's pages; Azure's hold 5000).
LISTING_PAGE = 1000


@dataclass
class CacheStats:
    hits: int = 0  # answered from the cache, no request
    misses: int = 0  # read from the store, nothing cached
    revalidated: int = 0  # conditional requests sent
    unchanged: int = 0  # of them, answered "unchanged"
    listed: int = 0  # entries revalidated by a listing, no request of their own
    bytes_served: int = 0  # from cache files
    bytes_added: int = 0  # written to cache files
    dropped: int = 0  # cache files that failed their check


@dataclass
class _Found:
    entry: Entry
    payload: memoryview
    fresh: bool
    name: str
    inode: int

    @property
    def version(self) -> Version | None:
        e = self.entry
        return None if e.tag is None else Version(e.tag, e.mtime, e.size)


class DiskCacheStore(Store):
    def __init__(
        self,
        inner: Store,
        directory: str,
        max_bytes: int,
        *,
        ttl: float = DEFAULT_TTL,
        identity: str | None = None,
        lists_ahead: Callable[[str, bytes | memoryview], int | None] | None = None,
    ) -> None:
        """``inner`` cached in ``directory`` (made 0700 if missing; StoreError if it
        is not the user's), at most ``max_bytes`` of files; ``identity`` names the
        store in the cache (default: its own ``cache_identity()`` or description);
        ``lists_ahead(key, value)`` says which stale values start the listing of their
        directory's versions at once (the mount: an array's metadata), and at most
        how many keys that directory holds (None for other values)."""
        self.inner = inner
        self.read_only = inner.read_only
        self.remote = inner.remote
        self.local_tier = True
        self.listable = inner.listable
        self.ttl = ttl
        own = getattr(inner, "cache_identity", None)
        self.identity = identity or (own() if own is not None else inner.describe())
        self.files = CacheDir(directory, max_bytes)
        self.stats = CacheStats()
        self._fresh_after = 0  # ns: entries validated before this are stale
        self._writes = Writes()
        self._stats_lock = threading.Lock()
        self._recent = RecentReads()  # where the last values read came from
        self._listed = ListedVersions(inner.versions, ttl)
        # Whether a value found stale heralds reads of its directory's keys (an
        # array's metadata, its chunks): their listing is then asked at once.
        self._lists_ahead = lists_ahead
        self._local_only = threading.local()  # at_hand(): this thread asks no store

    def refresh(self) -> None:
        """Every entry validated before now is revalidated before it is served."""
        self._fresh_after = time.time_ns()

    def reading_under(self, prefix: str) -> None:
        self._listed.expect(prefix)

    @contextmanager
    def at_hand(self) -> Iterator[None]:
        """Reads in this thread are answered from fresh entries alone (a decoder reads
        them where it needs them, as from a local store); anything else raises
        NotAtHand, for a fetch thread to ask the store."""
        self._local_only.on = True
        try:
            yield
        finally:
            self._local_only.on = False

    def _remote(self) -> Store:
        """The store behind, to be asked now (NotAtHand within ``at_hand``)."""
        if getattr(self._local_only, "on", False):
            raise NotAtHand
        return self.inner

    def versions(self, prefix: str, most: int) -> dict[str, str] | None:
        return self.inner.versions(prefix, most)

    def counters(self) -> dict[str, int]:
        """The cache's counters, and its size and bound, for ``.zarrfs/stats`` (no
        I/O: the size as this process last counted or changed it)."""
        with self._stats_lock:
            out = asdict(self.stats)
        out.update(
            listings=self._listed.listings,
            evicted=self.files.evicted,
            not_added_disk_full=self.files.full,
            bytes=self.files.last_usage,
            size=self.files.max_bytes,
        )
        return out

    def describe(self) -> str:
        return self.inner.describe()

    # -- entries -----------------------------------------------------------------------

    def _count(self, **deltas: int) -> None:
        with self._stats_lock:
            for name, delta in deltas.items():
                setattr(self.stats, name, getattr(self.stats, name) + delta)

    def serves_locally(self) -> bool:
        """Most of the recent reads were answered from the cache's files (fresh,
        revalidated unchanged or by a listing): a stream over them is read like a
        local store's, not with a network's read-ahead (docs/benchmarks.md)."""
        return self._recent.mostly_served()

    def _lookup(self, key: str, part: str, limit: int | None = None) -> _Found | None:
        name = file_name(self.identity, key, part)
        most = OVERHEAD + MAX_HEADER + (limit if limit is not None else 1 << 62)
        read = self.files.read(name, most)
        if read is None:
            return None
        try:
            entry, payload = decode(read.data, self.identity, key, part)
        except CorruptEntry as e:
            log.warning("disk cache: dropped the entry of %r (%s): read again", key, e)
            self._count(dropped=1)
            self.files.remove_read(name, read.inode)
            return None
        now = time.time_ns()
        fresh = (
            self._fresh_after <= read.validated <= now + _SKEW
            and now - read.validated < self.ttl * _NS
        )
        return _Found(entry, payload, fresh, name, read.inode)

    def _keep(
        self,
        key: str,
        part: str,
        begun: int,
        validated: int,
        version: Version | None,
        payload: bytes | memoryview = b"",
        *,
        missing: bool = False,
        length: int | None = None,
    ) -> None:
        """Write an entry (unless the key was written since the read began)."""
        if not self._writes.may_cache(key, begun):
            return
        entry = Entry(
            self.identity,
            key,
            part,
            None if version is None else version.tag,
            None if version is None else version.mtime,
            (None if version is None else version.size) if length is None else length,
            missing,
        )
        parts = encode(entry, payload)
        if self.files.add(file_name(self.identity, key, part), parts, validated):
            self._count(bytes_added=sum(len(p) for p in parts))

    def _served(self, found: _Found, revalidated: bool = False) -> None:
        if revalidated:
            self.files.restamp(found.name, found.inode, time.time_ns())
            self._count(revalidated=1, unchanged=1, bytes_served=len(found.payload))
        else:
            self._count(hits=1, bytes_served=len(found.payload))
        self._recent.note(True)

    def _listed_current(self, key: str, founds: list[_Found], *, wait: bool = True) -> bool:
        """Whether a listing of the key's array saw it at the version its entries
        hold (then they are stamped valid as of that listing, and served). Without
        ``wait``, only a listing at hand counts (not one yet to be asked or under way)."""
        version = founds[0].version
        assert version is not None
        local = getattr(self._local_only, "on", False)
        may_list = wait and not local
        at = self._listed.validated_at(key, version.tag, self._fresh_after, may_list=may_list)
        if at == UNLISTED:
            if local:
                raise NotAtHand  # the listing is asked in a fetch thread
            return False
        if at is None:
            return False
        for found in founds:
            self.files.restamp(found.name, found.inode, at)
        self._count(listed=len(founds), bytes_served=sum(len(f.payload) for f in founds))
        self._recent.note(True, len(founds))
        return True

    # -- whole values --------------------------------------------------------------------

    def fetch(
        self, key: str, *, limit: int | None = None, unless: Version | None = None
    ) -> Fetched | None:
        found = self._value(key, limit)
        if isinstance(found, _Found):
            found = None if found.entry.missing else Fetched(found.payload, found.version)
        if found is not None and limit is not None and len(found.value) > limit:
            raise InvalidValueError(
                f"reading {key!r}: {len(found.value)} bytes, more than the limit of {limit}"
            )
        if found is not None and unless is not None and found.version == unless:
            return UNCHANGED  # type: ignore[no-any-return]
        return found

    def _value(self, key: str, limit: int | None) -> _Found | Fetched | None:
        """The key's value entry, fresh or revalidated; else what the store said
        (then cached)."""
        begun = self._writes.begin()
        found = self._lookup(key, VALUE, limit)
        if found is not None and found.fresh:
            self._served(found)
            return found
        validated = time.time_ns()
        if found is not None and found.version is not None and not found.entry.missing:
            # An array's metadata checked again: its chunks' entries will be too, by
            # one listing, asked now. Where one page of it answers (a request, as
            # this document's own check would be), it checks the document too, so
            # that it is at hand when the chunks' reads begin; a longer one is left
            # to run beside the document's own request.
            keys = None if self._lists_ahead is None else self._lists_ahead(key, found.payload)
            if keys is not None:
                self._listed.list_soon(key.rpartition("/")[0], self._fresh_after)
            if self._listed_current(key, [found], wait=keys is None or keys <= LISTING_PAGE):
                return found
            answer = self._remote().fetch(key, limit=limit, unless=found.version)
            if answer is UNCHANGED:
                self._served(found, revalidated=True)
                return found
            self._count(revalidated=1)
        else:
            answer = self._remote().fetch(key, limit=limit)
            self._count(misses=1)
        if answer is None:
            self._keep(key, VALUE, begun, validated, None, missing=True)
            return None
        self._recent.note(False)
        value = answer.value
        self._keep(key, VALUE, begun, validated, answer.version, value, length=len(value))
        return Fetched(value, answer.version)

    def get_buffer(self, key: str, *, limit: int | None = None) -> bytes | memoryview | None:
        found = self.fetch(key, limit=limit)
        return None if found is None else found.value

    def get(self, key: str, *, limit: int | None = None) -> bytes | None:
        value = self.get_buffer(key, limit=limit)
        return None if value is None else bytes(value)

    # -- versions ----------------------------------------------------------------------

    def stat(self, key: str) -> Version | None:
        begun = self._writes.begin()
        for part in (VALUE, STAT):
            found = self._lookup(key, part, 0 if part == STAT else None)
            # (a value entry of a store that named no version says no version)
            if found is not None and found.fresh and (found.entry.missing or found.version):
                self._served(found)
                return None if found.entry.missing else found.version
        validated = time.time_ns()
        version = self._remote().stat(key)
        self._count(misses=1)
        self._keep(key, STAT, begun, validated, version, missing=version is None)
        return version

    def size(self, key: str) -> int | None:
        version = self.stat(key)
        if version is None:
            return None
        return version.size if version.size is not None else self._remote().size(key)

    def mtime(self, key: str) -> float | None:
        version = self.stat(key)
        return None if version is None else version.mtime

    def contains(self, key: str) -> bool:
        return self.stat(key) is not None

    # -- ranges ------------------------------------------------------------------------

    def get_range(self, key: str, start: int, length: int) -> Bytes | None:
        found = self.fetch_ranges(key, [(start, length)])
        return None if found is None else found[0][0]

    def get_ranges(self, key: str, ranges: list[tuple[int, int]]) -> list[Bytes] | None:
        found = self.fetch_ranges(key, ranges)
        return None if found is None else found[0]

    def get_tail(self, key: str, length: int) -> tuple[Bytes, int] | None:
        """One entry, the tail's range (one request when it is not cached, on a store
        whose suffix ranges name the value's size); the size is its version's."""
        check_ranges([(0, length)])
        if length:
            found = self._ranges(key, [(-length, length)])
            if found is None:
                return None
            (data,), version = found
            if version is not None and version.size is not None:
                return data, version.size
        return super().get_tail(key, length)  # (the store names no size)

    def fetch_ranges(
        self, key: str, ranges: list[tuple[int, int]], *, unless: Version | None = None
    ) -> tuple[list[Bytes], Version | None] | None:
        check_ranges(ranges)
        found = self._ranges(key, ranges)
        if found is not None and unless is not None and found[1] == unless:
            return UNCHANGED  # type: ignore[no-any-return]
        return found

    def _ranges(
        self, key: str, ranges: list[tuple[int, int]]
    ) -> tuple[list[Bytes], Version | None] | None:
        """The ranges from their entries (views of the files read: no copy), fresh or
        revalidated together; else from the store (then cached)."""
        begun = self._writes.begin()
        whole = self._lookup(key, VALUE)
        if whole is not None and whole.fresh:
            self._served(whole)
            if whole.entry.missing:
                return None
            value = whole.payload
            spans = [resolve_range(start, length, len(value)) for start, length in ranges]
            return [value[o : o + n] for o, n in spans], whole.version
        parts = [range_part(start, length) for start, length in ranges]
        founds = [self._lookup(key, part, length) for part, (_, length) in zip(parts, ranges)]
        present = [f for f in founds if f is not None]
        tags = {f.entry.tag for f in present}
        # Every range cached, all of one known version: served or revalidated together.
        same = len(present) == len(ranges) and len(tags) == 1 and None not in tags
        validated = time.time_ns()
        if same and all(f.fresh for f in present):
            for f in present:
                self._served(f)
            return [f.payload for f in present], present[0].version
        if same:
            version = present[0].version
            if self._listed_current(key, present):
                return [f.payload for f in present], version
            answer = self._remote().fetch_ranges(key, ranges, unless=version)
            if answer is UNCHANGED:
                for f in present:
                    self._served(f, revalidated=True)
                return [f.payload for f in present], version
            self._count(revalidated=1)
        else:
            answer = self._remote().fetch_ranges(key, ranges)
            self._count(misses=1)
        if answer is None:
            self._keep(key, VALUE, begun, validated, None, missing=True)
            return None
        self._recent.note(False)
        values, version = answer
        for part, value in zip(parts, values, strict=True):
            self._keep(key, part, begun, validated, version, value)
        return values, version

    # -- writes: to the store, dropping the key's entries -----------------------------

    def _forget(self, key: str) -> None:
        self._writes.wrote(key)
        self.files.remove_key(key_digest(self.identity, key) + ".")

    def set(self, key: str, value: bytes, *, durable: bool = True) -> None:
        self._forget(key)
        try:
            self.inner.set(key, value, durable=durable)
        finally:
            self._forget(key)

    def stage(self, key: str, value: bytes | Sequence[bytes]) -> Any:
        return key, self.inner.stage(key, value)

    def commit(self, staged: list[Any]) -> None:
        for key, _ in staged:
            self._forget(key)
        try:
            self.inner.commit([item for _, item in staged])
        finally:
            for key, _ in staged:
                self._forget(key)

    def delete(self, key: str, *, durable: bool = True) -> None:
        self._forget(key)
        try:
            self.inner.delete(key, durable=durable)
        finally:
            self._forget(key)

    # -- the rest: the store's own ------------------------------------------------------

    def sync(self, keys: list[str]) -> None:
        self.inner.sync(keys)

    def list_dir(self, prefix: str) -> Listing:
        return self.inner.list_dir(prefix)

    def scan(self, prefix: str) -> Iterator[tuple[str, int]]:
        return self.inner.scan(prefix)

    def cleanup(self, older_than: float, between: Callable[[], None] | None = None) -> int:
        return self.inner.cleanup(older_than, between)

    def acquire_writer_lease(self, run_dir: str) -> None:
        self.inner.acquire_writer_lease(run_dir)

    def release_writer_lease(self) -> None:
        self.inner.release_writer_lease()

    def statvfs(self) -> tuple[int, int, int] | None:
        return self.inner.statvfs()

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()
