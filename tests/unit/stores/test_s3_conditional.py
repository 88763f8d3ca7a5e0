"""Conditional writes of the S3 store (zarrfs/stores/s3.py, s3_versions.py): a PUT
that timed out and reaches the server late never replaces newer data; a 412 is the
mount's own late request (written over) or another writer's change (EIO, never
overwritten). Against scripts/s3_server.py, which can hold a PUT past the client's
timeout and apply it later, and moto (whose ETags are MD5s)."""

from __future__ import annotations

import errno

import pytest

from tests.support.servers import Bucket, LoopbackS3, put_file
from zarrfs.errors import StoreError
from zarrfs.stores.s3 import S3Store
from zarrfs.stores.s3_versions import UNKNOWN, Versions, digest_of


@pytest.mark.usefixtures("short_s3_timeout")
def test_a_put_held_past_its_timeout_never_replaces_a_later_one(loopback_s3: LoopbackS3) -> None:
    put_file(loopback_s3.root, "p/k", b"old")
    store = S3Store(loopback_s3.url("p"))
    assert store.get("k") == b"old"
    loopback_s3.faults(hold_put={"match": "p/k"})  # every PUT of it, until dropped
    with pytest.raises(StoreError) as caught:
        store.set("k", b"A")
    assert caught.value.errno == errno.EIO
    held = loopback_s3.counters()["held"]
    assert held >= 1
    loopback_s3.faults(drop=["hold_put"])
    store.set("k", b"B")
    loopback_s3.faults(release=True)  # the held PUTs of A arrive now
    outcomes = loopback_s3.wait_for("late_outcomes", held)["late_outcomes"]
    assert outcomes == [412] * held
    assert (loopback_s3.root / "p/k").read_bytes() == b"B"
    assert store.get("k") == b"B"


@pytest.mark.usefixtures("short_s3_timeout")
def test_our_own_late_put_is_written_over(loopback_s3: LoopbackS3) -> None:
    """The held PUT arrives before the next one: the object is then a version the
    mount itself sent, recognised by its bytes (this server's ETags are no MD5s)."""
    put_file(loopback_s3.root, "p/k", b"old")
    store = S3Store(loopback_s3.url("p"))
    assert store.get("k") == b"old"
    loopback_s3.faults(hold_put={"match": "p/k", "count": 1})
    with pytest.raises(StoreError):
        store.set("k", b"A")
    loopback_s3.faults(release=True)
    assert loopback_s3.wait_for("late_outcomes", 1)["late_outcomes"] == [200]
    assert (loopback_s3.root / "p/k").read_bytes() == b"A"
    store.set("k", b"B")
    assert (loopback_s3.root / "p/k").read_bytes() == b"B"


def test_another_writers_change_is_never_overwritten(loopback_s3: LoopbackS3) -> None:
    put_file(loopback_s3.root, "p/k", b"old")
    put_file(loopback_s3.root, "p/j", b"old")
    store = S3Store(loopback_s3.url("p"))
    assert store.get("k") == b"old"
    assert store.size("j") == 3  # a HEAD tells the version too
    put_file(loopback_s3.root, "p/k", b"theirs")
    put_file(loopback_s3.root, "p/j", b"theirs")
    for key in ("k", "j", "k"):  # and again: it stays refused
        with pytest.raises(StoreError) as caught:
            store.set(key, b"mine")
        assert caught.value.errno == errno.EIO
        assert str(caught.value) == (
            f"writing {loopback_s3.url('p')}/{key}: changed by another writer since this "
            "mount read or stored it (HTTP 412 Precondition Failed): not overwritten"
        )
    assert (loopback_s3.root / "p/k").read_bytes() == b"theirs"
    assert (loopback_s3.root / "p/j").read_bytes() == b"theirs"


def test_an_object_deleted_by_another_writer_is_not_recreated(loopback_s3: LoopbackS3) -> None:
    put_file(loopback_s3.root, "p/k", b"old")
    store = S3Store(loopback_s3.url("p"))
    assert store.get("k") == b"old"
    (loopback_s3.root / "p/k").unlink()
    with pytest.raises(StoreError) as caught:
        store.set("k", b"mine")
    assert "changed by another writer" in str(caught.value)
    assert not (loopback_s3.root / "p/k").exists()


def test_an_object_the_store_never_saw_is_written_over(loopback_s3: LoopbackS3) -> None:
    """Nothing to compare with: the first PUT (If-None-Match: *) meets the object,
    whose version becomes the one to replace; a new object is one PUT."""
    put_file(loopback_s3.root, "p/k", b"old")
    store = S3Store(loopback_s3.url("p"))
    before = loopback_s3.counters()["puts"]
    store.set("k", b"new")
    store.set("new", b"1")
    assert loopback_s3.counters()["puts"] - before == 3
    assert (loopback_s3.root / "p/k").read_bytes() == b"new"
    store.set("k", b"newer")  # its version known now: one PUT
    assert loopback_s3.counters()["puts"] - before == 4
    assert (loopback_s3.root / "p/k").read_bytes() == b"newer"


def test_a_deleted_object_is_created_again(loopback_s3: LoopbackS3) -> None:
    store = S3Store(loopback_s3.url("p"))
    store.set("k", b"1")
    store.delete("k")
    assert not (loopback_s3.root / "p/k").exists()
    store.set("k", b"2")
    assert (loopback_s3.root / "p/k").read_bytes() == b"2"


def test_md5_etags_recognise_our_own_late_put(s3_bucket: Bucket) -> None:
    """On S3 (and moto) the ETag of a PUT is the MD5 of its bytes: a late request of
    the mount's own is recognised without reading the object."""
    s3_bucket.put("p/k", b"old")
    store = S3Store(f"s3://{s3_bucket.name}/p")
    assert store.get("k") == b"old"
    # As a PUT that timed out and was applied later leaves it:
    store._versions.doubt("k", digest_of(b"A"))
    s3_bucket.put("p/k", b"A")
    store.set("k", b"B")
    s3_bucket.put("p/k", b"theirs")
    with pytest.raises(StoreError, match="changed by another writer"):
        store.set("k", b"C")
    body = s3_bucket.client.get_object(Bucket=s3_bucket.name, Key="p/k")["Body"].read()
    assert body == b"theirs"


def test_a_read_that_raced_a_write_does_not_go_back_a_version() -> None:
    versions = Versions()
    assert versions.expected("k") is UNKNOWN
    since = versions.now()
    versions.begin("k")
    versions.seen("k", '"old"', since)  # answered while the PUT was under way
    versions.end("k", '"new"', changed=True)
    versions.seen("k", '"old"', since)  # answered after it: began before
    assert versions.expected("k") == '"new"'
    later = versions.now()
    versions.seen("k", '"theirs"', later)  # a read begun after the write tells
    assert versions.expected("k") == '"theirs"'


def test_memory_is_bounded() -> None:
    versions = Versions(limit=10)
    for i in range(100):
        versions.seen(f"k{i}", f'"{i}"', versions.now())
        versions.doubt(f"k{i}", digest_of(b"x"))
    assert versions.expected("k99") == '"99"' and versions.expected("k0") is UNKNOWN
    assert len(versions._known) == 10 and len(versions._doubts) == 10
