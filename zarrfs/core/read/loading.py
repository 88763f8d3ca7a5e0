"""What a chunk load does in a worker thread: fetch the stored bytes, then decode.

These see nothing but the store and the immutable ``ArrayMeta`` (docs/concurrency.md);
the chunk cache (core/read/chunks.py) decides what to load, when, and where it goes.
Both raise ``ChunkError`` for a chunk that is bad, outside any ``except`` block, so
that the exception holds no context: its traceback is all that refers to the
buffers the load decoded into.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zarrfs.core.read.shardread import Where, fetch_inner
from zarrfs.errors import ChunkError, InvalidValueError, ZarrfsError
from zarrfs.formats.codecs.pipeline import size_bound
from zarrfs.formats.grid.layout import Index
from zarrfs.formats.model import ArrayMeta
from zarrfs.stores.base import Store

# What a fetch brings: (the key it came from, its stored bytes), or None.
Fetched = tuple[str, bytes | memoryview] | None


@dataclass(frozen=True)
class Failure:
    """A chunk's failure as remembered: what a fresh ChunkError needs, and no
    exception object, whose traceback would keep the failed load's frames (and the
    buffers they decoded into) alive as long as the failure is remembered."""

    array: str
    key: str
    reason: str

    def error(self) -> ChunkError:
        """A new exception for each reader: raising one object again and again
        would add every reader's frames to its traceback."""
        e = ChunkError(self.array, self.key, self.reason)
        e.logged = True
        return e


def fetch_chunk(store: Store, meta: ArrayMeta, index: Index, where: Where | None) -> Fetched:
    """(key, stored bytes) of a chunk, None when it is not stored; ``where``: an inner
    chunk's place in its shard."""
    # A stored chunk larger than any of its codecs could make of it is not read.
    limit = size_bound(meta.chunk_nbytes)
    if where is not None:
        data = fetch_inner(store, meta, index, where, limit)
        return None if data is None else (where[0], data)
    for key in meta.chunk_keys(index):
        try:
            data = store.get_buffer(key, limit=limit)
        except InvalidValueError as e:
            # hostile or broken content (a symlink, a FIFO, too large): the chunk is bad
            reason = str(e)
            break
        if data is not None:
            return key, data
    else:
        return None
    raise ChunkError(meta.display_name, key, reason)


def decode_fetched(
    meta: ArrayMeta, index: Index, fetched: Fetched, spare: list[np.ndarray] | None
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The fetched chunk decoded, into the buffer in ``spare`` if there is one:
    (chunk, the buffer it lives in when that is one of the cache's)."""
    out = spare.pop() if spare else None
    if fetched is None:
        return None, None
    key, data = fetched
    decoded = _decode(meta, data, out)
    if not isinstance(decoded, str):
        return decoded
    reason = decoded if meta.shards is None else f"inner chunk {index}: {decoded}"
    raise ChunkError(meta.display_name, key, reason)


def _decode(
    meta: ArrayMeta, data: bytes | memoryview, out: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray | None] | str:
    """(chunk, our buffer it lives in), or why it cannot be decoded."""
    if out is None and meta.codecs.decodes_into:
        out = np.empty(meta.chunk_nbytes, dtype=np.uint8)
    try:
        arr = meta.codecs.decode(data, None, out)
    except ZarrfsError:
        raise
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    arr.flags.writeable = False
    return arr, (out if out is not None and arr.base is out else None)


def drop_tracebacks(error: BaseException) -> None:
    """Free the frames of the worker's stack that ``error`` and its causes hold.

    The worker's own frame, which held the outcome when the traceback was taken,
    holds it still: error -> traceback -> load frame -> ... -> worker frame ->
    outcome -> error is a cycle that only the garbage collector would free, some
    time later, with every buffer the load's frames refer to.
    """
    seen: set[int] = set()
    chained: BaseException | None = error
    while chained is not None and id(chained) not in seen:
        seen.add(id(chained))
        chained.__traceback__ = None
        chained = chained.__cause__ or chained.__context__
