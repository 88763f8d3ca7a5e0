"""The ``info`` file on a real mount: what ``cat`` and ``ls -l`` see, against zarr-python's
figures, before and after a write; also for the layouts before v2."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import zarr

from tests.support.info import bytes_stored, field, initialized, write_json
from tests.support.mounting import mounted
from zarrfs.views.info import INFO_NAME


def zarr_python_store(root: Path) -> zarr.Array:
    a = zarr.create_array(
        store=str(root),
        name="arr",
        shape=(10, 12),
        chunks=(3, 5),
        dtype="<i4",
        zarr_format=2,
        fill_value=0,
        attributes={"_ARRAY_DIMENSIONS": ["y", "x"]},
    )
    a[0:3, 0:5] = 1  # chunk (0, 0)
    a[6:10, 5:12] = np.arange(28, dtype="<i4").reshape(4, 7) + 2  # (2|3, 1|2)
    return a


def test_info_on_a_mount_matches_zarr_python(tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    a = zarr_python_store(store)
    # zarr-python's figures, taken before the mount writes (they are live properties)
    before, total, nbytes = a.nchunks_initialized, a.nchunks, a.nbytes_stored()
    assert 0 < before < total
    with mounted(store, log_dir=tmp_path) as m:
        info = m / "arr" / INFO_NAME
        assert os.stat(info).st_size == 0  # stat lists nothing: /proc-style
        text = subprocess.run(["cat", str(info)], capture_output=True, check=True).stdout.decode()
        assert text.endswith("\n") and int(field(text, "Chunks not stored")) == 0, text
        assert field(text, "Name") == "/arr"
        assert field(text, "Shape") == "(10, 12)"
        assert "int32" in field(text, "Data type")
        assert field(text, "Dimension names") == "y, x"
        assert initialized(text) == (before, total)
        assert bytes_stored(text) == nbytes

        # Write all of chunk (1, 0) (rows 3..5, columns 0..4) through array.raw.
        row = 12 * 4
        with open(m / "arr" / "array.raw", "r+b") as f:
            for r in range(3, 6):
                f.seek(r * row)
                f.write(np.full(5, 9, "<i4").tobytes())
            f.flush()
            os.fsync(f.fileno())
            after = info.read_bytes().decode()
        assert os.stat(info).st_size == 0
        assert initialized(after) == (before + 1, total)
        assert int(field(after, "Chunks not stored")) == 0
        reopened = zarr.open_array(str(store / "arr"), mode="r")
        assert reopened.nchunks_initialized == before + 1
        assert bytes_stored(after) == reopened.nbytes_stored()

        ls = subprocess.run(
            ["ls", "-l", str(m / "arr")], capture_output=True, text=True, check=True
        ).stdout
        info_lines = [line for line in ls.splitlines() if line.split()[-1:] == [INFO_NAME]]
        assert len(info_lines) == 1, ls
        assert info_lines[0].split()[4] == "0"
    assert not (store / "arr" / INFO_NAME).exists()


LEGACY = [
    # (corpus array, chunk key regex relative to the array, documents, files that are no chunks)
    (
        "v1-zarr-1.1.0/i4_2d_blosc_lz4",
        r"(\d+)\.(\d+)",
        ("meta", "attrs"),
        ("notes.txt", "1.x", "3.0", "0.3", ".0.1.zarrfs-tmp-0a1b2c3d"),
    ),
    (
        "v0-zarr-0.4.0/i4_2d_lz4_shuffle",
        r"__zdata__/(\d+)\.(\d+)\.blosc",
        ("__zmeta__", "__zattr__"),
        ("notes.txt", "0.1", "__zdata__/0.1", "__zdata__/3.0.blosc", "__zdata__/0.1.blosc.bak"),
    ),
]


def legacy_chunks(array: Path, pattern: str) -> dict[str, int]:
    """The chunk files inside the (3, 3) grid of a (10, 12) array in (4, 5) chunks."""
    found = {}
    for p in array.rglob("*"):
        key = p.relative_to(array).as_posix()
        match = re.fullmatch(pattern, key)
        if p.is_file() and match and all(int(i) < 3 for i in match.groups()):
            found[key] = p.stat().st_size
    return found


@pytest.mark.parametrize(
    "name,pattern,documents,strays", LEGACY, ids=[a[0].split("/")[0] for a in LEGACY]
)
def test_info_of_legacy_arrays_on_a_mount(
    corpus: Path,
    tmp_path: Path,
    name: str,
    pattern: str,
    documents: tuple[str, ...],
    strays: tuple[str, ...],
) -> None:
    store = tmp_path / "root"
    write_json(store / ".zgroup", {"zarr_format": 2})
    array = store / "old"
    shutil.copytree(corpus / "data" / "generated" / name, array)
    assert len(legacy_chunks(array, pattern)) == 9
    # Leave chunk (0, 0) unwritten and add files that are no chunks of the grid.
    first = min(legacy_chunks(array, pattern))
    (array / first).unlink()
    for stray in strays:
        (array / stray).write_bytes(b"stray")
    chunks = legacy_chunks(array, pattern)
    assert len(chunks) == 8
    docs = sum((array / d).stat().st_size for d in documents if (array / d).exists())
    with mounted(store, log_dir=tmp_path) as m:
        info = m / "old" / INFO_NAME
        assert os.stat(info).st_size == 0
        text = info.read_text()
        assert field(text, "Name") == "/old"
        assert field(text, "Zarr format") == ("1" if "meta" in documents else "0")
        assert initialized(text) == (8, 9)
        assert bytes_stored(text) == sum(chunks.values()) + docs
        # Write chunk (0, 0) back: rows 0..3, columns 0..4.
        with open(m / "old" / "array.raw", "r+b") as f:
            for r in range(4):
                f.seek(r * 12 * 4)
                f.write(np.arange(5, dtype="<i4").tobytes())
            os.fsync(f.fileno())
        after = info.read_text()
        assert initialized(after) == (9, 9)
        assert os.stat(info).st_size == 0
        ls = subprocess.run(["ls", "-l", str(m / "old")], capture_output=True, text=True).stdout
        assert INFO_NAME in ls.split(), ls
    assert (array / first).is_file()
    assert bytes_stored(after) == sum(legacy_chunks(array, pattern).values()) + docs
