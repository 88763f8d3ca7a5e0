"""``array.tif`` through real mounts, read by the real programs: tifffile, GDAL
(Debian's gdal-bin), libtiff's tiffinfo and tiffdump (libtiff-tools) and ImageJ
(Debian's imagej, headless), against zarr-python's values.

A missing program fails these tests (scripts/install.sh installs them): never a skip.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr

from tests.support.headers import array_name, random_values, read_exact, require
from tests.support.mounting import Mounted, mounted
from tests.support.paths import REPO

TIF = "array.tif"
IMAGEJ_JAR = Path("/usr/share/java/ij.jar")
READ_STACK = REPO / "tests" / "support" / "imagej" / "ReadStack.java"
# dtype → GDAL's type name (GDAL 3.6 reads int8 as Byte, float16 as Float32).
GDAL_TYPES = {
    "|u1": "Byte",
    "|i1": "Byte",
    "<u2": "UInt16",
    ">i2": "Int16",
    ">u4": "UInt32",
    "<i4": "Int32",
    "<i8": "Int64",
    ">u8": "UInt64",
    "<f2": "Float32",
    "<f4": "Float32",
    ">f4": "Float32",
    ">f8": "Float64",
    "<c8": "CFloat32",
    ">c16": "CFloat64",
}
SHAPES = {  # ndim → (shape, chunks): edge chunks on every axis
    2: ((13, 17), (5, 6)),
    3: ((3, 11, 9), (2, 4, 4)),
    4: ((2, 3, 7, 5), (1, 2, 3, 4)),
}
# Planes of 1.4 MB: more than one strip each.
LARGE = ((2, 700, 500), (1, 256, 256), "<f4")






def gdalinfo(path: Path) -> dict:
    result = subprocess.run(["gdalinfo", "-json", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@dataclass
class Values:
    mount: Mounted
    references: dict[str, np.ndarray]  # array name → zarr-python's values


@pytest.fixture(scope="module")
def values(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Values]:
    require("gdalinfo", "gdal_translate", "tiffinfo", "tiffdump", "java")
    root = tmp_path_factory.mktemp("tiff") / "values.zarr"
    group = zarr.open_group(str(root), mode="w", zarr_format=2)
    rng = np.random.default_rng(21)
    references = {}
    cases = [(d, ndim, *SHAPES[ndim]) for d in GDAL_TYPES for ndim in SHAPES]
    cases.append((LARGE[2], 3, LARGE[0], LARGE[1]))
    for dtype_text, ndim, shape, chunks in cases:
        dtype = np.dtype(dtype_text)
        name = array_name(dtype_text, ndim) + ("_large" if shape == LARGE[0] else "")
        z = group.create_array(
            name,
            shape=shape,
            chunks=chunks,
            dtype=dtype,
            fill_value=7,
            compressors=[{"id": "zlib", "level": 1}],
        )
        # Only the first row of chunks is stored: the rest reads as fill value.
        z[: chunks[0]] = random_values(rng, dtype, (chunks[0], *shape[1:]))
        references[name] = z[...]
    for name, dtype, shape in (
        ("bool", "|b1", (4, 3)),
        ("text", "<U3", (4, 3)),
        ("record", [("a", "<i4"), ("b", "<f4")], (4, 3)),
        ("line", "<f4", (12,)),
        ("empty", "<f4", (0, 3)),
    ):
        group.create_array(name, shape=shape, chunks=(2, 3)[: len(shape)], dtype=dtype)
    with mounted(root, "--read-only", log_dir=root.parent) as m:
        yield Values(m, references)


@pytest.mark.parametrize("ndim", sorted(SHAPES))
@pytest.mark.parametrize("dtype", sorted(GDAL_TYPES))
def test_tifffile_reads_the_values(values: Values, dtype: str, ndim: int) -> None:
    name = array_name(dtype, ndim)
    expected = values.references[name]
    path = values.mount / name / TIF
    data = read_exact(path)
    raw = read_exact(values.mount / name / "array.raw")
    assert data.endswith(raw)  # the array's bytes as they are: no byte converted
    with tifffile.TiffFile(path) as tif:
        assert tif.byteorder == (">" if dtype[0] == ">" else "<")
        pages = len(tif.pages)
        got = tif.asarray(key=range(pages)) if pages > 1 else tif.asarray()
    assert pages == int(np.prod(expected.shape[:-2]))
    assert got.dtype.newbyteorder("=") == expected.dtype.newbyteorder("=")
    np.testing.assert_array_equal(got.reshape(expected.shape), expected)


def test_tifffile_maps_the_file(values: Values) -> None:
    names = [array_name(d, 3) for d in GDAL_TYPES if d != ">c16"]
    for name in ["f4le_3d_large", "i2be_2d", "f8be_4d", *names]:
        expected = values.references[name]
        mapped = tifffile.memmap(values.mount / name / TIF, mode="r")
        try:
            np.testing.assert_array_equal(np.asarray(mapped).reshape(expected.shape), expected)
        finally:
            mapped._mmap.close()  # type: ignore[attr-defined]  # the mount must be idle


@pytest.mark.parametrize("dtype", sorted(GDAL_TYPES))
def test_gdal_reads_the_first_image(values: Values, dtype: str, tmp_path: Path) -> None:
    for ndim in (2, 3):
        name = array_name(dtype, ndim)
        expected = values.references[name]
        expected = expected if ndim == 2 else expected[0]
        path = values.mount / name / TIF
        info = gdalinfo(path)
        assert info["driverShortName"] == "GTiff"
        assert info["size"] == [expected.shape[-1], expected.shape[-2]]
        assert [b["type"] for b in info["bands"]] == [GDAL_TYPES[dtype]]
        out = tmp_path / f"{name}.tif"
        subprocess.run(["gdal_translate", "-q", "-of", "GTiff", str(path), str(out)], check=True)
        got = tifffile.imread(out)  # GDAL's copy, in GDAL's type
        np.testing.assert_array_equal(got, expected.astype(got.dtype))
        if ndim == 3:  # the other planes are GDAL's subdatasets
            pages = values.references[name].shape[0]
            assert len(info["metadata"]["SUBDATASETS"]) == 2 * pages


def test_gdal_reads_a_plane_in_strips(values: Values, tmp_path: Path) -> None:
    name = "f4le_3d_large"
    expected = values.references[name]
    path = values.mount / name / TIF
    info = gdalinfo(path)
    width = expected.shape[-1]
    assert info["bands"][0]["block"] == [width, (1 << 20) // (width * 4)]
    out = tmp_path / "plane.raw"
    subprocess.run(
        ["gdal_translate", "-q", "-of", "ENVI", f"GTIFF_DIR:2:{path}", str(out)], check=True
    )
    got = np.fromfile(out, dtype="<f4").reshape(expected.shape[1:])
    np.testing.assert_array_equal(got, expected[1])


def test_tiffinfo_and_tiffdump_read_every_directory(values: Values) -> None:
    for name in ("u2le_3d", "f8be_4d", "f4le_3d_large"):
        expected = values.references[name]
        path = values.mount / name / TIF
        info = subprocess.run(["tiffinfo", str(path)], capture_output=True, text=True)
        assert info.returncode == 0, info.stderr
        height, width = expected.shape[-2:]
        sizes = f"Image Width: {width} Image Length: {height}"
        assert info.stdout.count(sizes) == int(np.prod(expected.shape[:-2]))
        dump = subprocess.run(["tiffdump", str(path)], capture_output=True, text=True)
        assert dump.returncode == 0, dump.stderr
        assert dump.stdout.count("Directory ") == int(np.prod(expected.shape[:-2]))
        assert ("big-endian" in dump.stdout) == (name[2:4] == "be")


def imagej(path: Path, x: int, y: int, slice_: int) -> subprocess.CompletedProcess[str]:
    """ImageJ's own opener run headless on ``path`` (tests/support/imagej/ReadStack.java)."""
    assert IMAGEJ_JAR.is_file(), "scripts/install.sh installs imagej"
    command = ["java", "-Djava.awt.headless=true", "-cp", str(IMAGEJ_JAR), str(READ_STACK)]
    command += [str(path), str(x), str(y), str(slice_)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", ["u2le_3d", "f4le_3d", "f4be_4d", "u1_3d"])
def test_imagej_opens_the_stack(values: Values, name: str) -> None:
    """ImageJ 1.52 headless (its own opener, through a Java source file: the macro
    runner's open() builds menus, which a headless JVM refuses)."""
    expected = values.references[name]
    x, y, page = 2, 3, 1
    result = imagej(values.mount / name / TIF, x, y, page + 1)
    assert result.returncode == 0, result.stderr
    slices, width, height, depth, mean, value = result.stdout.split()
    planes = expected.reshape(-1, *expected.shape[-2:])
    assert (int(slices), int(width), int(height)) == (len(planes), *expected.shape[:-3:-1])
    assert int(depth) == {1: 8, 2: 16, 4: 32}[expected.dtype.itemsize]
    assert float(value) == pytest.approx(float(planes[page, y, x]), rel=1e-6)
    assert float(mean) == pytest.approx(float(expected.astype(np.float64).mean()), rel=1e-5)


def test_imagej_has_no_64_bit_samples(values: Values) -> None:
    result = imagej(values.mount / "f8be_3d" / TIF, 0, 0, 1)
    assert result.returncode == 2 and "Unsupported format" in result.stderr + result.stdout


def test_listed_where_tiff_has_the_dtype_and_two_axes(values: Values) -> None:
    for name in ("bool", "text", "record", "line"):
        assert TIF not in os.listdir(values.mount / name), name
    assert TIF in os.listdir(values.mount / "u1_2d")
    # An axis of length 0: listed (the array may grow), empty.
    assert read_exact(values.mount / "empty" / TIF) == b""


def test_stat_reads_no_chunk_and_reads_are_counted(values: Values) -> None:
    stats = values.mount / ".zarrfs" / "stats"
    before = json.loads(stats.read_text())
    size = os.stat(values.mount / "f8be_3d" / TIF).st_size
    after = json.loads(stats.read_text())
    assert after["chunks_loaded"] == before["chunks_loaded"]
    assert size > values.references["f8be_3d"].nbytes
    read_exact(values.mount / "f8be_3d" / TIF)
    assert json.loads(stats.read_text())["bytes_read"] >= after["bytes_read"] + size


# -- position from xarray coordinates, resizes -------------------------------------------


def coordinate(group: zarr.Group, name: str, data: np.ndarray) -> None:
    z = group.create_array(name, shape=data.shape, chunks=(7,), dtype=data.dtype)
    z[...] = data
    z.attrs.update({"_ARRAY_DIMENSIONS": [name], "units": "m"})


def test_gdal_reads_the_position_and_a_resize_changes_the_file(tmp_path: Path) -> None:
    root = tmp_path / "rw.zarr"
    top = zarr.open_group(str(root), mode="w", zarr_format=2)
    coordinate(top, "y", np.arange(9.5, 1, -1.0))
    coordinate(top, "x", np.arange(100.5, 108, 1.0))
    grid = top.create_array("grid", shape=(9, 8), chunks=(4, 4), dtype="<f4")
    grid.attrs["_ARRAY_DIMENSIONS"] = ["y", "x"]
    grid[...] = np.arange(72, dtype="<f4").reshape(9, 8)
    south = top.create_array("south", shape=(9, 8), chunks=(4, 4), dtype=">i2")
    south.attrs["_ARRAY_DIMENSIONS"] = ["y", "x"]
    cube_data = np.arange(120, dtype=">u2").reshape(4, 6, 5)
    cube = top.create_array("cube", shape=(4, 6, 5), chunks=(3, 4, 4), dtype=">u2")
    cube[...] = cube_data
    with mounted(root) as m:
        size = os.stat(m / "grid" / TIF).st_size
        info = gdalinfo(m / "grid" / TIF)
        assert info["geoTransform"] == [100.0, 1.0, 0.0, 10.0, 0.0, -1.0]
        # y written increasing through the mount: south up, same size.
        (m / "y" / "array.raw").write_bytes(np.arange(0.5, 9, 1.0).tobytes())
        info = gdalinfo(m / "south" / TIF)
        assert info["geoTransform"] == [100.0, 1.0, 0.0, 0.0, 0.0, 1.0]
        assert os.stat(m / "grid" / TIF).st_size == size

        before = os.stat(m / "cube" / TIF).st_size  # the kernel now holds this size
        more = np.full((3, 6, 5), 9, dtype=">u2")
        with open(m / "cube" / "array.raw", "ab") as f:
            f.write(more.tobytes())
        expected = np.concatenate([cube_data, more])
        assert os.stat(m / "cube" / TIF).st_size > before + more.nbytes
        with tifffile.TiffFile(m / "cube" / TIF) as tif:
            assert len(tif.pages) == 7
            got = tif.asarray(key=range(7))
        np.testing.assert_array_equal(got, expected)
        os.truncate(m / "cube" / "array.raw", 2 * 6 * 5 * 2)
        assert tifffile.imread(m / "cube" / TIF, key=range(2)).shape == (2, 6, 5)
        with pytest.raises(PermissionError):
            open(m / "cube" / TIF, "r+b").close()
