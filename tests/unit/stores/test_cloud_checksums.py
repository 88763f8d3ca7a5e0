"""Checksums and conditional reads of the Google Cloud Storage and Azure stores
(zarrfs/stores/objreads.py, objstore.py) against the GCS fake and Azurite: the
CRC-32C every PUT carries as user metadata, checked on whole GETs; Azure's 304."""

from __future__ import annotations

import base64
import errno
from typing import Any

import google_crc32c
import pytest

from tests.support.clouds import Cloud
from zarrfs.errors import StoreError
from zarrfs.stores import objreads
from zarrfs.stores.base import UNCHANGED
from zarrfs.stores.location import open_store
from zarrfs.stores.objstore import ObjectStore

VALUE = bytes(range(256)) * 64


def crc_of(value: bytes) -> str:
    return base64.b64encode(google_crc32c.value(value).to_bytes(4, "big")).decode()


def names(cloud: Cloud) -> tuple[str, str]:
    """The metadata name of the CRC-32C, and its header."""
    if cloud.url().startswith("az://"):
        return "zarrfs_crc32c", "x-ms-meta-zarrfs_crc32c"
    return "zarrfs-crc32c", "x-goog-meta-zarrfs-crc32c"


def opened(cloud: Cloud) -> ObjectStore:
    store = open_store(cloud.url("p"))
    assert isinstance(store, ObjectStore)
    return store


def test_every_put_carries_the_crc32c_of_its_value(cloud: Cloud) -> None:
    """A value given whole (``set``) or in parts (``stage``), and read back checked."""
    store = opened(cloud)
    store.set("a/zarr.json", b"{}")
    store.commit([store.stage("a/c/0", [VALUE[:100], memoryview(VALUE[100:]), b"tail"])])
    name, _ = names(cloud)
    assert cloud.metadata("p/a/zarr.json") == {name: crc_of(b"{}")}
    assert cloud.metadata("p/a/c/0") == {name: crc_of(VALUE + b"tail")}
    assert store.get("a/c/0") == VALUE + b"tail"
    found = store.fetch("a/zarr.json")
    assert found is not None and found is not UNCHANGED and bytes(found.value) == b"{}"


def test_a_value_that_does_not_match_its_checksum_is_eio(
    cloud: Cloud, caplog: pytest.LogCaptureFixture
) -> None:
    """Read twice, then EIO naming the key and the header, never the bytes; a range
    of it is not checked (the checksum is of the whole object)."""
    name, header = names(cloud)
    cloud.put("p/k", VALUE, {name: crc_of(VALUE[1:])})
    store = opened(cloud)
    for read in (lambda: store.get("k"), lambda: store.fetch("k")):
        with pytest.raises(StoreError) as raised:
            read()
        assert raised.value.errno == errno.EIO
        assert str(raised.value) == (
            f"reading {cloud.url('p/k')}: the bytes received do not match the value's "
            f"checksum (crc32c, {header}) (2 tries)"
        )
    assert store.get_range("k", 0, 4) == VALUE[:4]


def test_objects_without_the_checksum_are_not_checked(cloud: Cloud) -> None:
    cloud.put("p/k", VALUE)
    cloud.put("p/j", VALUE, {names(cloud)[0]: "not base64!"})
    store = opened(cloud)
    assert store.get("k") == VALUE and store.get("j") == VALUE


def test_azure_revalidates_with_a_304(az_container: Cloud, monkeypatch: pytest.MonkeyPatch) -> None:
    """If-None-Match on the ETag: Azure answers 304 (obstore's NotModifiedError), and
    no body travels, for a whole value and for one range."""
    answers: list[Any] = []
    real = objreads.get_unless

    def counted(*args: Any) -> Any:
        answers.append(real(*args))
        return answers[-1]

    monkeypatch.setattr(objreads, "get_unless", counted)
    az_container.put("p/k", VALUE)
    store = opened(az_container)
    version = store.stat("k")
    assert store.fetch("k", unless=version) is UNCHANGED
    assert store.fetch_ranges("k", [(3, 5)], unless=version) is UNCHANGED
    assert answers == [objreads.NOT_MODIFIED, objreads.NOT_MODIFIED]
