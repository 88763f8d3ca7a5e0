"""One v2 array (8 chunks of 1 KiB, zlib) with its state and write-back over a store
whose commits fail on demand: for tests of stored batches and write-behind."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import numpy as np
import trio
import zarr

from tests.support.stores import zlib_array
from zarrfs.core.arrays import ArrayState
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.write.documents import Documents
from zarrfs.core.write.writeback import WriteBack
from zarrfs.errors import StoreError
from zarrfs.formats.metadata.v2 import parse_array
from zarrfs.stores.directory import DirectoryStore

ROWS, COLUMNS, CHUNK_ROWS = 32, 64, 4  # 8 chunks of 1 KiB
CHUNK = CHUNK_ROWS * COLUMNS * 4


class FlakyStore(DirectoryStore):
    """Commits fail while ``failing`` is set; counts commits and their sizes."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.failing = False
        self.commits: list[int] = []

    def commit(self, staged: list[Any]) -> None:
        if self.failing:
            for item in staged:  # as the real commit does on failure
                Path(item.temp).unlink()
            raise StoreError("fdatasync: input/output error", errno.EIO)
        self.commits.append(len(staged))
        super().commit(staged)


def make(root: Path) -> tuple[ArrayState, WriteBack, FlakyStore, np.ndarray]:
    data = zlib_array(root, ROWS, COLUMNS, CHUNK_ROWS)
    store = FlakyStore(str(root))
    cache = ChunkCache(store, 1 << 20)
    writeback = WriteBack(store, cache, budget=1 << 30, interval=3600)
    zarray = (root / ".zarray").read_bytes()
    documents = Documents({".zarray": zarray})
    state = ArrayState(parse_array("", zarray, None), documents, cache, writeback)
    return state, writeback, store, data


def stored(root: Path) -> np.ndarray:
    return np.asarray(zarr.open_array(str(root), mode="r")[...])


async def wait_for(predicate: Any, what: str) -> None:
    for _ in range(500):
        if predicate():
            return
        await trio.sleep(0.01)
    raise AssertionError(what)


async def stream_behind(state: ArrayState, store: FlakyStore, raw: bytes) -> None:
    """Write three chunks in small pieces, as a stream, until write-behind stored them."""
    for offset in range(0, 3 * CHUNK, 512):
        await state.write(offset, raw[offset : offset + 512])
    await wait_for(lambda: sum(store.commits) == 3, "write-behind stored too little")
