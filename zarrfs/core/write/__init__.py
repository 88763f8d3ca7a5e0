"""The write path: dirty chunks and resizes, from an array's state into the store.

Per array (owned by its ``ArrayState``, core/arrays.py):

* ``chunkstate.ChunkStates``: the one owner of the life of the array's chunks
  (clean, dirty, frozen while a batch holds their unit); the array state changes
  it through ``make_dirty`` and ``drop``, write-back through ``freeze``, ``thaw``,
  ``unfreeze`` and ``release``.
* ``stale``: which chunks and units a resize left stale, asked by reads, writes
  and a resize's flush.
* ``documents.Documents``: the node's metadata documents as shown. The tree makes
  them, views read them, the array state holds them; a resize's flush is their
  one writer.

Per mount (one ``writeback.WriteBack``, built with the mount and handed to every
array state; none on a read-only mount). ``WriteBack`` is the facade the rest of
zarrfs calls; it builds these parts, in this order, and gives each the parts it
uses in its constructor (none holds the facade, none touches another's private
state):

* ``ledger.Ledger``: what is not yet stored, across arrays: dirty chunks oldest
  first and their bytes against the write-cache budget, arrays with a resize to
  store, arrays with units a batch holds. It keeps an array state only for what
  is unstored (for held units, until it next lists the arrays).
* ``ratelimit.Backoff``: the last failure to store and when to try again, with the
  one rate-limited log (``RateLimitedLog``) of store failures.
* ``storing.Storing``: the way to the store: the encode workers, the I/O thread
  (commits one batch at a time, deletions, metadata, listings) and the keys
  replaced but not yet durable (``sync``).
* ``batches.Batches``: a batch of units taken from the arrays' ``ChunkStates``,
  staged concurrently (``staging``: the encoding and staging done in worker
  threads), committed at once, then clean or dirty again.
* ``resizes.Resizes``: a resize's flush as a unit of work: settle, list, rewrite
  or claim the stale units, store the new shape (and consolidated entry), delete.
* ``behind.WriteBehind``: chunks a stream has finished, stored while it writes
  on, and the bound on how far a writer may run ahead of the encoders.
* ``admission.Admission``: before a write, wait (or refuse while the store fails)
  when the write cache is full; after it, relieve the cache.
* ``periodic.PeriodicFlush``: what has been dirty longer than the flush interval.

The two loops (``WriteBehind.run``, ``PeriodicFlush.run``) run forever in the
mount's nursery. The rules they keep are docs/concurrency.md's ("Writes").
"""
