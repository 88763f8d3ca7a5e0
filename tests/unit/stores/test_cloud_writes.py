"""Conditional writes and the writer lease of the Google Cloud Storage and Azure
stores (zarrfs/stores/objstore.py, s3_lease.py) against the GCS fake (versions are
generations) and Azurite (versions are ETags, which are no MD5s): another writer's
change is never overwritten, the mount's own late request is written over, and one
store at a time holds a prefix's lease."""

from __future__ import annotations

import errno
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.clouds import Cloud, GcsBucket
from zarrfs.errors import StoreError
from zarrfs.stores.location import StoreOptions, open_store
from zarrfs.stores.objstore import ObjectStore
from zarrfs.stores.s3_lease import LEASE_KEY
from zarrfs.stores.s3_versions import digest_of

LEASE = f"p/{LEASE_KEY}"


def opened(cloud: Cloud, prefix: str = "p") -> ObjectStore:
    store = open_store(cloud.url(prefix))
    assert isinstance(store, ObjectStore)
    return store


def test_another_writers_change_is_never_overwritten(cloud: Cloud) -> None:
    cloud.put("p/k", b"old")
    cloud.put("p/j", b"old")
    store = opened(cloud)
    assert store.get("k") == b"old"
    assert store.size("j") == 3  # a HEAD tells the version too
    cloud.put("p/k", b"theirs")
    cloud.put("p/j", b"theirs")
    for key in ("k", "j", "k"):  # and again: it stays refused
        with pytest.raises(StoreError) as caught:
            store.set(key, b"mine")
        assert caught.value.errno == errno.EIO
        assert str(caught.value) == (
            f"writing {cloud.url('p')}/{key}: changed by another writer since this mount read "
            "or stored it (HTTP 412 Precondition Failed): not overwritten"
        )
    assert cloud.get("p/k") == b"theirs" and cloud.get("p/j") == b"theirs"


def test_an_object_deleted_by_another_writer_is_not_recreated(cloud: Cloud) -> None:
    cloud.put("p/k", b"old")
    store = opened(cloud)
    assert store.get("k") == b"old"
    cloud.delete("p/k")
    with pytest.raises(StoreError, match="changed by another writer"):
        store.set("k", b"mine")
    assert cloud.get("p/k") is None


def test_an_object_the_store_never_saw_is_written_over(cloud: Cloud) -> None:
    cloud.put("p/k", b"old")
    store = opened(cloud)
    store.set("k", b"new")  # created (refused: it exists), then replaced
    assert cloud.get("p/k") == b"new"
    store.set("k", b"newer")
    store.set("fresh", b"1")
    store.delete("fresh")
    store.set("fresh", b"2")  # known absent: created again
    assert cloud.get("p/k") == b"newer" and cloud.get("p/fresh") == b"2"


def test_a_new_object_is_one_put_and_a_known_one_too(gcs_bucket: GcsBucket) -> None:
    gcs_bucket.put("p/k", b"old")
    store = opened(gcs_bucket)
    before = gcs_bucket.server.puts
    store.set("new", b"1")  # generation 0: one PUT
    assert store.get("k") == b"old"
    store.set("k", b"2")  # the generation read: one PUT
    store.set("k", b"3")  # the generation stored: one PUT
    assert gcs_bucket.server.puts - before == 3 and gcs_bucket.get("p/k") == b"3"


def test_our_own_late_put_is_written_over(cloud: Cloud) -> None:
    """A PUT with no known outcome that the server applied: on GCS its ETag is the
    MD5 of the bytes; on Azure the bytes are read (at that version) and compared."""
    cloud.put("p/k", b"old")
    store = opened(cloud)
    assert store.get("k") == b"old"
    store._versions.doubt("k", digest_of(b"A"))  # as a PUT that timed out leaves it
    cloud.put("p/k", b"A")  # ... and arrived late
    store.set("k", b"B")
    assert cloud.get("p/k") == b"B"
    cloud.put("p/k", b"theirs")
    with pytest.raises(StoreError, match="changed by another writer"):
        store.set("k", b"C")
    assert cloud.get("p/k") == b"theirs"


def _owner(cloud: Cloud) -> dict[str, Any]:
    data = cloud.get(LEASE)
    assert data is not None
    return dict(json.loads(data))


def test_one_store_at_a_time_holds_the_lease(cloud: Cloud, tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = opened(cloud), opened(cloud)
    first.acquire_writer_lease(str(tmp_path / "a"))
    try:
        assert _owner(cloud)["pid"] == os.getpid()
        assert LEASE_KEY not in first.list_dir("").keys
        assert LEASE_KEY not in dict(first.scan(""))
        # Another run directory: no local lock stops it, the lease object does.
        with pytest.raises(StoreError) as caught:
            second.acquire_writer_lease(str(tmp_path / "b"))
        assert caught.value.errno == errno.EBUSY
        assert f"already mounted read-write by process {os.getpid()}" in str(caught.value)
        first.set("k", b"1")
        assert first._lease is not None
        version = first._lease._version
        first._lease.renew()  # a PUT conditioned on its own version
        assert first._lease._version != version and first._lease.lost is None
    finally:
        first.release_writer_lease()
    assert cloud.get(LEASE) is None
    second.acquire_writer_lease(str(tmp_path / "b"))
    second.release_writer_lease()


def test_a_lease_taken_over_stops_the_writes(
    cloud: Cloud, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = opened(cloud)
    store.acquire_writer_lease(str(tmp_path))
    try:
        cloud.put(LEASE, json.dumps({"host": "elsewhere", "pid": 4242, "ttl": 600}).encode())
        assert store._lease is not None
        with caplog.at_level(logging.ERROR):
            store._lease.renew()
        with pytest.raises(StoreError) as caught:
            store.set("k", b"1")
        assert caught.value.errno == errno.EIO
        assert "taken over by another mount" in str(caught.value)
        assert cloud.get("p/k") is None
    finally:
        store.release_writer_lease()
    assert _owner(cloud)["host"] == "elsewhere"  # not deleted: no longer ours


def test_an_expired_lease_of_another_machine_is_taken_over(
    cloud: Cloud, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    owner = {"host": "elsewhere", "boot": "x", "pidns": 1, "uid": 0, "pid": 4242, "ttl": 1}
    cloud.put(LEASE, json.dumps(owner).encode())
    time.sleep(2.2)  # Last-Modified counts whole seconds
    store = opened(cloud)
    with caplog.at_level(logging.WARNING):
        store.acquire_writer_lease(str(tmp_path))
    try:
        assert _owner(cloud)["pid"] == os.getpid()
        assert "took over the writer lease" in caplog.text and "its TTL is 1 s" in caplog.text
    finally:
        store.release_writer_lease()


def test_an_anonymous_gcs_store_refuses_writes_without_a_request(
    gcs_bucket: GcsBucket, tmp_path: Path
) -> None:
    """obstore signs every GCS write (it would fetch a token from a metadata server)."""
    gcs_bucket.put("p/k", b"public")
    store = open_store(gcs_bucket.url("p"), StoreOptions(anonymous=True))
    assert store.get("k") == b"public"
    sent = len(gcs_bucket.server.authorized)
    store.acquire_writer_lease(str(tmp_path))
    with pytest.raises(StoreError) as caught:
        store.set("k", b"mine")
    assert caught.value.errno == errno.EACCES
    assert len(gcs_bucket.server.authorized) == sent and gcs_bucket.get("p/k") == b"public"
