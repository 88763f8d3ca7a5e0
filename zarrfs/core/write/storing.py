"""Write-back's way to the store: the worker pools, commits and directory syncs.

On a local store, units are encoded and staged (core/write/staging.py) by the
encode workers; commits, directory syncs, deletions, metadata rewrites and the
listing that finds stale units mostly wait for the disk, so they run in a thread of
their own (the I/O pool), where such a wait does not hold an encoder's core idle.
Batches commit one at a time: one fdatasync of every staged file, then the renames.

On a remote store each unit is put on its own (``put``): staged (encoded; a shard's
kept inner chunks read) and PUT in one job of the put pool, whose threads, as many
as the fetch pool's, bound the requests in flight. A PUT is atomic and durable by
itself, so nothing is gained by waiting for the rest of the batch, and each unit
knows its own outcome. The keys replaced but not yet durable are kept until
``sync``.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import trio

from zarrfs.core.counters import Staged
from zarrfs.core.pool import PUT_THREADS, WorkerPool
from zarrfs.core.write.staging import delete_chunk, stage_unit, store_metadata, stored_units
from zarrfs.core.write.together import each_at_once
from zarrfs.formats.grid.layout import Index
from zarrfs.formats.grid.shards import ShardIndex
from zarrfs.formats.model import ArrayMeta
from zarrfs.stores.base import Store


class Storing:
    def __init__(self, store: Store, threads: int) -> None:
        self.store = store
        self.pool = WorkerPool(threads, "zarrfs-encode")
        self.io_pool = WorkerPool(1, "zarrfs-commit")
        # A remote store's units, each staged and PUT in a job of its own (threads
        # are started at the first job: none on a local store).
        self.put_pool = WorkerPool(PUT_THREADS, "zarrfs-put")
        # Batches run concurrently; their commits one at a time.
        self._commit_lock = trio.Lock()
        self._unsynced: set[str] = set()  # keys replaced but not yet made durable
        # One sync at a time: a flush that finds its keys taken by a sync under way
        # must not return before that sync has made them durable.
        self._sync_lock = trio.Lock()

    async def stage(
        self, meta: ArrayMeta, unit: Index, chunks: dict[Index, np.ndarray], dropped: set[int]
    ) -> tuple[Any, ShardIndex | None, Staged]:
        """``stage_unit`` in an encode worker."""
        return await self.pool.run(stage_unit, self.store, meta, unit, chunks, dropped)

    @property
    def each_unit(self) -> bool:
        """Units are put in place one by one (``put``), not staged and committed as
        a batch: a remote store, whose every request waits on the network."""
        return self.store.remote

    async def put(
        self, meta: ArrayMeta, unit: Index, chunks: dict[Index, np.ndarray], dropped: set[int]
    ) -> tuple[bool, ShardIndex | None, Staged]:
        """``stage_unit`` and the commit of what it staged, in a put worker: (whether
        a value was stored, not deleted; the new index of a shard; what was done)."""
        return await self.put_pool.run(put_unit, self.store, meta, unit, chunks, dropped)

    async def commit(self, staged: list[Any]) -> None:
        """Make a batch's staged values durable and rename them into place, one
        batch at a time (one with nothing staged waits for its turn all the same)."""
        async with self._commit_lock:
            if staged:
                await self.io_pool.run(self.store.commit, staged)

    def replaced(self, key: str) -> None:
        """``key`` may have been replaced: ``sync`` makes its directory durable."""
        self._unsynced.add(key)

    async def sync(self) -> None:
        """Make every key replaced so far durable: one fsync per directory. Returns
        once those a sync under way took are durable too (or it failed and gave
        them back, and this one tried them again)."""
        async with self._sync_lock:
            keys, self._unsynced = sorted(self._unsynced), set()
            if keys:
                try:
                    with trio.CancelScope(shield=True):
                        await self.io_pool.run(self.store.sync, keys)
                except BaseException:
                    self._unsynced.update(keys)
                    raise

    async def delete_chunk(self, meta: ArrayMeta, index: Index) -> None:
        await self.io_pool.run(delete_chunk, self.store, meta, index)

    async def stored_units(self, meta: ArrayMeta) -> list[Index]:
        return await self.io_pool.run(stored_units, self.store, meta)

    async def store_metadata(
        self,
        key: str,
        document: bytes,
        consolidated: tuple[str, bytes] | None,
        stale_keys: list[str],
    ) -> Staged:
        """A resize's documents, then the deletion of the keys it left stale (on a
        remote store all at once, in the put pool, once the documents are stored)."""
        if not self.each_unit or not stale_keys:
            return await self.io_pool.run(
                store_metadata, self.store, key, document, consolidated, stale_keys
            )
        did = await self.io_pool.run(store_metadata, self.store, key, document, consolidated, [])
        await each_at_once(functools.partial(self.put_pool.run, self.store.delete), stale_keys)
        return Staged(nbytes=did.nbytes, deleted=len(stale_keys))


def put_unit(
    store: Store, meta: ArrayMeta, unit: Index, chunks: dict[Index, np.ndarray], dropped: set[int]
) -> tuple[bool, ShardIndex | None, Staged]:
    """A unit staged and committed on its own (a worker of the put pool)."""
    staged, index, did = stage_unit(store, meta, unit, chunks, dropped)
    if staged is not None:
        store.commit([staged])
    return staged is not None, index, did
