"""formats/grid/runs.py: ranges of an object coalesced into runs (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zarrfs.formats.grid.runs import Member, Run, coalesce

MiB = 2**20

# (places, max_bytes, max_gap) -> runs as (key, start, nbytes, [(index, start, nbytes)])
CASES = [
    pytest.param([], 10, 0, [], id="nothing"),
    pytest.param(
        [((0,), "a", 0, 4), ((1,), "a", 4, 4), ((2,), "a", 8, 4)],
        100,
        0,
        [("a", 0, 12, [((0,), 0, 4), ((1,), 4, 4), ((2,), 8, 4)])],
        id="back-to-back",
    ),
    pytest.param(
        [((2,), "a", 8, 4), ((0,), "a", 0, 4), ((1,), "a", 4, 4)],
        100,
        0,
        [("a", 0, 12, [((0,), 0, 4), ((1,), 4, 4), ((2,), 8, 4)])],
        id="in-any-order",
    ),
    pytest.param(
        [((0,), "a", 0, 4), ((1,), "a", 4, 4), ((2,), "a", 8, 4)],
        8,
        0,
        [("a", 0, 8, [((0,), 0, 4), ((1,), 4, 4)]), ("a", 8, 4, [((2,), 0, 4)])],
        id="cut-at-max-bytes",
    ),
    pytest.param(
        [((0,), "a", 0, 4), ((1,), "a", 10, 4)],
        100,
        6,
        [("a", 0, 14, [((0,), 0, 4), ((1,), 10, 4)])],
        id="gap-within",
    ),
    pytest.param(
        [((0,), "a", 0, 4), ((1,), "a", 10, 4)],
        100,
        5,
        [("a", 0, 4, [((0,), 0, 4)]), ("a", 10, 4, [((1,), 0, 4)])],
        id="gap-too-wide",
    ),
    pytest.param(
        [((0,), "a", 0, 4), ((1,), "b", 4, 4)],
        100,
        10,
        [("a", 0, 4, [((0,), 0, 4)]), ("b", 4, 4, [((1,), 0, 4)])],
        id="two-keys",
    ),
    pytest.param(
        [((0,), "a", 0, 50), ((1,), "a", 50, 4)],
        10,
        0,
        [("a", 0, 50, [((0,), 0, 50)]), ("a", 50, 4, [((1,), 0, 4)])],
        id="longer-than-max-alone",
    ),
    pytest.param(
        [((0,), "a", 0, 8), ((1,), "a", 4, 8)],
        100,
        0,
        [("a", 0, 12, [((0,), 0, 8), ((1,), 4, 8)])],
        id="overlapping",
    ),
    pytest.param(
        [((0,), "a", 0, 8), ((1,), "a", 2, 2)],
        100,
        0,
        [("a", 0, 8, [((0,), 0, 8), ((1,), 2, 2)])],
        id="one-inside-another",
    ),
]


@pytest.mark.parametrize(("places", "max_bytes", "max_gap", "expected"), CASES)
def test_coalesce(
    places: list[tuple[tuple[int, ...], str, int, int]],
    max_bytes: int,
    max_gap: int,
    expected: list[tuple[str, int, int, list[tuple[tuple[int, ...], int, int]]]],
) -> None:
    runs = coalesce(places, max_bytes, max_gap)
    assert runs == [
        Run(key, start, nbytes, tuple(Member(*m) for m in members))
        for key, start, nbytes, members in expected
    ]


@pytest.mark.parametrize(("max_bytes", "max_gap"), [(0, 0), (-1, 0), (10, -1)])
def test_coalesce_refuses_bad_bounds(max_bytes: int, max_gap: int) -> None:
    with pytest.raises(ValueError):
        coalesce([((0,), "a", 0, 1)], max_bytes, max_gap)


places_strategy = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),
        st.integers(0, 4 * MiB),
        st.integers(1, MiB),
    ),
    max_size=40,
)


@given(places_strategy, st.integers(1, 8 * MiB), st.integers(0, 256 * 1024))
def test_every_range_is_in_exactly_one_run_within_bounds(
    raw: list[tuple[str, int, int]], max_bytes: int, max_gap: int
) -> None:
    places = [((i,), key, offset, nbytes) for i, (key, offset, nbytes) in enumerate(raw)]
    runs = coalesce(places, max_bytes, max_gap)
    seen = {}
    for run in runs:
        assert run.members, "a run holds at least one range"
        # A run is no longer than max_bytes, unless it is one range that alone is.
        assert run.nbytes <= max_bytes or len(run.members) == 1
        for member in run.members:
            assert member.index not in seen
            seen[member.index] = (run.key, run.start + member.start, member.nbytes)
            # Each range lies wholly inside its run's bytes.
            assert member.start >= 0 and member.start + member.nbytes <= run.nbytes
        # The run reads no further than its last range ends (no trailing bytes).
        assert max(m.start + m.nbytes for m in run.members) == run.nbytes
        assert min(m.start for m in run.members) == 0
    assert seen == {index: (key, offset, nbytes) for index, key, offset, nbytes in places}


@given(places_strategy, st.integers(1, 8 * MiB), st.integers(0, 256 * 1024))
def test_gaps_inside_a_run_are_at_most_max_gap(
    raw: list[tuple[str, int, int]], max_bytes: int, max_gap: int
) -> None:
    places = [((i,), key, offset, nbytes) for i, (key, offset, nbytes) in enumerate(raw)]
    for run in coalesce(places, max_bytes, max_gap):
        end = 0
        for member in sorted(run.members, key=lambda m: m.start):
            assert member.start - end <= max_gap
            end = max(end, member.start + member.nbytes)


def test_extras_fill_the_gaps_of_runs_but_never_grow_them() -> None:
    wanted = [((0,), "a", 0, 4), ((2,), "a", 8, 4)]
    extras = [((1,), "a", 4, 4), ((3,), "a", 12, 4), ((4,), "b", 4, 4), ((0,), "a", 0, 4)]
    runs = coalesce(wanted, 100, 4, extras)
    assert runs == [Run("a", 0, 12, (Member((0,), 0, 4), Member((1,), 4, 4), Member((2,), 8, 4)))]


@given(places_strategy, places_strategy, st.integers(1, 8 * MiB), st.integers(0, 256 * 1024))
def test_extras_change_no_run_bounds(
    raw: list[tuple[str, int, int]],
    raw_extras: list[tuple[str, int, int]],
    max_bytes: int,
    max_gap: int,
) -> None:
    places = [((i,), key, offset, nbytes) for i, (key, offset, nbytes) in enumerate(raw)]
    extras = [((-1 - i,), k, o, n) for i, (k, o, n) in enumerate(raw_extras)]
    plain = coalesce(places, max_bytes, max_gap)
    with_extras = coalesce(places, max_bytes, max_gap, extras)
    assert [(r.key, r.start, r.nbytes) for r in plain] == [
        (r.key, r.start, r.nbytes) for r in with_extras
    ]
    for run in with_extras:
        for member in run.members:
            assert member.start + member.nbytes <= run.nbytes
