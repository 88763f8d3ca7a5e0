"""The read-only wrapper: reads reach the store, every write and the clean-up of
temporary files are refused before they touch it."""

from __future__ import annotations

from pathlib import Path

import pytest

from zarrfs.errors import ReadOnlyError
from zarrfs.stores.directory import DirectoryStore
from zarrfs.stores.readonly import ReadOnlyStore


@pytest.fixture
def wrapped(tmp_path: Path) -> tuple[ReadOnlyStore, Path]:
    inner = DirectoryStore(str(tmp_path))
    inner.set("a/.zarray", b"{}")
    inner.set("a/0", b"0123456789")
    return ReadOnlyStore(inner), tmp_path


def test_reads_pass_through(wrapped: tuple[ReadOnlyStore, Path]) -> None:
    store, _ = wrapped
    assert store.get("a/0") == b"0123456789"
    assert store.get_range("a/0", 2, 3) == b"234"
    assert store.get_ranges("a/0", [(0, 1), (9, 1)]) == [b"0", b"9"]
    assert store.size("a/0") == 10 and store.contains("a/.zarray")
    assert store.list_dir("a/").keys == (".zarray", "0")
    assert dict(store.scan("a/")) == {".zarray": 2, "0": 10}
    assert store.describe() == store.inner.describe()


def test_every_write_is_refused_and_the_store_is_unchanged(
    wrapped: tuple[ReadOnlyStore, Path],
) -> None:
    store, root = wrapped
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    for write in (
        lambda: store.set("a/0", b"x"),
        lambda: store.stage("a/1", b"x"),
        lambda: store.commit([]),
        lambda: store.delete("a/0"),
        lambda: store.cleanup(0.0),
    ):
        with pytest.raises(ReadOnlyError, match="read-only"):
            write()
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before
    assert (root / "a" / "0").read_bytes() == b"0123456789"
