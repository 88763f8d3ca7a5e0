"""The live arrays behind the flat files: reads assembled from decoded chunks, writes
merged into dirty chunks and stored back.

core owns what a mount knows of its arrays while it runs, below the views that show
them as files and above formats (metadata, codecs, grid math) and stores:

- ``arrays``: ``ArrayState``, one array's live state, built from the parts below.
- ``livemeta``: the metadata as it is now (a resize replaces it) and the element
  arithmetic both paths share: the fill element, fill-value runs.
- ``read/``: the decoded-chunk cache and its loads, stripes, and the read path of
  one array (``reading``, ``readahead``, ``livechunks``).
- ``write/``: the life of dirty chunks (``chunkstate``), the writers (``writing``,
  ``chunkwrites``), the resize bookkeeping (``stale``) and write-back, which stores
  dirty chunks and resizes in batches (``writeback``, ``staging``).
- ``counters``, ``pool``, ``sizes``: what a mount has done, the worker threads,
  sizes as users write them.

Who owns whom in one ``ArrayState`` (each part gets what it uses in its
constructor; none holds the state itself, so a state no longer used is freed at
once)::

    ArrayState
    ├── live       LiveMeta                 shared by every part below
    ├── chunks     ChunkStates              dirty, frozen and held chunks
    ├── stale      StaleUnits(live, chunks.dirty)
    ├── visible    LiveChunks(live, chunks, stale, cache)     chunks as reads see them
    ├── reader     ArrayReader(live, visible, cache)
    ├── read_ahead ReadAhead(live, visible, reader, cache)
    └── writer     ArrayWriter(live, chunks, stale, ChunkWriter(...), notices)
                   └── ChunkWriter(live, chunks, visible, stale, cache, notices)

The chunk cache and write-back are shared by every array of a mount and passed
in. Write-back hears from an array's parts through a ``WriteBackLink``, which
names the array to it by its ``ArrayState``, held weakly.
"""
