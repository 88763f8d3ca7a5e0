"""The disk cache's records of its reads (stores/cachereads.py): which keys were
written since a read began, and where the last values read came from."""

from __future__ import annotations

import pytest

from zarrfs.stores.cachereads import FORGET, RECENT_READS, RecentReads, Writes


def test_a_read_begun_before_a_write_of_its_key_caches_nothing() -> None:
    writes = Writes()
    before = writes.begin()
    writes.wrote("a")
    after = writes.begin()
    assert not writes.may_cache("a", before)
    assert writes.may_cache("b", before)  # another key
    assert writes.may_cache("a", after)


def test_past_the_keys_it_remembers_every_read_begun_before_caches_nothing() -> None:
    writes = Writes()
    before = writes.begin()
    for n in range(FORGET + 1):
        writes.wrote(f"k{n}")
    assert not writes.may_cache("never-written", before)
    assert writes.may_cache("never-written", writes.begin())


@pytest.mark.parametrize(
    ("notes", "served"),
    [
        ([], False),  # nothing read yet: the network's window
        ([(True, 1)], True),
        ([(True, 3), (False, 1)], True),  # three quarters
        ([(True, 2), (False, 1)], False),
        ([(False, 1), (True, RECENT_READS)], True),  # the older reads left the record
        ([(True, RECENT_READS), (False, RECENT_READS // 4 + 1)], False),
        ([(True, RECENT_READS), (False, RECENT_READS // 4)], True),
        ([(False, 10 * RECENT_READS), (True, RECENT_READS)], True),  # a count past the record
    ],
)
def test_mostly_served_when_three_quarters_of_the_last_reads_were(
    notes: list[tuple[bool, int]], served: bool
) -> None:
    recent = RecentReads()
    for value, count in notes:
        recent.note(value, count)
    assert recent.mostly_served() is served
