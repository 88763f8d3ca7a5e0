"""Store wrappers for tests."""

from __future__ import annotations

from collections import Counter

from zarrfs.stores.base import Listing
from zarrfs.stores.directory import DirectoryStore


class CountingStore(DirectoryStore):
    """A directory store that counts reads per key (as zarr-python's test_accessed_chunks)
    and listings per prefix."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.gets: Counter[str] = Counter()
        self.lists: Counter[str] = Counter()

    def list_dir(self, prefix: str) -> Listing:
        self.lists[prefix] += 1
        return super().list_dir(prefix)

    def get(self, key: str) -> bytes | None:
        self.gets[key] += 1
        return super().get(key)
