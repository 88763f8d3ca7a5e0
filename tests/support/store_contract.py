"""The Store contract (zarrfs/stores/base.py) as one test class every store runs.

A store's test module subclasses ``StoreContract`` and provides the ``make_store``
fixture: a callable that builds a store holding the given values (keys are
"/"-separated paths) and returns it. ``WRITABLE`` says whether writes are part of
the store's contract (a read-only store must refuse them with ReadOnlyError).

    class TestZipStore(StoreContract):
        WRITABLE = False

        @pytest.fixture
        def make_store(self, tmp_path): ...
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from zarrfs.errors import InvalidValueError, ReadOnlyError
from zarrfs.stores.base import RANGE_LIMIT, Store

MakeStore = Callable[[dict[str, bytes]], Store]

VALUES = {
    ".zgroup": b'{"zarr_format": 2}',
    "a/.zarray": b"{}",
    "a/0.0": bytes(range(256)) * 4,
    "a/0.1": b"",
    "a/b/c/deep": b"x",
    "z.json": b"0123456789",
}

RANGES = [
    ((0, 4), b"0123"),
    ((6, 4), b"6789"),
    ((8, 4), b"89"),
    ((100, 4), b""),
    ((0, 0), b""),
    ((-4, 4), b"6789"),
    ((-20, 20), b"0123456789"),
    ((-4, 2), b"67"),
    ((-20, 12), b"01"),
]


class StoreContract:
    WRITABLE = True

    def test_get(self, make_store: MakeStore) -> None:
        store = make_store(VALUES)
        for key, value in VALUES.items():
            assert store.get(key) == value, key
        assert store.get("missing") is None
        assert store.get("a/missing") is None
        assert store.get("a") is None  # a prefix is no value

    def test_get_limit(self, make_store: MakeStore) -> None:
        store = make_store(VALUES)
        assert store.get("a/0.0", limit=1024) == VALUES["a/0.0"]
        with pytest.raises(InvalidValueError):
            store.get("a/0.0", limit=1023)

    @pytest.mark.parametrize(("window", "expected"), RANGES)
    def test_get_range(
        self, make_store: MakeStore, window: tuple[int, int], expected: bytes
    ) -> None:
        store = make_store(VALUES)
        assert store.get_range("z.json", *window) == expected
        assert store.get_range("missing", *window) is None

    def test_get_ranges(self, make_store: MakeStore) -> None:
        store = make_store(VALUES)
        windows = [w for w, _ in RANGES]
        assert store.get_ranges("z.json", windows) == [e for _, e in RANGES]
        assert store.get_ranges("missing", windows) is None
        with pytest.raises(InvalidValueError):
            store.get_ranges("z.json", [(0, RANGE_LIMIT), (0, 1)])
        with pytest.raises(ValueError):
            store.get_range("z.json", 0, -1)

    @pytest.mark.parametrize("length", [0, 1, 4, 10, 20])
    def test_get_tail(self, make_store: MakeStore, length: int) -> None:
        """The last bytes and the size (a shard index at its end), of any value."""
        store = make_store(VALUES)
        value = VALUES["z.json"]
        assert store.get_tail("z.json", length) == (value[len(value) - length :], len(value))
        assert store.get_tail("a/0.1", length) == (b"", 0)
        assert store.get_tail("missing", length) is None
        with pytest.raises(InvalidValueError):
            store.get_tail("z.json", RANGE_LIMIT + 1)

    def test_size_and_contains(self, make_store: MakeStore) -> None:
        store = make_store(VALUES)
        for key, value in VALUES.items():
            assert store.size(key) == len(value), key
            assert store.contains(key), key
        assert store.size("missing") is None and not store.contains("missing")
        assert not store.contains("a")

    def test_list_dir(self, make_store: MakeStore) -> None:
        store = make_store(VALUES)
        root = store.list_dir("")
        assert sorted(root.keys) == [".zgroup", "z.json"]
        assert sorted(root.prefixes) == ["a"]
        a = store.list_dir("a")
        assert sorted(a.keys) == [".zarray", "0.0", "0.1"] and sorted(a.prefixes) == ["b"]
        assert store.list_dir("a/b/c").keys == ("deep",)
        missing = store.list_dir("nothing")
        assert not missing.keys and not missing.prefixes

    def test_scan(self, make_store: MakeStore) -> None:
        store = make_store(VALUES)
        found = dict(store.scan("a"))
        assert found == {
            ".zarray": 2,
            "0.0": 1024,
            "0.1": 0,
            "b/c/deep": 1,
        }

    def test_writes(self, make_store: MakeStore) -> None:
        store = make_store(VALUES)
        if not self.WRITABLE:
            for write in (
                lambda: store.set("a/0.0", b"new"),
                lambda: store.delete("a/0.0"),
                lambda: store.commit([store.stage("a/0.0", b"new")]),
            ):
                with pytest.raises(ReadOnlyError):
                    write()
            assert store.get("a/0.0") == VALUES["a/0.0"]
            return
        store.set("a/0.0", b"new")
        assert store.get("a/0.0") == b"new"
        store.set("n/e/w", b"deep")
        assert store.get("n/e/w") == b"deep" and "n" in store.list_dir("").prefixes
        staged = [store.stage("a/0.1", b"one"), store.stage("x", [b"tw", b"o"])]
        store.commit(staged)
        store.sync(["a/0.1", "x"])
        assert store.get("a/0.1") == b"one" and store.get("x") == b"two"
        store.delete("a/0.0")
        store.delete("a/0.0")  # missing: no error
        assert store.get("a/0.0") is None
        assert "0.0" not in store.list_dir("a").keys

    def test_mtime(self, make_store: MakeStore) -> None:
        store = make_store(VALUES)
        assert store.mtime("missing") is None
        stamp = store.mtime("z.json")
        assert stamp is None or stamp > 0
