"""Zarr v3 arrays (sharded or not) written through a real mount, checked with zarr-python 3
and tensorstore (tests/support/oracles.py: two independent readers).

array.raw of a v3 array is little-endian whatever the ``bytes`` codec's endian; chunks
written back keep the array's own codec chain, so other Zarr readers read them.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, GzipCodec, TransposeCodec

from tests.support.mounting import mounted, zarrfs_command
from tests.support.oracles import assert_store_holds

SHAPE = (37, 29)
CHUNKS = (8, 7)


def make(root: Path, dtype: str, **codecs: object) -> np.ndarray:
    rng = np.random.default_rng(3)
    data = rng.integers(-1000, 1000, SHAPE).astype(dtype)
    z = zarr.create_array(
        store=str(root),
        shape=SHAPE,
        chunks=CHUNKS,
        dtype=dtype,
        zarr_format=3,
        fill_value=0,
        **codecs,
    )
    z[...] = data
    return data


CASES = {
    "default": {},
    "big-endian-gzip": {
        "serializer": BytesCodec(endian="big"),
        "compressors": [GzipCodec(level=1)],
    },
    "transposed": {"filters": [TransposeCodec(order=(1, 0))], "compressors": None},
    # shards of 2 x 2 inner chunks; edge shards overhang the array
    "sharded": {"shards": (16, 14)},
    "sharded-index-first": {"shards": {"shape": (16, 14), "index_location": "start"}},
}
SHARD_INDEX = 4 * 16 + 4  # (offset, nbytes) per inner chunk, then crc32c


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("dtype", ["<i4", "<f8", "|u1"])
def test_pwrites_land_in_v3_chunks(tmp_path: Path, case: str, dtype: str) -> None:
    root = tmp_path / "a.zarr"
    data = make(root, dtype, **CASES[case])
    model = bytearray(data.astype(np.dtype(dtype).newbyteorder("<")).tobytes())
    rng = np.random.default_rng(5)
    little = np.dtype(dtype).newbyteorder("<")
    with mounted(root) as m:
        raw = m / "array.raw"
        assert raw.read_bytes() == bytes(model)
        fd = os.open(raw, os.O_RDWR)
        try:
            for _ in range(40):
                offset = int(rng.integers(0, len(model)))
                length = int(rng.integers(1, min(300, len(model) - offset) + 1))
                payload = rng.integers(0, 256, length, dtype="u1").tobytes()
                assert os.pwrite(fd, payload, offset) == length
                model[offset : offset + length] = payload
            # one whole chunk row of fill value: its chunks are deleted
            row = SHAPE[1] * np.dtype(dtype).itemsize
            os.pwrite(fd, bytes(row * CHUNKS[0]), 0)
            model[: row * CHUNKS[0]] = bytes(row * CHUNKS[0])
            os.fsync(fd)
            # fsync: what was written is in the store, for any reader, while mounted
            assert_store_holds(root, np.frombuffer(bytes(model), little).reshape(SHAPE))
        finally:
            os.close(fd)
        assert raw.read_bytes() == bytes(model)
        done = subprocess.run(zarrfs_command("umount", str(m.path)), capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    got = zarr.open_array(str(root), mode="r")[...]
    want = np.frombuffer(bytes(model), dtype=little).reshape(SHAPE)
    assert np.array_equal(got, want)
    assert_store_holds(root, want)
    row_zero = root / "c" / "0"
    if "shards" not in CASES[case]:
        assert not (row_zero.exists() and any(row_zero.iterdir())), "all-fill chunks not deleted"
        return
    # inner chunk row 0 (entries 0 and 1 of each shard of row 0) is left out
    shard = (row_zero / "0").read_bytes()
    first = case == "sharded-index-first"
    index = shard[:SHARD_INDEX] if first else shard[-SHARD_INDEX:]
    entries = np.frombuffer(index[:-4], "<u8").reshape(4, 2)
    assert (entries[:2] == 2**64 - 1).all() and (entries[2:] != 2**64 - 1).all()


def test_appending_rows_rewrites_zarr_json_and_the_consolidated_entry(tmp_path: Path) -> None:
    root = tmp_path / "g.zarr"
    group = zarr.open_group(str(root), mode="w")
    x = group.create_array("x", shape=(4, 3), chunks=(2, 3), dtype="<i4", fill_value=0)
    x[...] = np.arange(12).reshape(4, 3)
    zarr.consolidate_metadata(str(root))
    more = np.arange(100, 106, dtype="<i4").reshape(2, 3)
    with mounted(root) as m:
        with open(m / "x" / "array.raw", "ab") as f:
            f.write(more.tobytes())
        assert os.stat(m / "x" / "array.raw").st_size == 6 * 3 * 4
    assert json.loads((root / "x" / "zarr.json").read_text())["shape"] == [6, 3]
    consolidated = json.loads((root / "zarr.json").read_text())["consolidated_metadata"]
    assert consolidated["metadata"]["x"]["shape"] == [6, 3]
    opened = zarr.open_group(str(root), mode="r")  # reads the consolidated entry
    assert opened["x"].shape == (6, 3)
    assert np.array_equal(opened["x"][4:], more)
    assert np.array_equal(
        zarr.open_array(str(root / "x"), mode="r")[:4], np.arange(12).reshape(4, 3)
    )
    assert_store_holds(root / "x", np.concatenate([np.arange(12, dtype="<i4").reshape(4, 3), more]))


def test_np_save_onto_a_v3_array_npy(tmp_path: Path) -> None:
    root = tmp_path / "a.zarr"
    make(root, ">i4", serializer=BytesCodec(endian="big"))
    new = np.arange(20 * SHAPE[1], dtype="<i4").reshape(20, SHAPE[1])
    with mounted(root) as m:
        header = np.load(m / "array.npy", mmap_mode="r")
        assert header.dtype == np.dtype("<i4")  # v3: the natural little-endian form
        del header
        np.save(m / "array.npy", new)
    z = zarr.open_array(str(root), mode="r")
    assert z.shape == new.shape and np.array_equal(z[...], new)
    assert_store_holds(root, new)
