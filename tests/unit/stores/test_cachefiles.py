"""The disk cache's pure parts (stores/cachefiles.py): a file decodes to what was
encoded and nothing else, any damage is refused, names are distinct and safe, and
eviction removes the least recently used down to its target."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from zarrfs.stores.cachefiles import (
    STAT,
    VALUE,
    CachedFile,
    CorruptEntry,
    Entry,
    bucket_of,
    decode,
    encode,
    file_name,
    key_digest,
    low_water,
    range_part,
    to_evict,
)

texts = st.text(max_size=40)
parts = st.sampled_from([VALUE, STAT]) | st.builds(
    range_part, st.integers(-(2**40), 2**40), st.integers(0, 2**30)
)
entries = st.builds(
    Entry,
    store=texts,
    key=texts,
    part=parts,
    tag=st.none() | texts,
    mtime=st.none() | st.floats(0, 2e9),
    size=st.none() | st.integers(0, 2**40),
    missing=st.booleans(),
)


def whole(entry: Entry, payload: bytes) -> bytes:
    return b"".join(bytes(p) for p in encode(entry, payload))


@given(entries, st.binary(max_size=300))
def test_a_file_decodes_to_what_was_encoded(entry: Entry, payload: bytes) -> None:
    found, data = decode(whole(entry, payload), entry.store, entry.key, entry.part)
    assert bytes(data) == payload
    assert found == Entry(**{**entry.__dict__, "length": len(payload)})


@given(entries, st.binary(min_size=1, max_size=300), st.data())
def test_any_flipped_byte_is_refused(entry: Entry, payload: bytes, data: st.DataObject) -> None:
    raw = bytearray(whole(entry, payload))
    at = data.draw(st.integers(0, len(raw) - 1))
    raw[at] ^= data.draw(st.integers(1, 255))
    with pytest.raises(CorruptEntry):
        decode(bytes(raw), entry.store, entry.key, entry.part)


@given(entries, st.binary(max_size=300), st.data())
def test_any_cut_or_extension_is_refused(entry: Entry, payload: bytes, data: st.DataObject) -> None:
    raw = whole(entry, payload)
    cut = data.draw(st.integers(0, len(raw) - 1))
    for damaged in (raw[:cut], raw + data.draw(st.binary(min_size=1, max_size=8))):
        with pytest.raises(CorruptEntry):
            decode(damaged, entry.store, entry.key, entry.part)


@given(entries, st.binary(max_size=50), texts, texts)
def test_an_entry_of_something_else_is_refused(
    entry: Entry, payload: bytes, store: str, key: str
) -> None:
    raw = whole(entry, payload)
    for asked in ((store, entry.key, entry.part), (entry.store, key, entry.part)):
        if asked != (entry.store, entry.key, entry.part):
            with pytest.raises(CorruptEntry):
                decode(raw, *asked)


@pytest.mark.parametrize(
    "raw",
    [b"", b"ZARRFS-CACHE-1\n", b"ZARRFS-CACHE-1\n\xff\xff\xff\xff" + bytes(40), b"x" * 100],
)
def test_what_is_no_cache_file_is_refused(raw: bytes) -> None:
    with pytest.raises(CorruptEntry):
        decode(raw, "s", "k", VALUE)


@given(texts, texts, parts, texts, texts, parts)
@example("\0", "", "range:0:0", "", "\0", "range:0:0")  # one text, split two ways
@example("s", "\0k", "value", "s\0", "k", "value")
def test_names_are_distinct_and_safe(
    store: str, key: str, part: str, store2: str, key2: str, part2: str
) -> None:
    name = file_name(store, key, part)
    assert "/" not in name and not name.startswith(".") and "\0" not in name
    assert name.startswith(key_digest(store, key) + ".")
    assert len(bucket_of(name)) == 2
    if (store, key, part) != (store2, key2, part2):
        assert name != file_name(store2, key2, part2)


def files(*spec: tuple[str, int, int]) -> list[CachedFile]:
    return [CachedFile(name, size, used) for name, size, used in spec]


@pytest.mark.parametrize(
    ("spec", "target", "evicted", "left"),
    [
        ((), 0, [], 0),
        ((("a", 10, 1),), 10, [], 10),
        ((("a", 10, 1),), 9, ["a"], 0),
        ((("a", 10, 3), ("b", 10, 1), ("c", 10, 2)), 15, ["b", "c"], 10),
        ((("a", 10, 3), ("b", 10, 1), ("c", 10, 2)), 20, ["b"], 20),
        ((("a", 5, 1), ("b", 50, 2)), 50, ["a"], 50),  # oldest first, not largest
        ((("b", 1, 1), ("a", 1, 1)), 1, ["a"], 1),  # ties by name: one order everywhere
    ],
)
def test_eviction_removes_the_least_recently_used_to_the_target(
    spec: tuple[tuple[str, int, int], ...], target: int, evicted: list[str], left: int
) -> None:
    out, total = to_evict(files(*spec), target)
    assert [f.name for f in out] == evicted and total == left


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 100)), max_size=30),
    st.integers(0, 5000),
)
def test_eviction_keeps_the_newest_within_the_target(
    spec: list[tuple[int, int]], target: int
) -> None:
    cached = [CachedFile(f"f{i}", size, used) for i, (size, used) in enumerate(spec)]
    out, total = to_evict(cached, target)
    kept = [f for f in cached if f not in out]
    assert total == sum(f.size for f in kept) and (total <= target or not kept)
    if out and kept:
        assert max((f.used, f.name) for f in out) <= min((f.used, f.name) for f in kept)


def test_low_water_is_a_tenth_under_the_bound() -> None:
    assert low_water(1000) == 900 and low_water(10 << 30) < 10 << 30
