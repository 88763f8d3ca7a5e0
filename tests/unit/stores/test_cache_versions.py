"""The disk cache revalidates in bulk (stores/cacheversions.py): once a mount says it
reads an array, its stale entries are checked against one listing of the array's
keys with their versions instead of one conditional request each; an entry the
listing saw at another version, or did not see, is asked for alone, so a listing
never serves a changed value."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.support.versioned import VersionedStore
from zarrfs.errors import StoreError
from zarrfs.formats.metadata.hierarchy import array_keys
from zarrfs.stores import cacheversions
from zarrfs.stores.base import NotAtHand
from zarrfs.stores.cacheversions import ListedVersions
from zarrfs.stores.diskcache import DiskCacheStore

MiB = 1 << 20
TTL = 0.3

CHUNKS = {f"arr/{i}.0": bytes([i]) * 100 for i in range(8)}


@pytest.fixture
def inner() -> VersionedStore:
    return VersionedStore({**CHUNKS, "arr/.zarray": b"{}", "other/0": b"x" * 10})


def stale_cache(inner: VersionedStore, tmp_path: Path, whole: bool = True) -> DiskCacheStore:
    """A cache holding every chunk (whole values, or two ranges of each, as a shard's
    inner chunks are held), all stale."""
    cache = DiskCacheStore(inner, str(tmp_path / "c"), MiB, ttl=TTL)
    for key in CHUNKS:
        if whole:
            cache.get(key)
        else:
            cache.get_ranges(key, [(10, 5), (-4, 4)])
    cache.get("other/0")
    time.sleep(TTL + 0.05)
    inner.requests.clear()
    return cache


def test_stale_entries_of_an_announced_array_cost_one_listing(
    inner: VersionedStore, tmp_path: Path
) -> None:
    cache = stale_cache(inner, tmp_path)
    cache.reading_under("arr")
    for key, value in CHUNKS.items():
        assert cache.get(key) == value
        assert cache.get_range(key, 10, 5) == value[10:15]  # from the whole value
    assert dict(inner.requests) == {("versions", "arr"): 1}
    assert cache.stats.listed == len(CHUNKS) and cache.stats.revalidated == 0
    assert cache.counters()["listings"] == 1
    # Stamped valid as of the listing: served for another TTL without asking.
    for key in CHUNKS:
        cache.get(key)
    assert inner.count() == 1


def test_ranges_held_of_an_announced_array_cost_one_listing(
    inner: VersionedStore, tmp_path: Path
) -> None:
    cache = stale_cache(inner, tmp_path, whole=False)
    cache.reading_under("arr")
    for key, value in CHUNKS.items():
        assert cache.get_ranges(key, [(10, 5), (-4, 4)]) == [value[10:15], value[-4:]]
    assert dict(inner.requests) == {("versions", "arr"): 1}
    assert cache.stats.listed == 2 * len(CHUNKS)


def test_a_key_outside_every_announced_array_is_asked_alone(
    inner: VersionedStore, tmp_path: Path
) -> None:
    cache = stale_cache(inner, tmp_path)
    cache.reading_under("arr")
    assert cache.get("other/0") == b"x" * 10
    assert inner.count("unchanged") == 1 and inner.count("versions") == 0


def test_a_value_changed_since_it_was_cached_is_read_again(
    inner: VersionedStore, tmp_path: Path
) -> None:
    cache = stale_cache(inner, tmp_path)
    inner.set("arr/3.0", b"changed")
    inner.delete("arr/5.0")
    cache.reading_under("arr")
    assert cache.get("arr/3.0") == b"changed"
    assert cache.get("arr/5.0") is None
    assert cache.get_range("arr/3.0", 0, 3) == b"cha"
    assert cache.get("arr/4.0") == CHUNKS["arr/4.0"]
    assert inner.count("versions") == 1 and inner.count("unchanged") == 0
    assert inner.requests[("fetch", "arr/3.0")] == 1 and inner.requests[("fetch", "arr/5.0")] == 1


def test_a_listing_from_before_a_refresh_is_not_believed(
    inner: VersionedStore, tmp_path: Path
) -> None:
    cache = DiskCacheStore(inner, str(tmp_path / "c"), MiB, ttl=3600)
    cache.reading_under("arr")
    cache.get("arr/1.0")
    cache.refresh()
    assert cache.get("arr/1.0") == CHUNKS["arr/1.0"]  # stale: listed
    inner.set("arr/1.0", b"new")
    cache.refresh()
    assert cache.get("arr/1.0") == b"new"  # listed again, at its new version
    assert inner.count("versions") == 2


def test_a_store_without_listed_versions_is_asked_entry_by_entry(tmp_path: Path) -> None:
    class Unlisted(VersionedStore):
        def versions(self, prefix: str, most: int) -> dict[str, str] | None:
            self.requests[("versions", prefix)] += 1
            return None

    inner = Unlisted(CHUNKS)
    cache = stale_cache(inner, tmp_path)
    cache.reading_under("arr")
    for key in CHUNKS:
        cache.get(key)
    assert inner.count("unchanged") == len(CHUNKS)
    assert inner.count("versions") == 1  # asked once per TTL, not once per entry


def test_a_failed_listing_falls_back_to_conditional_requests(tmp_path: Path) -> None:
    class Failing(VersionedStore):
        def versions(self, prefix: str, most: int) -> dict[str, str] | None:
            self.requests[("versions", prefix)] += 1
            raise StoreError("listing arr: connection reset")

    inner = Failing(CHUNKS)
    cache = stale_cache(inner, tmp_path)
    cache.reading_under("arr")
    assert all(cache.get(key) == value for key, value in CHUNKS.items())
    assert inner.count("unchanged") == len(CHUNKS) and inner.count("versions") == 1


def test_too_many_keys_are_not_kept(
    inner: VersionedStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cacheversions, "MAX_LISTED", 4)
    cache = stale_cache(inner, tmp_path)
    cache.reading_under("arr")
    assert all(cache.get(key) == value for key, value in CHUNKS.items())
    assert inner.count("unchanged") == len(CHUNKS)


def test_threads_meeting_stale_entries_at_once_share_one_listing(
    inner: VersionedStore, tmp_path: Path
) -> None:
    cache = stale_cache(inner, tmp_path)
    cache.reading_under("arr")
    barrier = threading.Barrier(len(CHUNKS))
    results: dict[str, bytes | None] = {}

    def read(key: str) -> None:
        barrier.wait()
        results[key] = cache.get(key)

    threads = [threading.Thread(target=read, args=(key,)) for key in CHUNKS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == CHUNKS
    assert dict(inner.requests) == {("versions", "arr"): 1}


def test_with_no_ttl_every_entry_is_asked_alone(inner: VersionedStore, tmp_path: Path) -> None:
    # --metadata-ttl 0: each read is checked, and a listing would serve one entry.
    cache = DiskCacheStore(inner, str(tmp_path / "c"), MiB, ttl=0)
    cache.reading_under("arr")
    for _ in range(2):
        for key in CHUNKS:
            cache.get(key)
    assert inner.count("versions") == 0 and inner.count("unchanged") == len(CHUNKS)


def test_the_longest_announced_prefix_holds_a_key() -> None:
    asked: list[str] = []

    def listing(prefix: str, most: int) -> dict[str, str]:
        asked.append(prefix)
        return {"c/0/0": "t1", "0.0": "t2"}

    listed = ListedVersions(listing, ttl=60)
    assert listed.validated_at("g/arr/c/0/0", "t1", 0) is None  # nothing announced
    listed.expect("g")
    listed.expect("g/arr/")
    assert listed.validated_at("g/arr/c/0/0", "t1", 0) is not None
    assert listed.validated_at("g/arr/c/0/0", "t2", 0) is None  # another version
    assert listed.validated_at("g/arr/9.9", "t2", 0) is None  # not listed
    assert asked == ["g/arr"]
    listed.expect("")
    assert listed.validated_at("top", "x", 0) is None
    assert asked == ["g/arr", ""]


def test_prefixes_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cacheversions, "MAX_PREFIXES", 3)
    listed = ListedVersions(lambda prefix, most: {"0": "t"}, ttl=60)
    for name in ("a", "b", "c", "d"):
        listed.expect(name)
    assert listed.validated_at("a/0", "t", 0) is None  # forgotten: the oldest
    assert listed.validated_at("d/0", "t", 0) is not None


def test_at_hand_reads_fresh_entries_and_asks_no_store(
    inner: VersionedStore, tmp_path: Path
) -> None:
    cache = DiskCacheStore(inner, str(tmp_path / "c"), MiB, ttl=TTL)
    cache.get("arr/0.0")
    cache.get_ranges("arr/1.0", [(0, 4)])
    inner.requests.clear()
    with cache.at_hand():
        assert cache.get("arr/0.0") == CHUNKS["arr/0.0"]
        assert cache.get_ranges("arr/1.0", [(0, 4)]) == [CHUNKS["arr/1.0"][:4]]
        for read in (lambda: cache.get("arr/2.0"), lambda: cache.stat("arr/2.0")):
            with pytest.raises(NotAtHand):
                read()
    assert inner.count() == 0
    assert cache.get("arr/2.0") == CHUNKS["arr/2.0"]  # outside: asked as ever


def test_at_hand_a_stale_entry_waits_for_a_listing_asked_elsewhere(
    inner: VersionedStore, tmp_path: Path
) -> None:
    cache = stale_cache(inner, tmp_path)
    cache.reading_under("arr")
    with cache.at_hand(), pytest.raises(NotAtHand):
        cache.get("arr/0.0")  # the listing is not asked here
    assert inner.count() == 0
    assert cache.get("arr/0.0") == CHUNKS["arr/0.0"]  # a fetch thread: one listing
    with cache.at_hand():  # now every other stale entry is checked against it
        assert all(cache.get(key) == value for key, value in CHUNKS.items())
    assert dict(inner.requests) == {("versions", "arr"): 1}


def wait_for_listings(cache: DiskCacheStore, count: int) -> None:
    for _ in range(500):
        if cache.counters()["listings"] >= count:
            return
        time.sleep(0.01)
    raise AssertionError(f"{count} listing(s) never came")


def test_an_arrays_metadata_checked_again_lists_its_chunks_ahead(
    inner: VersionedStore, tmp_path: Path
) -> None:
    """Its own check does not wait for the listing (a conditional request of its
    own, unless the listing came first); the chunks read after it find the listing
    at hand."""
    cache = DiskCacheStore(inner, str(tmp_path / "c"), MiB, ttl=TTL, lists_ahead=array_keys)
    for key in (*CHUNKS, "arr/.zarray"):
        cache.get(key)
    time.sleep(TTL + 0.05)
    inner.requests.clear()
    assert cache.get("arr/.zarray") == b"{}"
    wait_for_listings(cache, 1)
    for key, value in CHUNKS.items():
        assert cache.get(key) == value
    assert inner.requests.pop(("unchanged", "arr/.zarray"), 0) <= 1
    assert dict(inner.requests) == {("versions", "arr"): 1}
    assert cache.stats.listed >= len(CHUNKS)


class HeldListings(VersionedStore):
    """Its listings wait for ``gate`` (at most 10 s)."""

    def __init__(self, values: dict[str, bytes]) -> None:
        super().__init__(values)
        self.gate = threading.Event()

    def versions(self, prefix: str, most: int) -> dict[str, str] | None:
        self.gate.wait(10)
        return super().versions(prefix, most)


@pytest.mark.parametrize(
    ("shape", "waits"),
    [
        ([8, 1], True),  # 8 chunks: one page of the listing checks the document too
        ([2_000_000, 1000], False),  # 2 million: its own request, the listing beside
    ],
)
def test_an_arrays_metadata_is_checked_by_the_listing_where_one_page_of_it_does(
    tmp_path: Path, shape: list[int], waits: bool
) -> None:
    document = f'{{"shape": {shape}, "chunks": [1, 1]}}'.encode()
    inner = HeldListings({**CHUNKS, "arr/.zarray": document})
    inner.gate.set()
    ttl = 1.0  # (the listing must outlive a loaded machine's pauses)
    cache = DiskCacheStore(inner, str(tmp_path / "c"), MiB, ttl=ttl, lists_ahead=array_keys)
    for key in (*CHUNKS, "arr/.zarray"):
        cache.get(key)
    time.sleep(ttl + 0.05)
    inner.requests.clear()
    inner.gate.clear()  # listings held until it opens
    began = time.monotonic()
    if waits:
        threading.Timer(0.1, inner.gate.set).start()
    assert cache.get("arr/.zarray") == document
    took = time.monotonic() - began
    inner.gate.set()
    # Waiting, it returns once the listing came; not waiting, while it is held.
    assert took >= 0.1 if waits else took < 5
    assert inner.count("unchanged") == (0 if waits else 1)
    wait_for_listings(cache, 1)
    for key, value in CHUNKS.items():
        assert cache.get(key) == value
    assert inner.count("versions") == 1
    assert inner.count("fetch") == inner.count("unchanged")  # no value sent again


def test_an_arrays_metadata_changed_is_read_again_after_the_listing(tmp_path: Path) -> None:
    """The listing saw another version of the document: it is asked for alone."""
    old = b'{"shape": [8, 1], "chunks": [1, 1]}'
    inner = VersionedStore({**CHUNKS, "arr/.zarray": old})
    cache = DiskCacheStore(inner, str(tmp_path / "c"), MiB, ttl=TTL, lists_ahead=array_keys)
    cache.get("arr/.zarray")
    new = b'{"shape": [9, 1], "chunks": [1, 1]}'
    inner.set("arr/.zarray", new)
    time.sleep(TTL + 0.05)
    inner.requests.clear()
    assert cache.get("arr/.zarray") == new
    assert inner.count("versions") == 1


def test_a_groups_metadata_checked_again_lists_nothing(tmp_path: Path) -> None:
    inner = VersionedStore({"g/zarr.json": b'{"zarr_format": 3, "node_type": "group"}'})
    cache = DiskCacheStore(inner, str(tmp_path / "c"), MiB, ttl=TTL, lists_ahead=array_keys)
    cache.get("g/zarr.json")
    time.sleep(TTL + 0.05)
    assert cache.get("g/zarr.json") is not None
    time.sleep(0.1)
    assert inner.count("versions") == 0 and inner.count("unchanged") == 1


def test_listings_asked_ahead_are_bounded(tmp_path: Path) -> None:
    """A listing that never ends holds its thread: past MAX_LISTING_AHEAD of them
    no other is asked ahead (each array's first stale chunk asks for its own)."""
    gate = threading.Event()

    class Slow(VersionedStore):
        def versions(self, prefix: str, most: int) -> dict[str, str] | None:
            self.requests[("versions", prefix)] += 1
            gate.wait(10)
            return super().versions(prefix, most)

    arrays = [f"a{i}" for i in range(cacheversions.MAX_LISTING_AHEAD + 3)]
    inner = Slow({f"{name}/.zarray": b"{}" for name in arrays})
    cache = DiskCacheStore(inner, str(tmp_path / "c"), MiB, ttl=TTL, lists_ahead=array_keys)
    for name in arrays:
        cache.get(f"{name}/.zarray")
    time.sleep(TTL + 0.05)
    try:
        for name in arrays:
            cache.get(f"{name}/.zarray")
        time.sleep(0.2)
        assert inner.count("versions") == cacheversions.MAX_LISTING_AHEAD
    finally:
        gate.set()
    wait_for_listings(cache, cacheversions.MAX_LISTING_AHEAD)
