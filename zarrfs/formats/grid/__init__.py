"""The geometry of one array (pure): which chunks, shards and stripes a byte
range of the flat C-order ``array.raw`` touches.

- ``layout``: chunk grid, edge chunks, byte ranges to chunk regions;
- ``shards``: the ``sharding_indexed`` index (its bytes, its checksum) and inner
  chunk ranges;
- ``stripes``: ``array.raw`` cut into runs that each need one row of chunks.
"""
