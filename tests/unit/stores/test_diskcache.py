"""The disk cache wrapper over a store that counts its requests (tests/support/
versioned.py): hits need no request, stale entries are revalidated conditionally,
corrupt and truncated files are dropped and read again, the size bound holds with
the least recently used files evicted, and wrappers sharing a directory (mounts of
one machine) see each other's files and survive each other's evictions."""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from tests.support.versioned import VersionedStore
from zarrfs.daemon.build import MountOptions, _cached
from zarrfs.errors import InvalidValueError, StoreError
from zarrfs.stores import cachedir
from zarrfs.stores.base import UNCHANGED
from zarrfs.stores.directory import DirectoryStore
from zarrfs.stores.diskcache import DiskCacheStore

MiB = 1 << 20


def cache_files(directory: Path) -> list[Path]:
    return sorted(p for p in (directory / "objects").rglob("*") if p.is_file())


@pytest.fixture
def inner() -> VersionedStore:
    return VersionedStore({"a/0": b"0123456789", "a/1": bytes(range(200)), "b/.zarray": b"{}"})


def test_a_second_read_sends_no_request(inner: VersionedStore, tmp_path: Path) -> None:
    cache = DiskCacheStore(inner, str(tmp_path / "c"), MiB)
    assert cache.get("a/0") == b"0123456789"
    assert inner.count() == 1
    assert cache.get("a/0") == b"0123456789"
    assert cache.get_buffer("a/0") == b"0123456789"
    assert inner.count() == 1
    assert cache.stats.hits == 2 and cache.stats.misses == 1


def test_ranges_sizes_and_missing_keys_are_cached_too(
    inner: VersionedStore, tmp_path: Path
) -> None:
    cache = DiskCacheStore(inner, str(tmp_path / "c"), MiB)
    for _ in range(3):
        assert cache.get_range("a/1", 10, 5) == bytes(range(10, 15))
        assert cache.get_range("a/1", -4, 4) == bytes(range(196, 200))
        assert cache.size("a/1") == 200
        assert cache.get("nope") is None
        assert cache.get_range("nope", 0, 4) is None
    assert inner.count() == 4  # two ranges, one stat, one missing key


def test_a_tail_with_its_size_is_one_entry(inner: VersionedStore, tmp_path: Path) -> None:
    cache = DiskCacheStore(inner, str(tmp_path / "c"), MiB)
    for _ in range(3):
        data, size = cache.get_tail("a/1", 4) or (b"", 0)
        assert (bytes(data), size) == (bytes(range(196, 200)), 200)
        assert cache.get_tail("nope", 4) is None
    # One ranged read of the tail, one of the missing key; nothing asked for the size.
    assert inner.count() == 2, inner.requests


def test_a_whole_value_cached_answers_its_ranges(inner: VersionedStore, tmp_path: Path) -> None:
    cache = DiskCacheStore(inner, str(tmp_path / "c"), MiB)
    cache.get("a/1")
    assert cache.get_ranges("a/1", [(0, 2), (-2, 2), (300, 5)]) == [b"\0\1", b"\xc6\xc7", b""]
    assert cache.stat("a/1") is not None and cache.size("a/1") == 200
    assert inner.count() == 1


def test_after_the_ttl_an_entry_is_revalidated_by_a_conditional_request(
    inner: VersionedStore, tmp_path: Path
) -> None:
    cache = DiskCacheStore(inner, str(tmp_path / "c"), MiB, ttl=0.2)
    cache.get("a/0")
    cache.get_range("a/1", 0, 8)
    time.sleep(0.25)
    assert cache.get("a/0") == b"0123456789"  # unchanged: kept, no body
    assert cache.get_range("a/1", 0, 8) == bytes(range(8))
    assert inner.count("unchanged") == 2
    assert cache.stats.unchanged == 2
    # re-stamped: valid again for another ttl
    assert cache.get("a/0") == b"0123456789" and cache.get_range("a/1", 0, 8) == bytes(range(8))
    assert inner.count("fetch") + inner.count("ranges") == 4


def test_a_changed_value_is_read_again_after_the_ttl(inner: VersionedStore, tmp_path: Path) -> None:
    cache = DiskCacheStore(inner, str(tmp_path / "c"), MiB, ttl=0.2)
    assert cache.get("a/0") == b"0123456789"
    inner.set("a/0", b"new")
    assert cache.get("a/0") == b"0123456789"  # within the ttl: as cached
    time.sleep(0.25)
    assert cache.get("a/0") == b"new"
    assert inner.count("unchanged") == 0
    assert cache.get("a/0") == b"new" and inner.count("fetch") == 2


def test_refresh_makes_every_entry_stale(inner: VersionedStore, tmp_path: Path) -> None:
    cache = DiskCacheStore(inner, str(tmp_path / "c"), MiB, ttl=3600)
    cache.get("a/0")
    inner.set("a/0", b"new")
    assert cache.get("a/0") == b"0123456789"
    cache.refresh()
    assert cache.get("a/0") == b"new"


def test_unchanged_is_answered_to_a_caller_naming_the_cached_version(
    inner: VersionedStore, tmp_path: Path
) -> None:
    cache = DiskCacheStore(inner, str(tmp_path / "c"), MiB)
    found = cache.fetch("a/0")
    assert found is not None and found.version is not None
    assert cache.fetch("a/0", unless=found.version) is UNCHANGED
    ranges = cache.fetch_ranges("a/1", [(0, 4)])
    assert ranges is not None
    assert cache.fetch_ranges("a/1", [(0, 4)], unless=ranges[1]) is UNCHANGED
    assert inner.count() == 2


def corrupt(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: corrupt(p, -40),  # a byte of the value
        lambda p: corrupt(p, 20),  # a byte of the header
        lambda p: corrupt(p, -1),  # the checksum
        lambda p: os.truncate(p, p.stat().st_size - 5),
        lambda p: os.truncate(p, 10),
        lambda p: os.truncate(p, 0),
        lambda p: p.write_bytes(p.read_bytes() + b"more"),
    ],
    ids=["value", "header", "checksum", "cut", "cut-in-header", "empty", "longer"],
)
def test_a_damaged_file_is_dropped_and_the_value_read_again(
    inner: VersionedStore, tmp_path: Path, damage: object
) -> None:
    inner.set("k", bytes(range(100)))
    cache = DiskCacheStore(inner, str(tmp_path / "c"), MiB)
    cache.get("k")
    [path] = cache_files(tmp_path / "c")
    damage(path)  # type: ignore[operator]
    assert cache.get("k") == bytes(range(100))
    assert inner.count("fetch") == 2 and cache.stats.dropped == 1
    assert cache.get("k") == bytes(range(100)) and inner.count("fetch") == 2  # cached again


def test_a_file_of_another_key_in_its_place_is_never_served(
    inner: VersionedStore, tmp_path: Path
) -> None:
    cache = DiskCacheStore(inner, str(tmp_path / "c"), MiB)
    cache.get("a/0")
    cache.get("b/.zarray")
    first, second = cache_files(tmp_path / "c")
    os.replace(first, second)
    assert cache.get("a/0") == b"0123456789" and cache.get("b/.zarray") == b"{}"


def test_the_size_bound_evicts_the_least_recently_used(tmp_path: Path) -> None:
    inner = VersionedStore({f"k{i}": bytes([i]) * 100_000 for i in range(30)})
    cache = DiskCacheStore(inner, str(tmp_path / "c"), MiB)
    for i in range(8):
        cache.get(f"k{i}")
    time.sleep(1.1)  # uses are stamped at most once a second
    cache.get("k0")  # used again: newer than k1..k7
    # the 11th file of 100 kB takes the total past 1 MiB: down to 0.9 MiB (9 files)
    for i in range(8, 12):
        cache.get(f"k{i}")
    total = sum(p.stat().st_size for p in cache_files(tmp_path / "c"))
    assert total <= MiB
    assert cache.files.evicted == 2
    before = inner.count()
    for i in (0, *range(3, 12)):
        cache.get(f"k{i}")
    assert inner.count() == before  # the recently used stayed
    cache.get("k1")
    assert inner.count() == before + 1  # the least recently used went


def test_two_wrappers_share_a_directory_and_its_bound(tmp_path: Path) -> None:
    inner = VersionedStore({f"k{i}": bytes([i]) * 100_000 for i in range(40)})
    one = DiskCacheStore(inner, str(tmp_path / "c"), MiB)
    two = DiskCacheStore(inner, str(tmp_path / "c"), MiB)
    assert one.get("k0") == two.get("k0")
    assert inner.count() == 1  # the second found the first's file
    for i in range(1, 40):
        (one if i % 2 else two).get(f"k{i}")
    assert sum(p.stat().st_size for p in cache_files(tmp_path / "c")) <= MiB


def test_an_eviction_racing_reads_never_fails_or_corrupts_them(tmp_path: Path) -> None:
    values = {f"k{i}": bytes([i]) * 50_000 for i in range(60)}
    inner = VersionedStore(values)
    caches = [DiskCacheStore(inner, str(tmp_path / "c"), MiB) for _ in range(3)]
    errors: list[BaseException] = []

    def reader(cache: DiskCacheStore, seed: int) -> None:
        try:
            for n in range(300):
                key = f"k{(seed * 7 + n * 13) % 60}"
                assert cache.get(key) == values[key]
                assert cache.get_range(key, 100, 10) == values[key][100:110]
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(caches[i % 3], i)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert sum(c.files.evicted for c in caches) > 0
    assert sum(p.stat().st_size for p in cache_files(tmp_path / "c")) <= MiB
    assert not list((tmp_path / "c" / "tmp").iterdir())


def test_writes_go_through_and_drop_the_keys_entries(inner: VersionedStore, tmp_path: Path) -> None:
    cache = DiskCacheStore(inner, str(tmp_path / "c"), MiB, ttl=3600)
    cache.get("a/0")
    cache.get_range("a/0", 0, 2)
    cache.set("a/0", b"written")
    assert cache.get("a/0") == b"written" and cache.get_range("a/0", 0, 2) == b"wr"
    cache.commit([cache.stage("a/0", [b"sta", b"ged"])])
    assert cache.get("a/0") == b"staged"
    cache.delete("a/0")
    assert cache.get("a/0") is None and inner.get("a/0") is None


def test_the_directory_is_private(inner: VersionedStore, tmp_path: Path) -> None:
    directory = tmp_path / "c"
    directory.mkdir(mode=0o755)
    cache = DiskCacheStore(inner, str(directory), MiB)
    cache.get("a/0")
    cache.get_range("a/1", 0, 1)
    for path in [directory, *directory.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))


def test_a_directory_that_is_no_directory_is_refused(inner: VersionedStore, tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(StoreError):
        DiskCacheStore(inner, str(tmp_path / "file"), MiB)


def test_a_full_disk_never_fails_a_read(
    inner: VersionedStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = DiskCacheStore(inner, str(tmp_path / "c"), MiB)

    def full(fd: int, data: object) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(cachedir.os, "write", full)
    for _ in range(3):
        assert cache.get("a/0") == b"0123456789"
        assert cache.get_range("a/1", 0, 2) == b"\0\1"
    assert not cache_files(tmp_path / "c") and not list((tmp_path / "c" / "tmp").iterdir())
    assert cache.files.full == 1  # then it stopped trying for a while
    monkeypatch.undo()
    cache.files._paused_until = 0.0
    cache.get("a/0")
    assert cache_files(tmp_path / "c")


def test_a_value_over_the_limit_is_refused_from_the_cache_too(
    inner: VersionedStore, tmp_path: Path
) -> None:
    cache = DiskCacheStore(inner, str(tmp_path / "c"), MiB)
    cache.get("a/1")
    with pytest.raises(InvalidValueError):
        cache.get("a/1", limit=100)
    assert cache.get("a/1", limit=200) == bytes(range(200))


def test_a_read_begun_before_a_write_does_not_cache_the_old_value(
    inner: VersionedStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = DiskCacheStore(inner, str(tmp_path / "c"), MiB, ttl=3600)
    fetch = inner.fetch

    def slow_fetch(key: str, **kw: object) -> object:
        found = fetch(key, **kw)  # type: ignore[arg-type]
        inner.set(key, b"newer")  # a write lands while the old value travels
        cache._forget(key)
        return found

    monkeypatch.setattr(inner, "fetch", slow_fetch)
    assert cache.get("a/0") == b"0123456789"
    monkeypatch.undo()
    assert cache.get("a/0") == b"newer"


def test_a_local_store_is_not_cached(tmp_path: Path) -> None:
    store = DirectoryStore(str(tmp_path))
    options = MountOptions(disk_cache=str(tmp_path / "c"))
    assert _cached(store, options) is store
    assert not (tmp_path / "c").exists()
    assert isinstance(_cached(VersionedStore(), options), DiskCacheStore)


def test_it_serves_locally_while_most_reads_are_answered_from_its_files(
    tmp_path: Path,
) -> None:
    inner = VersionedStore({f"k{n}": bytes([n]) * 10 for n in range(10)})
    cache = DiskCacheStore(inner, str(tmp_path / "c"), MiB)
    assert inner.remote and cache.serves_locally() is False  # nothing read yet
    for n in range(3):
        cache.get(f"k{n}")  # misses: each value comes from the store
    assert cache.serves_locally() is False
    for _ in range(16):
        cache.get("k0")  # hits
    assert cache.serves_locally() is True
    for n in range(3, 7):
        cache.get(f"k{n}")  # 4 of the last 16 reads asked the store: still 3/4
    assert cache.serves_locally() is True
    cache.get("nope")  # a key found missing brings no value: it counts for neither
    assert cache.serves_locally() is True
    cache.get("k7")  # more than a quarter of the recent reads ask the store
    assert cache.serves_locally() is False
