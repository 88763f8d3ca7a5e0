"""Consolidated metadata through a real mount: the hierarchy listed from ``.zmetadata`` or
the root ``zarr.json`` alone (all of the store with ``--no-consolidated``), and
``.zmetadata`` kept current by a resize."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import zarr

from tests.support.consolidated import ARRAY, hierarchy_entries, write_store, write_v2_hierarchy
from tests.support.mounting import mounted
from tests.support.stores import v2_zarray


def test_mount_lists_from_zmetadata_and_no_consolidated_lists_the_store(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    write_v2_hierarchy(root, groups=2, arrays=3)
    (root / "g1" / "late").mkdir()
    (root / "g1" / "late" / ".zarray").write_text(json.dumps(v2_zarray([4], [2])))
    with mounted(root, "--read-only") as m:
        listing = subprocess.run(
            ["ls", "-R", str(m.path)], capture_output=True, text=True, check=True
        ).stdout
        assert "a2" in listing and "late" not in listing
        assert sorted(os.listdir(m / "g1")) == [".zgroup", "a0", "a1", "a2", "group.nc"]
    with mounted(root, "--read-only", "--no-consolidated") as m:
        assert "late" in os.listdir(m / "g1")


def test_resize_through_the_mount_rewrites_zmetadata(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    group = zarr.open_group(str(root), mode="w", zarr_format=2)
    arr = group.create_array("t", shape=(2, 3), chunks=(2, 3), dtype="<i8", fill_value=0)
    arr[:] = np.arange(6).reshape(2, 3)
    zarr.consolidate_metadata(str(root))
    before = json.loads((root / ".zmetadata").read_bytes())
    extra = np.arange(100, 109, dtype="<i8").reshape(3, 3)
    with mounted(root) as m:
        with open(m / "t" / "array.raw", "ab") as f:
            f.write(extra.tobytes())
        shown = json.loads((m / ".zmetadata").read_bytes())
        assert shown["metadata"]["t/.zarray"]["shape"] == [5, 3]
        assert json.loads((m / "t" / ".zarray").read_bytes())["shape"] == [5, 3]
    after = json.loads((root / ".zmetadata").read_bytes())
    assert after["metadata"]["t/.zarray"]["shape"] == [5, 3]
    # Nothing else in the consolidated document changed.
    after["metadata"]["t/.zarray"]["shape"] = [2, 3]
    assert after == before
    reopened = zarr.open_consolidated(str(root), zarr_format=2)
    expected = np.concatenate([np.arange(6).reshape(2, 3), extra])
    np.testing.assert_array_equal(reopened["t"][:], expected)
    np.testing.assert_array_equal(zarr.open_array(str(root / "t"))[:], expected)


def test_mount_lists_from_the_root_zarr_json(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    write_store(root, hierarchy_entries(groups=2, arrays=3))
    (root / "g1" / "late").mkdir()
    (root / "g1" / "late" / "zarr.json").write_text(json.dumps(ARRAY))
    with mounted(root, "--read-only", log_dir=tmp_path) as m:
        listing = subprocess.run(
            ["ls", "-R", str(m.path)], capture_output=True, text=True, check=True
        ).stdout
        assert "a2" in listing and "late" not in listing
        assert sorted(os.listdir(m / "g1")) == ["a0", "a1", "a2", "group.nc", "zarr.json"]
        assert (m / "zarr.json").read_bytes() == (root / "zarr.json").read_bytes()
        assert os.stat(m / "g1" / "a0" / "array.raw").st_size == 16
    with mounted(root, "--read-only", "--no-consolidated", log_dir=tmp_path) as m:
        assert "late" in os.listdir(m / "g1")


def test_a_walk_finds_the_arrays_after_the_first_listed_ahead(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    write_v2_hierarchy(root, groups=1, arrays=60)
    group = zarr.open_consolidated(str(root), zarr_format=2)["g0"]
    with mounted(root, "--read-only") as m:
        listing = subprocess.run(
            ["ls", "-lR", str(m / "g0")], capture_output=True, text=True, check=True
        ).stdout
        stats = json.loads((m / ".zarrfs" / "stats").read_bytes())
        # The walk's idle moments listed arrays before it opened them.
        assert stats["listed_ahead"] > 0
        for name, array in group.arrays():
            assert f"{m / 'g0' / name}:" in listing
            assert os.path.getsize(m / "g0" / name / "array.raw") == array.nbytes
            np.testing.assert_array_equal(np.load(m / "g0" / name / "array.npy"), array[:])
