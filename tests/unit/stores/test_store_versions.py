"""Versions and conditional reads of the directory, HTTP, S3, GCS and Azure stores: ``stat``
names the version ``fetch`` and ``fetch_ranges`` read, naming it back answers
UNCHANGED without a body (HTTP 304), and a replaced value has another version."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.clouds import Cloud
from tests.support.http_server import HttpServer
from tests.support.servers import Bucket
from zarrfs.stores.base import UNCHANGED, Store
from zarrfs.stores.directory import DirectoryStore
from zarrfs.stores.http import HttpStore
from zarrfs.stores.location import open_store
from zarrfs.stores.s3 import S3Store

VALUE = bytes(range(256)) * 4


def check_versions(store: Store, replace: Callable[[bytes], None]) -> None:
    version = store.stat("a/0")
    assert version is not None and version.size == len(VALUE)
    found = store.fetch("a/0")
    assert found is not None and bytes(found.value) == VALUE and found.version == version
    assert store.fetch("a/0", unless=version) is UNCHANGED
    ranges = store.fetch_ranges("a/0", [(10, 4)])
    assert ranges == ([VALUE[10:14]], version)
    assert store.fetch_ranges("a/0", [(10, 4)], unless=version) is UNCHANGED
    several = store.fetch_ranges("a/0", [(0, 2), (-3, 3), (0, 0), (-5, 2)])
    assert several == ([VALUE[:2], VALUE[-3:], b"", VALUE[-5:-3]], version)
    assert store.fetch("nope") is None and store.stat("nope") is None
    assert store.fetch_ranges("nope", [(0, 1)]) is None
    replace(b"new value")
    changed = store.fetch("a/0", unless=version)
    assert changed is not UNCHANGED and changed is not None
    assert bytes(changed.value) == b"new value" and changed.version != version
    assert store.stat("a/0") == changed.version
    assert store.fetch_ranges("a/0", [(0, 3)], unless=version) == ([b"new"], changed.version)


def test_directory_versions(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "0").write_bytes(VALUE)

    def replace(value: bytes) -> None:
        (tmp_path / "a" / "0.new").write_bytes(value)
        os.replace(tmp_path / "a" / "0.new", tmp_path / "a" / "0")

    check_versions(DirectoryStore(str(tmp_path)), replace)


def test_http_versions_and_304(http_server: HttpServer) -> None:
    (http_server.root / "s" / "a").mkdir(parents=True)
    (http_server.root / "s" / "a" / "0").write_bytes(VALUE)
    store = HttpStore(http_server.url + "s")

    def replace(value: bytes) -> None:
        path = http_server.root / "s" / "a" / "0"
        path.with_name("0.new").write_bytes(value)
        os.replace(path.with_name("0.new"), path)

    http_server.reset()
    check_versions(store, replace)
    statuses = [r.status for r in http_server.settled()]
    assert statuses.count(304) == 2, statuses


def test_http_without_etags_compares_last_modified(http_server: HttpServer) -> None:
    http_server.etags = False
    (http_server.root / "v").write_bytes(VALUE)
    store = HttpStore(http_server.url)
    version = store.stat("v")
    assert version is not None and version.tag.startswith("modified:")
    assert store.fetch("v", unless=version) is UNCHANGED  # the body travelled, though
    os.utime(http_server.root / "v", (1e9, 1e9))
    found = store.fetch("v", unless=version)
    assert found is not UNCHANGED and found is not None and bytes(found.value) == VALUE


def test_s3_versions_and_304(s3_bucket: Bucket) -> None:
    s3_bucket.put("p/a/0", VALUE)
    store = S3Store(f"s3://{s3_bucket.name}/p")
    check_versions(store, lambda value: s3_bucket.put("p/a/0", value))


@pytest.mark.parametrize("ranges", [[(0, 2)], [(0, 2), (5, 1)]])
def test_s3_ranges_of_a_replaced_object_are_of_one_version(
    s3_bucket: Bucket, ranges: list[tuple[int, int]]
) -> None:
    s3_bucket.put("k", b"old value")
    store = S3Store(f"s3://{s3_bucket.name}")
    old = store.stat("k")
    s3_bucket.put("k", b"NEW VALUE")
    found = store.fetch_ranges("k", ranges, unless=old)
    assert found is not None and found is not UNCHANGED
    assert found[1] == store.stat("k")
    assert found[0] == [b"NEW VALUE"[s : s + n] for s, n in ranges]


def test_cloud_versions(cloud: Cloud) -> None:
    """GCS: generations, no conditional GET (the value is read and its generation
    compared); Azure: ETags, If-None-Match answered 304."""
    cloud.put("p/a/0", VALUE)
    store = open_store(cloud.url("p"))
    check_versions(store, lambda value: cloud.put("p/a/0", value))
    version = store.stat("a/0")
    assert version is not None
    if cloud.url().startswith("gs://"):
        assert version.tag.isdigit()  # the generation


@pytest.mark.parametrize("ranges", [[(0, 2)], [(0, 2), (5, 1)], [(-3, 3)]])
def test_cloud_ranges_of_a_replaced_object_are_of_one_version(
    cloud: Cloud, ranges: list[tuple[int, int]]
) -> None:
    cloud.put("k", b"old value")
    store = open_store(cloud.url())
    old = store.stat("k")
    cloud.put("k", b"NEW VALUE")
    found = store.fetch_ranges("k", ranges, unless=old)
    assert found is not None and found is not UNCHANGED
    assert found[1] == store.stat("k")
    assert found[0] == [b"NEW VALUE"[s : s + n if s + n else None] for s, n in ranges]


def check_listed_versions(store: Store, put: Callable[[str, bytes], None]) -> None:
    """``versions`` names each key under a prefix (recursively) as ``stat`` does; a
    replaced value is listed at its new version; past ``most`` keys, nothing."""
    for key in ("arr/0.0", "arr/0.1", "arr/c/1/2", "other/0"):
        put(key, VALUE)
    listed = store.versions("arr", 10)
    assert listed is not None and set(listed) == {"0.0", "0.1", "c/1/2"}
    for name, tag in listed.items():
        version = store.stat(f"arr/{name}")
        assert version is not None and version.tag == tag
    put("arr/0.1", b"new value")
    again = store.versions("arr", 10)
    assert again is not None and again["0.1"] != listed["0.1"] and again["0.0"] == listed["0.0"]
    assert again["0.1"] == store.stat("arr/0.1").tag  # type: ignore[union-attr]
    assert store.versions("arr", 2) is None
    assert store.versions("nothing", 10) == {}


def test_s3_listed_versions(s3_bucket: Bucket) -> None:
    store = S3Store(f"s3://{s3_bucket.name}/p")
    check_listed_versions(store, lambda key, value: s3_bucket.put(f"p/{key}", value))


def test_cloud_listed_versions(cloud: Cloud) -> None:
    """Azure lists ETags (without the quotes of a GET's header); GCS lists ETags, not
    the generations its versions are: no versions from a listing."""
    store = open_store(cloud.url("p"))
    if cloud.url().startswith("gs://"):
        cloud.put("p/arr/0.0", VALUE)
        assert store.versions("arr", 10) is None
        return
    check_listed_versions(store, lambda key, value: cloud.put(f"p/{key}", value))


def test_stores_that_list_no_versions_say_so(tmp_path: Path, http_server: HttpServer) -> None:
    assert DirectoryStore(str(tmp_path)).versions("", 10) is None
    assert HttpStore(http_server.url + "s").versions("", 10) is None
