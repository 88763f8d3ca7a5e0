"""The directory store stays inside its root and reads only regular files (no mount).

Every key is resolved beneath the root without following a symlink or crossing a
mount point (``openat2`` with RESOLVE_* flags, or a component-by-component
``O_NOFOLLOW`` walk where openat2 is missing); both resolvers run every test here.
Decisions these tests pin down:

- a symlink anywhere on a key's path, or a mount point on it, makes ``get`` raise
  ``InvalidValueError`` and ``stage``/``set``/``commit``/``delete`` raise
  ``StoreError``; nothing outside the root is read, written or removed;
- a FIFO, device or socket key raises ``InvalidValueError`` at once (never blocks),
  as does a file larger than ``get``'s ``limit``; a directory is no value (``None``);
- ``list_dir`` and ``scan`` show neither symlinks nor mount points (a tmpfs mounted
  on a store directory is not a prefix, and its files are not keys);
- ``sync`` skips a directory that is missing, a symlink or a mount: nothing of the
  store's was renamed there;
- a directory the store creates is fsync'ed into its parent before the value in it
  can be committed (a value is only as durable as the directory entries above it).
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.mounting import memory_cap
from tests.support.stores import run_promptly
from tests.support.tmpfs import tiny_tmpfs
from zarrfs.errors import InvalidValueError, StoreError
from zarrfs.stores import directory
from zarrfs.stores.directory import TEMP_MARKER, DirectoryStore

SECRET = b"outside the store: must never be served, changed or removed\n"

OpenStore = Callable[[Path], DirectoryStore]


@pytest.fixture(params=["openat2", "walk"])
def open_store(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[OpenStore]:
    """A DirectoryStore factory using openat2, or the fallback walk (as on a kernel
    or seccomp profile without openat2)."""
    if request.param == "walk":
        monkeypatch.setattr(directory, "openat2_works", lambda fd: False, raising=False)
    stores: list[DirectoryStore] = []

    def make(root: Path) -> DirectoryStore:
        store = DirectoryStore(str(root))
        if request.param == "openat2" and hasattr(directory, "_openat2"):
            assert store._resolve is directory.openat2, "openat2 unavailable on this kernel"
        stores.append(store)
        return store

    yield make
    for store in stores:
        if hasattr(store, "close"):
            store.close()


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the store holding a file "0" of SECRET bytes."""
    out = tmp_path / "outside"
    out.mkdir()
    (out / "0").write_bytes(SECRET)
    return out


def snapshot(path: Path) -> dict[str, tuple[bytes | None, int]]:
    """Every name below ``path`` with its content (files) and inode: any change shows."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            st_ = os.lstat(full)
            content = Path(full).read_bytes() if stat.S_ISREG(st_.st_mode) else None
            found[os.path.relpath(full, path)] = (content, st_.st_ino)
    return found


def make_root(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    (root / "a").mkdir(parents=True)
    (root / "a" / "ok").write_bytes(b"inside")
    return root


# -- symlinks -------------------------------------------------------------------------


def test_a_symlinked_chunk_is_refused_and_its_target_not_read(
    tmp_path: Path, outside: Path, open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_root(tmp_path)
    (root / "a" / "0").symlink_to(outside / "0")
    store = open_store(root)
    opened: list[str] = []
    real_read = os.read

    def read(fd: int, n: int) -> bytes:
        opened.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real_read(fd, n)

    monkeypatch.setattr(os, "read", read)
    with pytest.raises(InvalidValueError, match=r"'a/0'.*symbolic link"):
        store.get("a/0")
    assert str(outside / "0") not in opened
    assert not store.contains("a/0")
    assert store.mtime("a/0") is None
    assert store.get("a/ok") == b"inside", "the rest of the store is served"


def test_a_symlinked_directory_is_never_followed(
    tmp_path: Path, outside: Path, open_store: OpenStore
) -> None:
    """A symlink as a directory component: reads refuse, and every write or delete
    through it is a StoreError that changes nothing outside."""
    root = make_root(tmp_path)
    (root / "a" / "1").symlink_to(outside, target_is_directory=True)
    (root / "x").symlink_to(outside, target_is_directory=True)
    store = open_store(root)
    before = snapshot(outside)
    for key in ("a/1/0", "x/0"):
        with pytest.raises(InvalidValueError):
            store.get(key)
        assert not store.contains(key)
        assert store.mtime(key) is None
        with pytest.raises(StoreError):
            store.stage(key, b"new")
        with pytest.raises(StoreError):
            store.set(key, b"new")
        with pytest.raises(StoreError):
            store.set(key, b"new", durable=False)
        with pytest.raises(StoreError):
            store.delete(key)
        with pytest.raises(StoreError):
            store.delete(key, durable=False)
        with pytest.raises(StoreError):
            store.stage(f"{key}/deeper", b"new")  # no directory made through the link
    store.sync(["a/1/0", "x/0"])  # skipped: nothing of ours was renamed there
    assert snapshot(outside) == before
    assert (root / "a" / "1").is_symlink(), "the link itself is left alone"
    assert not list(root.rglob(f"*{TEMP_MARKER}*"))


def test_commit_resolves_the_directory_again(
    tmp_path: Path, outside: Path, open_store: OpenStore
) -> None:
    """A directory replaced by a symlink between stage and commit: nothing is renamed
    outside, the commit fails."""
    root = make_root(tmp_path)
    store = open_store(root)
    (root / "a" / "2").mkdir()
    staged = [store.stage("a/2/0", b"new"), store.stage("a/ok", b"renamed")]
    (root / "a" / "2").rename(tmp_path / "moved")
    (root / "a" / "2").symlink_to(outside, target_is_directory=True)
    before = snapshot(outside)
    with pytest.raises(StoreError, match="a/2/0"):
        store.commit(staged)
    assert snapshot(outside) == before
    assert (root / "a" / "ok").read_bytes() == b"inside", "a failed commit renames nothing"


def test_a_symlink_key_is_replaced_or_removed_itself(
    tmp_path: Path, outside: Path, open_store: OpenStore
) -> None:
    """Renaming over or unlinking a symlink key acts on the link, inside the store."""
    root = make_root(tmp_path)
    (root / "a" / "0").symlink_to(outside / "0")
    (root / "a" / "1").symlink_to(outside / "0")
    store = open_store(root)
    store.set("a/0", b"mine")
    store.delete("a/1")
    assert (root / "a" / "0").read_bytes() == b"mine"
    assert not (root / "a" / "0").is_symlink()
    assert not os.path.lexists(root / "a" / "1")
    assert (outside / "0").read_bytes() == SECRET


def test_list_dir_skips_symlinks_and_scan_reports_them_unfollowed(
    tmp_path: Path, outside: Path, open_store: OpenStore
) -> None:
    """A listing shows no symlink. A scan (what check and a resize's cleanup see)
    reports a symlink to a file as a key of size 0, which reading refuses, and
    never descends through a symlink to a directory."""
    root = make_root(tmp_path)
    (root / "k").write_bytes(b"12345")
    (root / "link_file").symlink_to(outside / "0")
    (root / "link_out").symlink_to(outside, target_is_directory=True)
    (root / "link_in").symlink_to(root / "a", target_is_directory=True)  # `ln -s a b`
    (root / "dangling").symlink_to(tmp_path / "nowhere")
    (root / "a" / "link").symlink_to(root / "k")
    store = open_store(root)
    listing = store.list_dir("")
    assert listing.keys == ("k",)
    assert listing.prefixes == ("a",)
    assert store.list_dir("a").keys == ("ok",)
    assert dict(store.scan("")) == {"k": 5, "a/ok": 6, "link_file": 0, "dangling": 0, "a/link": 0}
    with pytest.raises(InvalidValueError):
        store.get("link_file")
    with pytest.raises(InvalidValueError):
        store.list_dir("link_in")
    assert list(store.scan("link_out")) == []


# -- what is not a regular file -------------------------------------------------------


def test_a_fifo_is_refused_at_once(tmp_path: Path, open_store: OpenStore) -> None:
    root = make_root(tmp_path)
    fifo = root / "a" / "0"
    os.mkfifo(fifo)
    store = open_store(root)
    try:
        result = run_promptly(lambda: store.get("a/0"))
    finally:
        # Release a reader that blocked in open (the old behaviour), if any.
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError as e:
            assert e.errno == errno.ENXIO  # no reader: nothing blocked
    assert isinstance(result, InvalidValueError), result
    assert "FIFO" in str(result) and "'a/0'" in str(result)
    assert not store.contains("a/0")


def test_devices_are_refused(tmp_path: Path, open_store: OpenStore) -> None:
    """A symlink to /dev/zero (never followed) and a device node in the store (never
    read): InvalidValueError at once, not an endless read."""
    root = make_root(tmp_path)
    (root / "a" / "0").symlink_to("/dev/zero")
    zero = os.stat("/dev/zero").st_rdev
    os.mknod(root / "a" / "1", stat.S_IFCHR | 0o600, zero)
    store = open_store(root)
    for key, kind in (("a/0", "symbolic link"), ("a/1", "character device")):
        with memory_cap(1 << 30):
            result = run_promptly(lambda key=key: store.get(key))
        assert isinstance(result, InvalidValueError), (key, result)
        assert kind in str(result)


def test_a_directory_is_no_value(tmp_path: Path, open_store: OpenStore) -> None:
    """A group's child array named like a metadata key the tree probes for ("meta"
    of v1, "attrs") is a prefix, not a broken value."""
    root = make_root(tmp_path)
    (root / "meta").mkdir()
    store = open_store(root)
    assert store.get("meta") is None
    assert store.get("a") is None
    assert store.list_dir("").prefixes == ("a", "meta")


def test_get_limit(tmp_path: Path, open_store: OpenStore) -> None:
    root = make_root(tmp_path)
    (root / "big").write_bytes(b"x" * 1000)
    store = open_store(root)
    with pytest.raises(InvalidValueError, match=r"1000 bytes.*limit of 999"):
        store.get("big", limit=999)
    assert store.get("big", limit=1000) == b"x" * 1000
    assert store.get("big") == b"x" * 1000
    assert store.get("missing", limit=0) is None


def test_get_reads_no_more_than_the_size_it_checked(
    tmp_path: Path, open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file that grows between fstat and read is read up to the size fstat gave
    (which the limit was checked against), not to its new end."""
    root = make_root(tmp_path)
    (root / "growing").write_bytes(b"y" * 100_000)
    store = open_store(root)
    real_fstat = os.fstat

    def fstat(fd: int) -> os.stat_result:
        st_ = real_fstat(fd)
        if stat.S_ISREG(st_.st_mode) and st_.st_size == 100_000:
            fields = list(st_)
            fields[stat.ST_SIZE] = 10  # as it was before it grew
            return os.stat_result(fields)
        return st_

    monkeypatch.setattr(os, "fstat", fstat)
    assert store.get("growing", limit=10) == b"y" * 10


# -- mount points ---------------------------------------------------------------------


def test_a_mount_inside_the_store_is_not_entered(tmp_path: Path, open_store: OpenStore) -> None:
    """A tmpfs mounted on a store directory: its files are not keys (get raises
    InvalidValueError, EXDEV), it is no prefix, nothing is written, deleted or
    cleaned up in it."""
    root = make_root(tmp_path)
    with tiny_tmpfs(root / "m") as mounted:
        (mounted / "0").write_bytes(SECRET)
        (mounted / "sub").mkdir()
        old_temp = mounted / f".0{TEMP_MARKER}abcd1234"
        old_temp.write_bytes(b"t")
        os.utime(old_temp, (1, 1))
        store = open_store(root)
        before = snapshot(mounted)
        with pytest.raises(InvalidValueError, match="mount point"):
            store.get("m/0")
        assert store.get("a/ok") == b"inside"
        assert not store.contains("m/0")
        assert store.mtime("m/0") is None
        assert store.list_dir("").prefixes == ("a",)
        with pytest.raises(InvalidValueError):
            store.list_dir("m")
        assert dict(store.scan("")) == {"a/ok": 6}
        with pytest.raises(StoreError):
            store.set("m/0", b"new")
        with pytest.raises(StoreError):
            store.stage("m/sub/0", b"new")
        with pytest.raises(StoreError):
            store.delete("m/0")
        store.sync(["m/0"])
        assert store.cleanup(time.time()) == 0
        assert snapshot(mounted) == before


# -- durability of new directories ---------------------------------------------------


@pytest.mark.parametrize("how", ["stage+commit", "set"])
def test_new_directories_are_synced_into_their_parents(
    tmp_path: Path, open_store: OpenStore, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Storing "a/0/0" in an empty store makes "a" and "a/0": each is fsync'ed in its
    parent (the root, then "a") after it exists and before the commit returns."""
    root = tmp_path / "store"
    root.mkdir()
    store = open_store(root)
    synced: dict[tuple[int, int], set[str]] = {}
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        st_ = os.fstat(fd)
        if stat.S_ISDIR(st_.st_mode):
            synced.setdefault((st_.st_dev, st_.st_ino), set()).update(os.listdir(fd))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    if how == "set":
        store.set("a/0/0", b"chunk", durable=False)
    else:
        store.commit([store.stage("a/0/0", b"chunk")])

    def identity(path: Path) -> tuple[int, int]:
        st_ = os.stat(path)
        return st_.st_dev, st_.st_ino

    assert "a" in synced.get(identity(root), set()), "the root was not synced after mkdir a"
    assert "0" in synced.get(identity(root / "a"), set()), "a was not synced after mkdir a/0"
    assert (root / "a" / "0" / "0").read_bytes() == b"chunk"
    synced.clear()
    store.commit([store.stage("a/0/1", b"chunk")])
    assert not synced, "an existing directory is not synced again at stage"


# -- cleanup --------------------------------------------------------------------------


def test_cleanup_removes_only_old_temporary_files_inside(
    tmp_path: Path, outside: Path, open_store: OpenStore
) -> None:
    root = make_root(tmp_path)
    old = root / "a" / f".0{TEMP_MARKER}00000000"
    new = root / "a" / f".1{TEMP_MARKER}11111111"
    for path in (old, new):
        path.write_bytes(b"t")
    os.utime(old, (1, 1))
    out_temp = outside / f".0{TEMP_MARKER}22222222"
    out_temp.write_bytes(b"t")
    os.utime(out_temp, (1, 1))
    (root / "link").symlink_to(outside, target_is_directory=True)
    (root / "a" / f".2{TEMP_MARKER}33333333").symlink_to(out_temp)  # a link named as ours
    os.mkfifo(root / "a" / f".3{TEMP_MARKER}44444444")
    store = open_store(root)
    assert store.cleanup(time.time() - 60) == 1
    assert not old.exists()
    assert new.exists(), "a temporary file of the running mount stays"
    assert out_temp.read_bytes() == b"t"
    assert os.path.lexists(root / "a" / f".2{TEMP_MARKER}33333333")
    assert os.path.lexists(root / "a" / f".3{TEMP_MARKER}44444444")


def test_cleanup_stats_only_temporary_names_and_calls_between_per_directory(
    tmp_path: Path, open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_root(tmp_path)
    for d in ("b", "b/c", "d"):
        (root / d).mkdir(parents=True, exist_ok=True)
        for i in range(5):
            (root / d / f"{i}.0").write_bytes(b"chunk")
    old = root / "b" / "c" / f".0{TEMP_MARKER}55555555"
    old.write_bytes(b"t")
    os.utime(old, (1, 1))
    store = open_store(root)
    stat_calls: list[str] = []
    real_stat = os.stat

    def counting_stat(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        stat_calls.append(str(path))
        return real_stat(path, *args, **kwargs)

    directories = sum(1 for p in root.rglob("*") if p.is_dir())
    paused: list[int] = []
    monkeypatch.setattr(os, "stat", counting_stat)
    removed = store.cleanup(time.time() - 60, lambda: paused.append(1))
    monkeypatch.undo()
    assert removed == 1 and not old.exists()
    assert not [c for c in stat_calls if c.endswith(".0")], "a chunk file was stat'ed"
    assert len(paused) == directories


# -- keys -----------------------------------------------------------------------------


def test_invalid_keys(tmp_path: Path, open_store: OpenStore) -> None:
    store = open_store(make_root(tmp_path))
    for key in ("../outside/0", "a/../../x", "a/./ok", "a/\0"):
        with pytest.raises(StoreError) as info:
            store.get(key)
        assert info.value.errno == errno.EINVAL
        with pytest.raises(StoreError):
            store.set(key, b"x")


_NAME = st.text(
    st.characters(blacklist_characters="/\0", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=40,
).filter(lambda name: name not in (".", "..") and TEMP_MARKER not in name)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    parts=st.lists(_NAME, min_size=1, max_size=4),
    value=st.binary(max_size=2000),
    durable=st.booleans(),
)
def test_safe_keys_round_trip(parts: list[str], value: bytes, durable: bool) -> None:
    """Any key of ordinary names: set, get, list, scan and delete agree, for both
    resolvers, and nothing is left but the directories."""
    key = "/".join(parts)
    for walk in (False, True):
        with tempfile.TemporaryDirectory() as tmp:
            store = DirectoryStore(tmp)
            if walk:
                store._resolve = store._walk
            try:
                assert store.get(key) is None
                if durable:
                    store.set(key, value)
                else:
                    store.commit([store.stage(key, value)])
                    store.sync([key])
                assert store.get(key) == value
                assert store.get(key, limit=len(value)) == value
                assert store.contains(key)
                assert store.mtime(key) is not None
                prefix = "/".join(parts[:-1])
                assert parts[-1] in store.list_dir(prefix).keys
                assert dict(store.scan("")) == {key: len(value)}
                store.delete(key, durable=durable)
                assert store.get(key) is None
                assert not store.contains(key)
                assert list(store.scan("")) == []
            finally:
                store.close()
