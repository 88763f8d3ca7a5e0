"""The conformance corpus (tests/corpus) through the kernel: every store mounted
read-only, every array's array.raw and array.npy hashed against expected.json."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

from tests.support.corpus import expected, relative, stores
from tests.support.mounting import mounted


@pytest.mark.parametrize("root", list(stores()))
def test_corpus_mounted(root: str, corpus: Path) -> None:
    """The same bytes through the kernel: array.raw, and array.npy via np.load(mmap)."""
    with mounted(corpus / "data" / root, "--read-only") as m:
        for entry in stores()[root]:
            want = expected()[entry]
            directory = m.path / relative(entry, root)
            listing = os.listdir(directory)
            if want["sha256_c_order"] is None:
                assert "array.raw" not in listing and "array.npy" not in listing, entry
                continue
            data = (directory / "array.raw").read_bytes()
            assert hashlib.sha256(data).hexdigest() == want["sha256_c_order"], entry
            arr = np.load(directory / "array.npy", mmap_mode="r")
            assert list(arr.shape) == want["shape"], entry
            npy_data = np.ascontiguousarray(arr).tobytes()
            del arr  # drop the mapping, or the mount stays busy
            assert hashlib.sha256(npy_data).hexdigest() == want["sha256_c_order"], entry
