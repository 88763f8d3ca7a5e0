"""An array's elements big-endian, read as its own array: the decoders turn each
chunk round as they decode it, and everything else of the read path (the cache,
read-ahead, stripes, shard runs) serves it as it serves ``array.raw``.

The twin's metadata is the array's with the big-endian dtype, a codec chain that
decodes to it (``CodecChain.serving``: the swap runs in place where the chunk was
just decoded, while it is in the CPU's cache) and a path of its own, so that its
chunks and stripes are cache entries of their own. The chunk cache makes every
change it is told of for the array (``forget``, ``put``, ``invalidate``, shard
replaces) to its twin too.

Pure: no I/O, no state.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from zarrfs.formats.model import ArrayMeta

# Store paths hold no NUL (formats/model.ArrayMeta.display_name cuts it off), so
# no array's path is another's twin's.
TWIN_MARK = "\0big-endian"


def twin_path(path: str) -> str:
    return path + TWIN_MARK


def big_endian(meta: ArrayMeta) -> ArrayMeta:
    """``meta``'s twin: the same chunks, decoded big-endian."""
    dtype = meta.dtype.newbyteorder(">")
    fill = meta.fill_value
    if fill is not None:
        fill = np.frombuffer(fill, dtype=meta.dtype).byteswap().tobytes()
    return replace(
        meta,
        path=twin_path(meta.path),
        dtype=dtype,
        fill_value=fill,
        codecs=meta.codecs.serving(dtype),
    )
