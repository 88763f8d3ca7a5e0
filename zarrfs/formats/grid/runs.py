"""Runs: byte ranges of one object that are near each other, read with one request.

A reader that needs many inner chunks of a shard (a stripe of tiles, say) would
send one ranged request per chunk; over a network each request costs a round trip
and a request's worth of work on both ends. Chunks stored back to back (as every
writer lays a shard out) are fetched together instead, as runs of at most
``max_bytes`` so that a shard still arrives over several connections at once, and
across gaps of at most ``max_gap`` bytes (read and thrown away: cheaper than a
round trip). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from zarrfs.formats.grid.layout import Index


@dataclass(frozen=True)
class Member:
    """One range of a run: whose it is, and where in the run's bytes it lies."""

    index: Index
    start: int  # from the run's start
    nbytes: int


@dataclass(frozen=True)
class Run:
    key: str
    start: int  # in the object
    nbytes: int
    members: tuple[Member, ...]


Place = tuple[Index, str, int, int]  # (index, key, offset, nbytes)


def coalesce(
    places: list[Place], max_bytes: int, max_gap: int, extras: list[Place] | None = None
) -> list[Run]:
    """``places``: (index, key, offset, nbytes) of each range wanted. The runs that
    fetch them, each of one key, in order of offset within each key. A range longer
    than ``max_bytes`` is a run of its own; ranges that overlap share a run.

    ``extras``: ranges wanted later (the rest of a shard a stream reads on): each
    becomes a member of the run whose bytes already hold it wholly (the gap between
    two wanted ranges), so that those bytes are not fetched again; no run grows for
    them."""
    if max_bytes < 1 or max_gap < 0:
        raise ValueError("max_bytes must be positive and max_gap not negative")
    runs: list[Run] = []
    ordered = sorted(places, key=lambda p: (p[1], p[2], p[3]))
    group: list[Place] = []
    end = 0
    for place in ordered:
        _, key, offset, nbytes = place
        if group:
            same_key = group[0][1] == key
            fits = max(end, offset + nbytes) - group[0][2] <= max_bytes
            if same_key and offset - end <= max_gap and fits:
                group.append(place)
                end = max(end, offset + nbytes)
                continue
            runs.append(_run(group, end, extras))
        group, end = [place], offset + nbytes
    if group:
        runs.append(_run(group, end, extras))
    return runs


def _run(group: list[Place], end: int, extras: list[Place] | None) -> Run:
    key, start = group[0][1], group[0][2]
    if extras:
        taken = {index for index, _, _, _ in group}
        inside = [
            p
            for p in extras
            if p[1] == key and start <= p[2] and p[2] + p[3] <= end and p[0] not in taken
        ]
        group = sorted([*group, *inside], key=lambda p: (p[2], p[3]))
    members = tuple(Member(index, offset - start, nbytes) for index, _, offset, nbytes in group)
    return Run(key, start, end - start, members)
