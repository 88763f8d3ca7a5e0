"""Ranged reads: ``get_range``, ``get_ranges`` and ``size`` of the Store contract.

Zarr v3 sharding reads a shard's index (a range at its start, or a suffix range
at its end) and then one inner chunk's range, never the whole shard. The generic
version in ``Store`` (whole value read, then sliced) and DirectoryStore's native
one (one safe open, then pread) must agree exactly. Decisions pinned down here:

- [start, start + length), fewer bytes (or none) past the value's end, like pread;
- a negative ``start`` counts from the end: the range [size + start, size + start
  + length) cut to the value, so (-n, n) is the last n bytes, or the whole value
  when it is shorter (an HTTP suffix range);
- ``None`` for a missing key (or a directory), as ``get``;
- a negative length or a non-integer is a ``ValueError``, a range (or the ranges
  of one call together) over ``RANGE_LIMIT`` an ``InvalidValueError``, both before
  the store is touched;
- a symlinked key and a FIFO are refused as by ``get`` (at once, never blocking).
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.mounting import memory_cap
from tests.support.stores import CountingStore, run_promptly
from zarrfs.errors import InvalidValueError
from zarrfs.stores import directory
from zarrfs.stores.base import RANGE_LIMIT, Listing, Store
from zarrfs.stores.directory import DirectoryStore

VALUE = b"0123456789"


class MemoryStore(Store):
    """The smallest Store: everything ranged comes from the base class defaults."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}

    def get(self, key: str, *, limit: int | None = None) -> bytes | None:
        value = self.values.get(key)
        if value is not None and limit is not None and len(value) > limit:
            raise InvalidValueError(f"{key!r}: more than {limit} bytes")
        return value

    def contains(self, key: str) -> bool:
        return key in self.values

    def list_dir(self, prefix: str) -> Listing:
        start = f"{prefix}/" if prefix else ""
        rest = [k[len(start) :] for k in self.values if k.startswith(start)]
        keys = sorted(r for r in rest if "/" not in r)
        prefixes = sorted({r.split("/")[0] for r in rest if "/" in r})
        return Listing(tuple(keys), tuple(prefixes))

    def set(self, key: str, value: bytes, *, durable: bool = True) -> None:
        self.values[key] = bytes(value)

    def delete(self, key: str, *, durable: bool = True) -> None:
        self.values.pop(key, None)

    def mtime(self, key: str) -> float | None:
        return 0.0 if key in self.values else None


def reference(value: bytes, start: int, length: int) -> bytes:
    """The contract spelled out byte by byte, independent of ``resolve_range``."""
    first = start if start >= 0 else len(value) + start
    return bytes(value[i] for i in range(first, first + length) if 0 <= i < len(value))


MakeStore = Callable[[dict[str, bytes]], Store]


@pytest.fixture(params=["memory", "openat2", "walk"])
def make_store(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[MakeStore]:
    """A store holding the given values: the base class defaults (memory), or a
    DirectoryStore with openat2 or with the fallback walk."""
    if request.param == "walk":
        monkeypatch.setattr(directory, "openat2_works", lambda fd: False)
    opened: list[DirectoryStore] = []

    def make(values: dict[str, bytes]) -> Store:
        if request.param == "memory":
            store = MemoryStore()
            for key, value in values.items():
                store.set(key, value)
            return store
        root = tmp_path / "store"
        for key, value in values.items():
            (root / key).parent.mkdir(parents=True, exist_ok=True)
            (root / key).write_bytes(value)
        root.mkdir(exist_ok=True)
        directory_store = DirectoryStore(str(root))
        if request.param == "openat2":
            assert directory_store._resolve is directory.openat2, "openat2 unavailable"
        opened.append(directory_store)
        return directory_store

    yield make
    for store in opened:
        store.close()


# -- the contract, case by case --------------------------------------------------------

CASES = [
    # (start, length, expected of VALUE)
    pytest.param(0, 4, b"0123", id="start"),
    pytest.param(3, 4, b"3456", id="middle"),
    pytest.param(6, 4, b"6789", id="end"),
    pytest.param(0, 10, VALUE, id="whole"),
    pytest.param(8, 4, b"89", id="past-the-end"),
    pytest.param(0, 1000, VALUE, id="longer-than-value"),
    pytest.param(10, 4, b"", id="at-the-end"),
    pytest.param(100, 4, b"", id="beyond-the-end"),
    pytest.param(0, 0, b"", id="zero-length"),
    pytest.param(5, 0, b"", id="zero-length-middle"),
    pytest.param(-3, 0, b"", id="zero-length-suffix"),
    pytest.param(-4, 4, b"6789", id="suffix"),
    pytest.param(-10, 10, VALUE, id="suffix-whole"),
    pytest.param(-20, 20, VALUE, id="suffix-longer-than-value"),
    pytest.param(-4, 2, b"67", id="from-the-end"),
    pytest.param(-4, 10, b"6789", id="from-the-end-past-it"),
    pytest.param(-20, 12, b"01", id="before-the-start-cut"),
    pytest.param(-20, 5, b"", id="wholly-before-the-start"),
]


@pytest.mark.parametrize(("start", "length", "expected"), CASES)
def test_get_range(make_store: MakeStore, start: int, length: int, expected: bytes) -> None:
    store = make_store({"a/0": VALUE, "empty": b""})
    assert reference(VALUE, start, length) == expected  # the table agrees with the rule
    assert store.get_range("a/0", start, length) == expected
    assert store.get_ranges("a/0", [(start, length)]) == [expected]
    assert store.get_range("empty", start, length) == b""


def test_several_ranges_in_one_call(make_store: MakeStore) -> None:
    store = make_store({"a/0": VALUE})
    ranges = [(0, 2), (-2, 2), (4, 3), (50, 1), (3, 0), (0, 2)]
    assert store.get_ranges("a/0", ranges) == [b"01", b"89", b"456", b"", b"", b"01"]
    assert store.get_ranges("a/0", []) == []


def test_missing_keys_and_directories_are_none(make_store: MakeStore) -> None:
    store = make_store({"a/0": VALUE})
    for key in ("missing", "a/missing", "missing/0", "a"):
        assert store.get_range(key, 0, 4) is None, key
        assert store.get_range(key, -4, 4) is None, key
        assert store.get_ranges(key, [(0, 1), (-1, 1)]) is None, key
        assert store.get_ranges(key, []) is None, key
        assert store.size(key) is None, key
    assert store.size("a/0") == len(VALUE)


@pytest.mark.parametrize(
    ("start", "length", "error"),
    [
        pytest.param(0, -1, ValueError, id="negative-length"),
        pytest.param(-4, -4, ValueError, id="negative-suffix-length"),
        pytest.param(1.5, 2, ValueError, id="float-start"),
        pytest.param(0, 2.0, ValueError, id="float-length"),
        pytest.param(True, 1, ValueError, id="bool-start"),
        pytest.param(None, 1, ValueError, id="none-start"),
        pytest.param(1 << 63, 1, ValueError, id="start-beyond-int64"),
        pytest.param(-(1 << 63), 1, ValueError, id="negative-start-beyond-int64"),
        pytest.param((1 << 63) - 2, 5, ValueError, id="end-beyond-int64"),
        pytest.param(0, RANGE_LIMIT + 1, InvalidValueError, id="over-the-cap"),
        pytest.param(-(1 << 40), 1 << 40, InvalidValueError, id="suffix-over-the-cap"),
    ],
)
def test_absurd_ranges_are_refused_before_the_store_is_touched(
    make_store: MakeStore, start: Any, length: Any, error: type[Exception]
) -> None:
    store = make_store({"a/0": VALUE})
    for key in ("a/0", "missing"):
        with pytest.raises(error):
            store.get_range(key, start, length)
        with pytest.raises(error):
            store.get_ranges(key, [(0, 1), (start, length)])


def test_the_cap_is_on_all_ranges_of_one_call(make_store: MakeStore) -> None:
    store = make_store({"a/0": VALUE})
    half = RANGE_LIMIT // 2
    assert store.get_ranges("a/0", [(0, half), (-half, half)]) == [VALUE, VALUE]
    with pytest.raises(InvalidValueError, match="more than"):
        store.get_ranges("a/0", [(0, half), (-half, half), (0, 1)])
    assert store.get_range("a/0", 0, RANGE_LIMIT) == VALUE  # the cap itself is allowed


# -- random values and ranges ----------------------------------------------------------

_RANGES = st.lists(
    st.tuples(st.integers(-3000, 3000), st.integers(0, 3000)), min_size=0, max_size=6
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=st.binary(max_size=2500), ranges=_RANGES)
def test_ranges_are_slices_of_the_value(value: bytes, ranges: list[tuple[int, int]]) -> None:
    """Base class default and DirectoryStore (both resolvers) equal slicing ``get``."""
    expected = [reference(value, start, length) for start, length in ranges]
    memory = MemoryStore()
    memory.set("k", value)
    assert memory.get_ranges("k", ranges) == expected
    assert [memory.get_range("k", s, n) for s, n in ranges] == expected
    for walk in (False, True):
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "d").mkdir()
            (Path(tmp) / "d" / "k").write_bytes(value)
            store = DirectoryStore(tmp)
            if walk:
                store._resolve = store._walk
            try:
                assert store.get("d/k") == value
                assert store.get_ranges("d/k", ranges) == expected
                assert [store.get_range("d/k", s, n) for s, n in ranges] == expected
                assert store.size("d/k") == len(value)
            finally:
                store.close()


# -- DirectoryStore: native, safe ------------------------------------------------------


@pytest.fixture(params=["openat2", "walk"])
def open_store(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[Path], DirectoryStore]]:
    if request.param == "walk":
        monkeypatch.setattr(directory, "openat2_works", lambda fd: False)
    stores: list[DirectoryStore] = []

    def make(root: Path) -> DirectoryStore:
        store = DirectoryStore(str(root))
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


def test_one_open_and_only_the_ranges_read(
    tmp_path: Path, open_store: Callable[[Path], DirectoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large sparse shard: a suffix range needs no read of what comes before it,
    and several ranges share one resolution of the key."""
    root = tmp_path / "store"
    root.mkdir()
    with open(root / "shard", "wb") as f:
        f.truncate(1 << 30)  # sparse: no disk, and reading it whole would take 1 GiB
        f.seek((1 << 30) - 4)
        f.write(b"tail")
    store = open_store(root)
    resolves: list[str] = []
    real_resolve = store._resolve

    def resolve(dir_fd: int, path: str, flags: int) -> int:
        resolves.append(path)
        return real_resolve(dir_fd, path, flags)

    store._resolve = resolve
    read: list[int] = []
    real_pread = os.pread

    def pread(fd: int, n: int, offset: int) -> bytes:
        read.append(n)
        return real_pread(fd, n, offset)

    monkeypatch.setattr(os, "pread", pread)
    monkeypatch.setattr(os, "read", lambda fd, n: pytest.fail("a whole read"))
    with memory_cap(256 << 20):
        assert store.get_range("shard", -4, 4) == b"tail"
        assert store.get_ranges("shard", [(-4, 4), (0, 3), (1 << 29, 2)]) == [
            b"tail",
            b"\0" * 3,
            b"\0" * 2,
        ]
        assert store.size("shard") == 1 << 30
    assert resolves == ["shard", "shard", "shard"]
    assert read == [4, 4, 3, 2]


def test_a_range_past_the_end_allocates_nothing_of_its_length(
    tmp_path: Path, open_store: Callable[[Path], DirectoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The length asked for is cut to the file before pread allocates it."""
    root = tmp_path / "store"
    root.mkdir()
    (root / "0").write_bytes(VALUE)
    store = open_store(root)
    asked: list[int] = []
    real_pread = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, o: asked.append(n) or real_pread(fd, n, o))
    assert store.get_range("0", 2, RANGE_LIMIT) == VALUE[2:]
    assert store.get_range("0", 50, RANGE_LIMIT) == b""
    assert asked == [8]


def test_symlinked_keys_are_refused_and_their_targets_not_read(
    tmp_path: Path, open_store: Callable[[Path], DirectoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "0").write_bytes(b"secret")
    root = tmp_path / "store"
    (root / "a").mkdir(parents=True)
    (root / "a" / "ok").write_bytes(VALUE)
    (root / "a" / "0").symlink_to(outside / "0")
    (root / "link").symlink_to(outside)
    store = open_store(root)
    opened: list[str] = []
    real_pread = os.pread

    def pread(fd: int, n: int, offset: int) -> bytes:
        opened.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real_pread(fd, n, offset)

    monkeypatch.setattr(os, "pread", pread)
    for key in ("a/0", "link/0"):
        with pytest.raises(InvalidValueError, match="symbolic link"):
            store.get_range(key, 0, 4)
        with pytest.raises(InvalidValueError, match="symbolic link"):
            store.get_range(key, -4, 4)
        with pytest.raises(InvalidValueError, match="symbolic link"):
            store.get_ranges(key, [(0, 1), (-1, 1)])
        with pytest.raises(InvalidValueError, match="symbolic link"):
            store.size(key)
    assert str(outside / "0") not in opened
    assert store.get_range("a/ok", -3, 3) == b"789", "the rest of the store is served"


def test_a_fifo_is_refused_at_once(
    tmp_path: Path, open_store: Callable[[Path], DirectoryStore]
) -> None:
    root = tmp_path / "store"
    root.mkdir()
    fifo = root / "0"
    os.mkfifo(fifo)
    store = open_store(root)
    calls: list[Callable[[], Any]] = [
        lambda: store.get_range("0", 0, 4),
        lambda: store.get_range("0", -4, 4),
        lambda: store.get_ranges("0", [(0, 4)]),
        lambda: store.size("0"),
    ]
    try:
        results = [run_promptly(call) for call in calls]
    finally:
        # Release a reader that blocked in open (a regression), if any.
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError as e:
            assert e.errno == errno.ENXIO  # no reader: nothing blocked
    for result in results:
        assert isinstance(result, InvalidValueError), result
        assert "FIFO" in str(result) and "'0'" in str(result)


# -- CountingStore ---------------------------------------------------------------------


def test_counting_store_records_ranges(tmp_path: Path) -> None:
    """What a sharded read must show: the index's range and one chunk's, no whole get."""
    root = tmp_path / "store"
    (root / "c").mkdir(parents=True)
    shard = b"chunk-0|chunk-1|" + b"INDEX..."
    (root / "c" / "0").write_bytes(shard)
    (root / "zarr.json").write_bytes(b"{}")
    store = CountingStore(str(root))
    try:
        assert store.get_range("c/0", -8, 8) == b"INDEX..."
        assert store.get_ranges("c/0", [(8, 8)]) == [b"chunk-1|"]
        assert store.get_range("missing", 0, 1) is None
        assert store.size("c/0") == len(shard)
        assert store.ranges == [("c/0", -8, 8), ("c/0", 8, 8), ("missing", 0, 1)]
        assert store.range_calls == {"c/0": 2, "missing": 1}
        assert store.sizes == {"c/0": 1}
        assert store.gets["c/0"] == 0, "never the whole shard"
        # The older counters still count what they did.
        assert store.get("zarr.json") == b"{}"
        store.list_dir("c")
        assert store.gets == {"zarr.json": 1}
        assert store.lists == {"c": 1}
    finally:
        store.close()
