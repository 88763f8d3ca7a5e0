"""The Store contract (tests/support/store_contract.py) run against the directory store;
every other store's test module runs it against its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.store_contract import MakeStore, StoreContract
from zarrfs.stores.directory import DirectoryStore


class TestDirectoryStore(StoreContract):
    @pytest.fixture
    def make_store(self, tmp_path: Path) -> MakeStore:
        def make(values: dict[str, bytes]) -> DirectoryStore:
            root = tmp_path / "store"
            root.mkdir(exist_ok=True)
            for key, value in values.items():
                (root / key).parent.mkdir(parents=True, exist_ok=True)
                (root / key).write_bytes(value)
            return DirectoryStore(str(root))

        return make
