"""The conformance corpus (tests/corpus) reads back byte-identical through the tree
and views, without a mount; tests/mount/reads/test_corpus_mount.py reads it through
the kernel."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.corpus import all_expected, assert_store_reads_back, expected, sharded, stores
from zarrfs.stores.base import Store

SHARDED = 38


def test_corpus_is_complete(corpus: Path) -> None:
    assert len(all_expected()) == 480
    assert len(expected()) == 480
    assert sum(len(v) for v in stores().values()) == 480
    assert sum(sharded(entry) for entry in expected()) == SHARDED
    formats = {e["format"] for e in all_expected().values()}
    assert formats == {0, 1, 2, 3}


@pytest.mark.parametrize("root", list(stores()))
def test_corpus_handlers(root: str, corpus: Path) -> None:
    """Every array of the store, read through the tree and views without a mount."""
    assert_store_reads_back(root)


def test_corpus_decodes_from_views(corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks handed over as read-only memoryviews (as the S3 store hands obstore's
    buffers to the decoders, uncopied) decode to the same bytes, for every array."""

    def as_view(self: Store, key: str, *, limit: int | None = None) -> memoryview | None:
        value = self.get(key, limit=limit)
        return None if value is None else memoryview(value)

    monkeypatch.setattr(Store, "get_buffer", as_view)
    for root in stores():
        assert_store_reads_back(root)
