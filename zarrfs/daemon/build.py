"""Building the filesystem: the one place that makes the store, the chunk cache, the
write-back, the tree and the FUSE operations of a mount, and hands each its parts.

``prepare_mount`` does everything that can fail on bad input before anything is
mounted (or the process detaches), the store lock of a read-write mount included;
``build_operations`` builds the same filesystem without the lock, for in-process use.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from zarrfs.core.counters import Counters
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.write.writeback import WriteBack
from zarrfs.daemon.runstate import ensure_run_dir
from zarrfs.daemon.storelock import StoreLock
from zarrfs.errors import ZarrfsError
from zarrfs.formats.metadata import hierarchy
from zarrfs.fuse.operations import Operations
from zarrfs.namespace.freshness import DEFAULT_TTL, Freshness
from zarrfs.namespace.tree import Tree
from zarrfs.stores.base import Store
from zarrfs.stores.diskcache import DiskCacheStore
from zarrfs.stores.location import StoreOpenError, StoreOptions, kind, open_store

log = logging.getLogger(__name__)


@dataclass
class MountOptions:
    read_only: bool = False
    # Read-only because read-write was not asked for (zarrfs mount without --rw): the
    # log then says how to get a read-write mount.
    default_read_only: bool = False
    cache_size: int = 512 * 2**20
    write_cache_size: int = 256 * 2**20
    flush_interval: float = 5.0
    consolidated: bool = True  # list the hierarchy from consolidated metadata where present
    readahead: int = 2**20  # the mount's kernel read-ahead; 0 leaves the default
    fuse_options: list[str] = field(default_factory=list)
    debug_fuse: bool = False
    # Where the store is and how it is reached (S3: --anonymous, --endpoint-url,
    # --region, --profile), passed to open_store as they are.
    store: StoreOptions = field(default_factory=StoreOptions)
    # Seconds what the mount knows of the store is served unchecked (close-to-open).
    metadata_ttl: float = DEFAULT_TTL
    disk_cache: str | None = None  # a remote store's values kept in this directory
    disk_cache_size: int = 10 << 30
    # Reads of array data through the page cache even where they could bypass it
    # (fuse/directio.py): repeated reads of arrays larger than the chunk cache are
    # then served by the kernel.
    kernel_cache: bool = False


def _checked_store(location: str, options: MountOptions) -> Store:
    """The store, opened and checked; a read-only kind of store (a .zip archive,
    HTTP) makes the mount read-only, said in one line."""
    store = _cached(open_store(location, options.store), options)
    if store.read_only and not options.read_only:
        log.warning("%s is read-only: mounting it read-only", store.describe())
        options.read_only = True
    if store.read_only:
        options.default_read_only = False  # no option makes it writable
    local = kind(location) == "directory"
    if not options.read_only and local and not os.access(location, os.W_OK):
        raise StoreOpenError(f"store {location!r} is not writable (mount it without --rw)")
    return store


def _cached(store: Store, options: MountOptions) -> Store:
    """``store`` behind the disk cache, where one is asked for and the store is remote."""
    if options.disk_cache is None:
        return store
    if not store.remote:
        log.warning("%s is local: --disk-cache is not used", store.describe())
        return store
    try:
        return DiskCacheStore(
            store,
            options.disk_cache,
            options.disk_cache_size,
            ttl=options.metadata_ttl,
            lists_ahead=hierarchy.array_keys,
        )
    except ZarrfsError as e:
        raise StoreOpenError(str(e)) from None


def build_operations(location: str, options: MountOptions) -> Operations:
    """The filesystem for ``location``, without the store lock (for in-process use)."""
    return _build(_checked_store(location, options), options)


@dataclass
class PreparedMount:
    ops: Operations
    lock: StoreLock | None  # held by read-write mounts until the daemon ends


def prepare_mount(location: str, options: MountOptions) -> PreparedMount:
    """Everything that can fail on bad input, done before mounting (and detaching).

    A read-write mount takes the store's lock here, so that a second one fails with
    the other errors, and the detached daemon inherits it.
    """
    store = _checked_store(location, options)
    ensure_run_dir()
    # The lock is a local directory's (flock): other stores have none (docs/semantics.md).
    local = kind(location) == "directory"
    lock = None if options.read_only or not local else StoreLock.take(location)
    try:
        if not options.read_only:  # a remote store's own lock (S3: a lease object)
            store.acquire_writer_lease(ensure_run_dir())
        return PreparedMount(_build(store, options), lock)
    except BaseException:
        store.release_writer_lease()
        if lock is not None:
            lock.close()
        raise


def _build(store: Store, options: MountOptions) -> Operations:
    counters = Counters()  # the mount's one set, shown by .zarrfs/stats
    cache = ChunkCache(store, options.cache_size, counters=counters)
    writeback = None
    if not options.read_only:
        writeback = WriteBack(store, cache, options.write_cache_size, options.flush_interval)
    freshness = Freshness(options.metadata_ttl)
    tree = Tree(store, cache, writeback, consolidated=options.consolidated, freshness=freshness)
    tree.show_control(counters)  # .zarrfs/ at the mount root
    if isinstance(store, DiskCacheStore):
        disk_cache = store

        async def refresh_disk_cache() -> None:
            disk_cache.refresh()

        tree.add_refresh_listener(refresh_disk_cache)
    return Operations(tree, counters, writeback, read_only=options.read_only)
