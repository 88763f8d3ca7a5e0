"""Chunk bytes to elements and back (pure): the codec chain of one array.

- ``chain``: the chain every format uses (array→array, one array→bytes, then
  bytes→bytes stages), with the output bounded at every stage;
- ``bounded`` and ``inflate``: decompression that never yields more than the
  chunk can hold (libdeflate for zlib and gzip);
- ``pipeline``: v2, v1 and pre-v1 filters and compressors mapped onto a chain;
- ``v3``: the Zarr v3 ``codecs`` list parsed into a chain;
- ``v3_sharding``: ``sharding_indexed`` as a codec of that chain.

Every codec object comes from numcodecs' registry.
"""
