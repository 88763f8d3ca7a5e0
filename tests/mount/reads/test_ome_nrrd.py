"""OME-Zarr images through real mounts: ``array.nhdr`` and ``volumes/*.nhdr`` read by
SimpleITK and pynrrd place the samples as the image's ``multiscales`` say, and each
volume holds zarr-python's ``z[t, c]``. Stores: OME-Zarr 0.4 on Zarr v2 (zarr-python
3 writing format 2: .zgroup, .zattrs, .zarray) and 0.5 on Zarr v3.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nrrd
import numpy as np
import pytest
import SimpleITK as sitk
import zarr

from tests.support.headers import read_exact
from tests.support.mounting import mounted
from tests.support.stores import CountingStore
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.formats.metadata import hierarchy
from zarrfs.namespace.nodes import DirNode, FileNode
from zarrfs.namespace.tree import Tree

SHAPE = (2, 3, 4, 5, 6)  # t, c, z, y, x
AXES = [
    {"name": "t", "type": "time", "unit": "second"},
    {"name": "c", "type": "channel"},
    {"name": "z", "type": "space", "unit": "micrometer"},
    {"name": "y", "type": "space", "unit": "micrometer"},
    {"name": "x", "type": "space", "unit": "micrometer"},
]
# level → (scale, translation) in t, c, z, y, x
LEVELS = {
    "0": ([60.0, 1.0, 2.0, 0.325, 0.325], [5.0, 0.0, 30.0, 20.0, 10.0]),
    "1": ([60.0, 1.0, 4.0, 0.65, 0.65], [5.0, 0.0, 31.0, 20.1625, 10.1625]),
}


def multiscale() -> dict[str, Any]:
    return {
        "name": "cells",
        "axes": AXES,
        "datasets": [
            {
                "path": path,
                "coordinateTransformations": [
                    {"type": "scale", "scale": scale},
                    {"type": "translation", "translation": shift},
                ],
            }
            for path, (scale, shift) in LEVELS.items()
        ],
    }


def write_image(root: Path, zarr_format: int, dtype: str = "<u2") -> dict[str, np.ndarray]:
    """A two-level tczyx image; its values by level."""
    group = zarr.open_group(str(root), mode="w", zarr_format=zarr_format)
    if zarr_format == 2:
        group.attrs["multiscales"] = [{"version": "0.4", **multiscale()}]
    else:
        group.attrs["ome"] = {"version": "0.5", "multiscales": [multiscale()]}
    values = {}
    rng = np.random.default_rng(5)
    for path, shape in (("0", SHAPE), ("1", (*SHAPE[:2], 2, 3, 3))):
        z = group.create_array(path, shape=shape, chunks=(1, 1, 2, 5, 6), dtype=dtype)
        z[...] = rng.integers(0, 60000, size=shape).astype(dtype)
        values[path] = z[...]
    return values


@dataclass
class Image:
    mounts: dict[str, Path]  # store → its mount point
    values: dict[str, dict[str, np.ndarray]]  # store → level → values


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Image]:
    root = tmp_path_factory.mktemp("ome")
    values = {
        "v04": write_image(root / "v04", 2),
        "v05": write_image(root / "v05", 3, dtype=">i2"),
    }
    with (
        mounted(root / "v04", "--read-only", log_dir=root) as m04,
        mounted(root / "v05", "--read-only", log_dir=root) as m05,
    ):
        yield Image({"v04": m04.path, "v05": m05.path}, values)


def mount_of(image: Image, store: str) -> Path:
    return image.mounts[store]



def header_fields(data: bytes) -> dict[str, str]:
    out = {}
    for line in data.decode("ascii").splitlines()[1:]:
        name, sep, value = line.partition(": ")
        if sep and not line.startswith("#"):
            out[name] = value
    return out


@pytest.mark.parametrize("store", ["v04", "v05"])
@pytest.mark.parametrize("level", sorted(LEVELS))
def test_simpleitk_reads_each_volume_with_its_spacing_and_origin(
    image: Image, store: str, level: str
) -> None:
    expected = image.values[store][level]
    scale, shift = LEVELS[level]
    directory = mount_of(image, store) / level / "volumes"
    names = sorted(os.listdir(directory))
    assert names == [f"t{t:04d}_c{c:02d}.nhdr" for t in range(2) for c in range(3)]
    for name in names:
        t, c = int(name[1:5]), int(name[7:9])
        volume = sitk.ReadImage(str(directory / name))
        assert volume.GetDimension() == 3
        assert volume.GetSpacing() == pytest.approx(scale[:1:-1])  # x, y, z
        assert volume.GetOrigin() == pytest.approx(shift[:1:-1])
        np.testing.assert_array_equal(sitk.GetArrayFromImage(volume), expected[t, c])


@pytest.mark.parametrize("store", ["v04", "v05"])
def test_pynrrd_reads_the_last_volume_and_the_placement(image: Image, store: str) -> None:
    """pynrrd reads a raw data file to its end: of the volumes, the last one."""
    expected = image.values[store]["0"]
    data, header = nrrd.read(
        str(mount_of(image, store) / "0" / "volumes" / "t0001_c02.nhdr"), index_order="C"
    )
    np.testing.assert_array_equal(data, expected[1, 2])
    assert list(header["spacings"]) == [0.325, 0.325, 2.0]
    assert list(header["axis mins"]) == [10.0, 20.0, 30.0]
    assert header["units"] == ["micrometer"] * 3
    assert header["labels"] == ["x", "y", "z"]
    assert header["kinds"] == ["space"] * 3
    with pytest.raises(nrrd.NRRDError, match="Size of the data"):
        nrrd.read(str(mount_of(image, store) / "0" / "volumes" / "t0000_c00.nhdr"))


@pytest.mark.parametrize("store", ["v04", "v05"])
def test_array_nhdr_has_units_labels_and_kinds(image: Image, store: str) -> None:
    """The whole image: pynrrd as stored, SimpleITK as a 4-D image (x, y, z, t) of
    3-vectors (the channel axis, NRRD's list axis, last)."""
    expected = image.values[store]["0"]
    path = mount_of(image, store) / "0" / "array.nhdr"
    fields = header_fields(read_exact(path))
    assert fields["labels"] == '"x" "y" "z" "c" "t"'  # v0.4 on Zarr v2 too
    assert fields["kinds"] == "space space space list time"
    assert fields["units"] == '"micrometer" "micrometer" "micrometer" "" "second"'
    data, header = nrrd.read(str(path), index_order="C")
    np.testing.assert_array_equal(data, expected)
    assert list(header["spacings"])[::2] == [0.325, 2.0, 60.0]
    whole = sitk.ReadImage(str(path))
    assert whole.GetDimension() == 4 and whole.GetNumberOfComponentsPerPixel() == 3
    assert whole.GetSpacing() == pytest.approx((0.325, 0.325, 2.0, 60.0))
    assert whole.GetOrigin() == pytest.approx((10.0, 20.0, 30.0, 5.0))
    np.testing.assert_array_equal(sitk.GetArrayFromImage(whole), np.moveaxis(expected, 1, -1))


def test_info_shows_the_axes_and_the_volumes(image: Image) -> None:
    info = (mount_of(image, "v04") / "0" / "info").read_text()
    assert "Axes (OME)         : t (time): 60 second from 5, c (channel): 1 from 0, " in info
    assert "x (space): 0.325 micrometer from 10" in info
    assert "NRRD volumes       : 6 in volumes/, one per (t, c)" in info


def test_listing_and_stat_of_the_volumes_read_no_chunk(tmp_path: Path) -> None:
    write_image(tmp_path / "img", 2)
    store = CountingStore(str(tmp_path / "img"))
    tree = Tree(store, ChunkCache(store, 2**20))
    volumes = tree.resolve("0/volumes")
    assert isinstance(volumes, DirNode)
    sizes = []
    for name in tree.entries(volumes):
        file = tree.lookup(volumes, name)
        assert isinstance(file, FileNode) and file.view.volatile
        sizes.append(file.view.size)
    assert len(sizes) == 6 and all(sizes)
    documents = {*hierarchy.NODE_KEYS, *hierarchy.ROOT_KEYS}
    assert not [k for k in store.gets if k.rpartition("/")[2] not in documents]


def test_too_many_volumes_give_no_directory_and_info_says_why(tmp_path: Path) -> None:
    root = tmp_path / "many.zarr"
    group = zarr.open_group(str(root), mode="w", zarr_format=2)
    ms = multiscale()
    ms["datasets"] = [
        {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": LEVELS["0"][0]}]}
    ]
    group.attrs["multiscales"] = [{"version": "0.4", **ms}]
    group.create_array("0", shape=(1025, 4, 1, 2, 2), chunks=(64, 4, 1, 2, 2), dtype="<u1")
    with mounted(root, "--read-only", log_dir=tmp_path) as m:
        listing = os.listdir(m / "0")
        assert "volumes" not in listing and "array.nhdr" in listing
        info = (m / "0" / "info").read_text()
        assert "NRRD volumes       : none: 4100 volumes, more than 4096" in info
        fields = header_fields(read_exact(m / "0" / "array.nhdr"))
        assert fields["sizes"] == "2 2 1 4 1025"
    assert "0: no volumes/: 4100 volumes, more than 4096" in m.log()


def test_volumes_follow_a_resize_through_the_mount(tmp_path: Path) -> None:
    """Appending a time point changes array.nhdr's sizes; the volumes listed keep
    reading their data; one a shrink leaves beyond the end reads as an empty file."""
    root = tmp_path / "rw.zarr"
    values = write_image(root, 2)["0"]
    more = np.full((1, *SHAPE[1:]), 9, dtype="<u2")
    with mounted(root, log_dir=tmp_path) as m:
        nhdr = m / "0" / "array.nhdr"
        assert header_fields(read_exact(nhdr))["sizes"] == "6 5 4 3 2"
        with open(m / "0" / "array.raw", "ab") as f:
            f.write(more.tobytes())
        assert header_fields(read_exact(nhdr))["sizes"] == "6 5 4 3 3"
        grown = np.concatenate([values, more])
        whole, _ = nrrd.read(str(nhdr), index_order="C")
        np.testing.assert_array_equal(whole, grown)
        volume = sitk.ReadImage(str(m / "0" / "volumes" / "t0001_c02.nhdr"))
        np.testing.assert_array_equal(sitk.GetArrayFromImage(volume), values[1, 2])
        os.truncate(m / "0" / "array.raw", values[0].nbytes)
        assert read_exact(m / "0" / "volumes" / "t0001_c00.nhdr") == b""
        first = sitk.ReadImage(str(m / "0" / "volumes" / "t0000_c01.nhdr"))
        np.testing.assert_array_equal(sitk.GetArrayFromImage(first), values[0, 1])
    assert zarr.open_array(str(root / "0"), mode="r").shape == (1, *SHAPE[1:])
