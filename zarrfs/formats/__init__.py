"""What Zarr metadata and chunk bytes mean, with no I/O at all.

Everything here is pure: it turns documents and bytes a store returned into
models, and models into documents and bytes to store. Its parts, lowest first
(a part imports only the ones before it; tests/unit/test_layers.py checks this):

- ``limits``: the bounds on what hostile metadata may make zarrfs allocate;
- ``grid``: the layout math of one array (byte ranges of ``array.raw`` to chunk
  regions, shard indexes, stripes of chunk rows);
- ``codecs``: the one codec chain every format maps onto, its bounded
  decompression and the v3 codecs (sharding included);
- ``model``: ``ArrayMeta``/``GroupMeta``, one model of an array or a group for
  every format version;
- ``sidecars``: the ENVI and NRRD headers that describe ``array.raw``;
- ``metadata``: parsing and writing the documents of each format (pre-v1, v1,
  v2, consolidated, v3), detecting which one a store holds, and listing a
  hierarchy.
"""
