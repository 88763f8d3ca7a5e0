"""One array's state as its parts make it up, without a mount."""

from __future__ import annotations

import gc
import json
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio

from tests.support.stores import v2_zarray
from zarrfs.core.arrays import ArrayState
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.core.write.chunkstate import ChunkStates, Dirty
from zarrfs.core.write.writeback import WriteBack
from zarrfs.errors import InvalidArgumentError
from zarrfs.formats.grid.layout import Index
from zarrfs.formats.metadata.v2 import parse_array
from zarrfs.stores.directory import DirectoryStore

ROW = 4 * 4  # four <i4 columns


def empty_array(root: Path, rows: int = 8, writeback: bool = True) -> ArrayState:
    """A stored array of ``rows`` rows of 4 ``<i4`` in chunks of 2 rows, fill 7, no chunk stored."""
    zarray = json.dumps(v2_zarray([rows, 4], [2, 4], fill_value=7)).encode()
    (root / ".zarray").write_bytes(zarray)
    store = DirectoryStore(str(root))
    cache = ChunkCache(store, 1 << 20)
    back = WriteBack(store, cache, budget=1 << 30, interval=3600) if writeback else None
    return ArrayState(parse_array("", zarray, None), {".zarray": zarray}, cache, back)


@pytest.mark.parametrize("writeback", [False, True])
def test_no_part_holds_the_state(tmp_path: Path, writeback: bool) -> None:
    """Freed by reference counting as soon as it is let go (write-back holds the
    states with something to store, and only those)."""
    state = empty_array(tmp_path, writeback=writeback)
    if writeback:
        trio.run(state.read, 0, ROW)
    else:
        trio.run(state.write, 0, bytes(ROW))
    gone = weakref.ref(state)
    gc.disable()
    try:
        del state
        assert gone() is None
    finally:
        gc.enable()


def test_a_partial_row_is_the_tail_until_dropped(tmp_path: Path) -> None:
    state = empty_array(tmp_path)
    trio.run(state.write, 8 * ROW, b"\1\0\0\0")
    assert bytes(state.tail) == b"\1\0\0\0"
    assert state.size == 8 * ROW + 4
    assert trio.run(state.read, 8 * ROW, 100) == b"\1\0\0\0"
    state.drop_tail()
    assert not state.tail
    assert state.size == 8 * ROW


def test_writes_and_truncates_count_as_changes(tmp_path: Path) -> None:
    state = empty_array(tmp_path)
    before = state.changes
    trio.run(state.write, 0, b"\2\0\0\0")
    state.truncate(4 * ROW)
    assert state.changes == before + 2
    with pytest.raises(InvalidArgumentError):
        state.truncate(ROW + 1)  # refused: nothing changed
    state.resize(6)
    assert state.changes == before + 2


def test_a_frozen_chunk_reads_as_the_flush_holds_it(tmp_path: Path) -> None:
    state = empty_array(tmp_path, writeback=False)
    row = np.arange(8, dtype="<i4").tobytes()
    trio.run(state.write, 0, row)
    dirty = state.dirty[(0, 0)]
    state.chunks.freeze((0,), {(0, 0): dirty})
    assert not state.dirty and (0, 0) in state.frozen
    assert trio.run(state.read, 0, 2 * ROW) == row
    # A write meanwhile starts a new dirty chunk from a copy of the frozen one.
    trio.run(state.write, 0, b"\5\0\0\0")
    assert state.frozen[(0, 0)].reshape(-1)[0] == 0
    assert trio.run(state.read, 0, 8) == b"\5\0\0\0\1\0\0\0"


def test_a_shrink_then_grow_reads_fill_value(tmp_path: Path) -> None:
    state = empty_array(tmp_path)
    trio.run(state.write, 0, np.full(32, 3, "<i4").tobytes())
    state.truncate(3 * ROW)  # inside the second chunk
    state.truncate(8 * ROW)
    data = np.frombuffer(trio.run(state.read, 0, 8 * ROW), "<i4")
    assert np.all(data[:12] == 3) and np.all(data[12:] == 7)
    assert state.stale.is_stale((2, 0)) and not state.metadata_changed
    assert state.stale_range() == (2, 4)  # for the next flush to delete


def test_dirty_data_is_copied_before_it_is_written() -> None:
    frozen = np.zeros((2, 2), "<i4", order="F")
    frozen.flags.writeable = False
    dirty = Dirty(frozen, None, 0.0)
    data = dirty.writable("F")
    assert data is not frozen and data.flags.writeable and data.flags.f_contiguous
    assert dirty.writable("F") is data


class Ledger:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def track(self, index: Index, dirty: Dirty) -> None:
        self.calls.append(("track", index))

    def dropped(self, index: Index) -> None:
        self.calls.append(("dropped", index))


def test_the_ledger_hears_of_every_dirty_chunk() -> None:
    ledger = Ledger()
    chunks = ChunkStates(ledger)
    first = Dirty(np.zeros(2), None, 0.0)
    chunks.make_dirty((0,), first)
    chunks.make_dirty((1,), Dirty(np.zeros(2), None, 0.0))
    chunks.drop((1,))
    chunks.freeze((0,), {(0,): first})
    assert ledger.calls == [("track", (0,)), ("track", (1,)), ("dropped", (1,)), ("dropped", (0,))]
    assert chunks.busy and chunks.held() == [(0,)]
    chunks.thaw({(0,): first})  # storing failed: dirty again
    chunks.unfreeze({(0,): first})
    chunks.release((0,))
    assert ledger.calls[-1] == ("track", (0,))
    assert chunks.dirty[(0,)] is first and not chunks.frozen and not chunks.held()
