"""The read path: stored chunks fetched, decoded, cached and assembled into array bytes.

Parts, and who owns whom:

- ``chunks.ChunkCache``: the decoded-chunk cache, one per mount, shared by every
  array (``core/arrays.ArrayState`` holds it; write-back tells it of each change
  through ``forget``, ``put``, ``invalidate`` and ``begin_replace`` ..
  ``end_replace``). It owns the parts below and decides between them: an answer
  from the LRU, else the load in flight or a new one, read-ahead and use-once.
  The worker pools and the ``Counters`` are given to it (or made by it).
- ``lru.DecodedLru``: chunks, shard indexes and stripes under one byte budget,
  each kind under a key type of its own (``ChunkKey``, ``ShardIndexKey``,
  ``StripeKey``).
- ``buffers.SpareBuffers``: the buffers entries were decoded or assembled into,
  given back when an entry leaves the LRU unreferenced, for the next load.
- ``flights.Loads``: one load per key at a time (single-flight), queued on the
  pools; bad chunks remembered for a while; finished values handed to the cache.
- ``indexes.ShardIndexes``: where a sharded array's inner chunks are (each
  shard's index, loaded once by ``Loads`` and cached in the LRU), and the
  protocol by which write-back replaces a shard.
- ``stripes.Stripes``: runs of array.raw assembled from rows of chunks, which it
  gathers through the cache; cached in the LRU, assembled by the decoders.
- ``loading`` and ``shardread``: what a load does in a worker thread (fetch the
  stored bytes, or an inner chunk's byte range by its shard's index, and
  decode); they see only the store and the immutable ``ArrayMeta``.
- ``reading``: what a read returns: ``ArrayReads`` is the read side of
  ``ArrayState`` (dirty chunks first, then the cache; fast paths, stripes,
  read-ahead), and ``assemble`` copies chunks into C-order bytes.

Everything but the worker-thread functions runs on the trio thread
(docs/concurrency.md).
"""
