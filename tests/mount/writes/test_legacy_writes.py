"""Writes to v1 and pre-v1 arrays keep their layout and encoding (no silent upgrade)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numcodecs
import numpy as np
import pytest

from tests.support.mounting import mounted

ARRAYS = [
    ("v1-zarr-1.1.0/i4_2d_blosc_lz4", "meta", ""),
    ("v1-zarr-1.1.0/u2_2d_bz2_orderF", "meta", ""),
    ("v0-zarr-0.4.0/i4_2d_lz4_shuffle", "__zmeta__", ".blosc"),
]


def decode_by_hand(array_dir: Path, doc_name: str, suffix: str) -> np.ndarray:
    """Chunk (0, 0) decoded straight from the spec, without zarrfs."""
    doc = json.loads((array_dir / doc_name).read_text())
    if doc_name == "__zmeta__":
        raw = (array_dir / "__zdata__" / f"0.0{suffix}").read_bytes()
        codec = numcodecs.Blosc(cname=doc["cname"], clevel=doc["clevel"], shuffle=doc["shuffle"])
        order = "C"
    else:
        raw = (array_dir / "0.0").read_bytes()
        opts = doc["compression_opts"]
        name = doc["compression"]
        codec = (
            numcodecs.Blosc(**opts)
            if name == "blosc"
            else numcodecs.get_codec({"id": name, "level": opts})
        )
        order = doc["order"]
    data = np.frombuffer(codec.decode(raw), dtype=doc["dtype"])
    return data.reshape(doc["chunks"], order=order)


@pytest.mark.parametrize("name,doc_name,suffix", ARRAYS, ids=[a[0] for a in ARRAYS])
def test_write_keeps_the_layout(
    corpus: Path, tmp_path: Path, name: str, doc_name: str, suffix: str
) -> None:
    store = tmp_path / "a"
    shutil.copytree(corpus / "data" / "generated" / name, store)
    before = json.loads((store / doc_name).read_text())
    with mounted(store, log_dir=tmp_path) as m:
        old = np.load(m / "array.npy")
        new = (np.arange(old.size).reshape(old.shape) * 3).astype(old.dtype)
        with open(m / "array.raw", "r+b") as f:
            f.write(new.tobytes())
        with open(m / "array.raw", "ab") as f:
            f.write(new[:2].tobytes())
    after = json.loads((store / doc_name).read_text())
    assert after["shape"] == [old.shape[0] + 2, *old.shape[1:]]
    assert {k: v for k, v in after.items() if k != "shape"} == {
        k: v for k, v in before.items() if k != "shape"
    }
    assert not (store / ".zarray").exists()
    rows, cols = after["chunks"]
    assert np.array_equal(decode_by_hand(store, doc_name, suffix), new[:rows, :cols])
    with mounted(store, "--read-only", log_dir=tmp_path) as m:
        back = np.load(m / "array.npy")
    assert np.array_equal(back, np.concatenate([new, new[:2]]))
