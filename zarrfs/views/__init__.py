"""Virtual files: what each file of the mount holds, made on demand.

``base.py`` defines ``View``, everything the FUSE layer asks of a file (size,
reads, writes, caching flags and hooks: fuse/__init__.py lists them), and
``ArrayView``, a file over an array's live state and the mount's write-back. The
views:

- ``DocumentView`` (base.py): a metadata document as stored or rewritten.
- ``RawView`` (raw.py): ``array.raw``, the array as C-order bytes; read-write.
- ``NpyView`` (npy.py): ``array.npy``, an NPY header and ``array.raw``; read-write,
  and ``np.save`` onto it may change the first dimension.
- ``EnviHeaderView`` (sidecars.py), ``NrrdHeaderView`` and ``VolumeHeaderView``
  (nrrd.py): ``array.hdr``, ``array.nhdr`` and ``volumes/*.nhdr``, headers for
  legacy tools, made from the live shape.
- ``InfoView`` (info.py): ``info``, a summary of one array from a store listing.
- ``ChunkKeyView`` (chunkkeys.py): a chunk key's stored value, found by lookup.
- ``StatsView``, ``FlushView`` (control.py): ``.zarrfs/stats`` and ``.zarrfs/flush``.

``xattrs.py`` gives an array's or group's extended attributes (and texts
``info`` shares). Which views a directory shows is the namespace's choice
(namespace/listing.py).
"""
