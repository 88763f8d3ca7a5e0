"""The resize bookkeeping of one array, on its own: what a shrink leaves stale."""

from __future__ import annotations

import json

import numpy as np

from tests.support.stores import v2_zarray
from zarrfs.core.livemeta import LiveMeta
from zarrfs.core.write.chunkstate import Dirty
from zarrfs.core.write.stale import StaleUnits
from zarrfs.formats.grid.layout import Index
from zarrfs.formats.metadata.v2 import parse_array
from zarrfs.formats.model import ArrayMeta


def meta_of(shape: list[int], chunks: list[int]) -> ArrayMeta:
    return parse_array("a", json.dumps(v2_zarray(shape, chunks)).encode(), None)


def shrunk(rows: int, to: int) -> tuple[LiveMeta, dict[Index, Dirty], StaleUnits]:
    """An array of ``rows`` rows in chunks of 4, shrunk to ``to`` rows."""
    live = LiveMeta(meta_of([rows, 2], [4, 2]))
    dirty: dict[Index, Dirty] = {}
    stale = StaleUnits(live, dirty)
    stale.resized(rows, to)
    live.replace(live.meta.resized(to))
    return live, dirty, stale


def test_a_shrink_leaves_the_chunks_beyond_stale() -> None:
    _, _, stale = shrunk(16, 6)
    assert stale.metadata_changed
    assert not stale.is_stale((0, 0))
    assert not stale.is_stale((1, 0))  # straddles the end: inside, rewritten as fill
    assert stale.is_stale((2, 0)) and stale.is_stale((3, 0))
    assert stale.stale_range() == (2, 4)
    assert stale.marks() == (6, 16, 1)


def test_a_chunk_written_again_is_stale_no_more() -> None:
    _, _, stale = shrunk(16, 6)
    assert stale.rewrite((2, 0))  # starts from fill value
    assert not stale.is_stale((2, 0))
    assert not stale.rewrite((2, 0))
    assert not stale.rewrite((0, 0))  # never stale
    delete, rewrite = stale.stale_units([(0, 0), (2, 0), (3, 0)])
    assert (delete, rewrite) == ([(3, 0)], [])


def test_dirty_chunks_are_not_deleted() -> None:
    _, dirty, stale = shrunk(16, 6)
    dirty[(3, 0)] = Dirty(np.zeros((4, 2), "<i4"), None, 0.0)
    assert stale.stale_units([(2, 0), (3, 0)]) == ([(2, 0)], [])


def test_a_second_shrink_forgets_what_was_written_past_it() -> None:
    live, _, stale = shrunk(16, 10)
    assert stale.rewrite((3, 0))
    stale.resized(10, 6)
    live.replace(live.meta.resized(6))
    assert stale.is_stale((3, 0))
    assert stale.marks() == (6, 16, 2)


def test_a_flush_settles_the_marks_it_took() -> None:
    _, _, stale = shrunk(16, 6)
    assert stale.rewrite((2, 0))
    stale.mark_stored(6, *stale.marks())
    assert not stale.metadata_changed
    assert stale.stale_range() is None
    assert stale.marks() == (6, 6, 1)
    assert stale.is_stale((2, 0))  # the store no longer holds it: beyond the end again


def test_a_shrink_during_the_flush_keeps_the_marks() -> None:
    live, _, stale = shrunk(16, 8)
    marks = stale.marks()
    stale.resized(8, 4)  # while the flush stored the shape of 8 rows
    live.replace(live.meta.resized(4))
    stale.mark_stored(8, *marks)
    assert stale.stored_rows == 8 and stale.metadata_changed
    assert stale.stale_range() == (1, 4)
    assert stale.is_stale((1, 0))


def test_a_grow_alone_leaves_nothing_stale_behind_it() -> None:
    live = LiveMeta(meta_of([8, 2], [4, 2]))
    stale = StaleUnits(live, {})
    stale.resized(8, 20)
    live.replace(live.meta.resized(20))
    assert stale.metadata_changed
    # Chunks stored there, if any, predate the grow: they read as fill value.
    assert stale.stale_range() == (2, 5)
    assert stale.is_stale((3, 0)) and not stale.is_stale((1, 0))
    stale.mark_stored(20, *stale.marks())
    assert stale.stale_range() is None
    assert not stale.is_stale((3, 0))
