"""The Google Cloud Storage and Azure stores (zarrfs/stores/gcs.py, azure.py, over
objstore.py) against the GCS fake (tests/support/gcs_server.py) and Azurite: the
Store contract, conditional writes, the writer lease, configuration and errors."""

from __future__ import annotations

import pytest

from tests.support.clouds import Cloud
from tests.support.store_contract import MakeStore, StoreContract
from zarrfs.stores.location import open_store
from zarrfs.stores.objstore import ObjectStore

PREFIX = "data/root"


def fill(cloud: Cloud, values: dict[str, bytes], prefix: str = PREFIX) -> ObjectStore:
    for key, value in values.items():
        cloud.put(f"{prefix}/{key}" if prefix else key, value)
    store = open_store(cloud.url(prefix))
    assert isinstance(store, ObjectStore)
    return store


class TestCloudStore(StoreContract):
    @pytest.fixture
    def make_store(self, cloud: Cloud) -> MakeStore:
        return lambda values: fill(cloud, values)


class TestCloudStoreAtBucketRoot(StoreContract):
    @pytest.fixture
    def make_store(self, cloud: Cloud) -> MakeStore:
        return lambda values: fill(cloud, values, "")
