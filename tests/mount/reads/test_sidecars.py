"""``array.hdr`` and ``array.nhdr`` through real mounts, read by the real programs:
GDAL (Debian's gdal-bin), SimpleITK and pynrrd, against zarr-python's values.

A missing program fails these tests (scripts/install.sh installs them): never a skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nrrd
import numpy as np
import pytest
import SimpleITK as sitk
import trio
import zarr
from zarr.codecs import BytesCodec

from tests.support.headers import (
    array_name,
    gdalinfo,
    header_fields,
    random_values,
    read_exact,
    require,
)
from tests.support.mounting import Mounted, mounted, peak_rss
from tests.support.stores import CountingStore
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.formats.metadata import hierarchy
from zarrfs.namespace.nodes import DirNode, FileNode
from zarrfs.namespace.tree import Tree
from zarrfs.views import sidecars as views_sidecars

HDR, NHDR = "array.hdr", "array.nhdr"
# Read through GDAL (ENVI) and, except complex, through NRRD readers.
GDAL_DTYPES = ["|u1", "<i2", ">i2", "<u2", ">u2", "<i4", ">i4", "<u4", ">u4"]
GDAL_DTYPES += ["<f4", ">f4", "<f8", ">f8", "<c8", ">c8"]
NRRD_ONLY = ["|i1", "<i8", ">i8", "<u8", ">u8"]  # no ENVI type GDAL 3.6 reads
GDAL_TYPES = {"u1": 1, "i2": 2, "u2": 12, "i4": 3, "u4": 13, "f4": 4, "f8": 5, "c8": 6}
SHAPES = {  # ndim → (shape, chunks): edge chunks on every axis
    2: ((13, 17), (5, 6)),
    3: ((3, 11, 9), (2, 4, 4)),
    4: ((2, 3, 7, 5), (1, 2, 3, 4)),
}



def key(dtype: np.dtype) -> str:
    return f"{dtype.kind}{dtype.itemsize}"



def gdal_read(raw: Path, out: Path, shape: tuple[int, ...]) -> np.ndarray:
    """``array.raw`` read by GDAL (gdal_translate to a local ENVI file, native order)."""
    subprocess.run(["gdal_translate", "-q", "-of", "ENVI", str(raw), str(out)], check=True)
    written = header_fields(out.with_suffix(".hdr").read_bytes(), "=")
    codes = {code: name for name, code in GDAL_TYPES.items()}
    dtype = np.dtype(codes[int(written["data type"])])
    assert written["byte order"] == "0"
    return np.fromfile(out, dtype=dtype).reshape(shape)


# -- values, every type, both byte orders, 2-D to 4-D -----------------------------------


@dataclass
class Values:
    mount: Mounted
    references: dict[str, np.ndarray]  # array name → zarr-python's values


@pytest.fixture(scope="module")
def values(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Values]:
    require("gdalinfo", "gdal_translate")
    root = tmp_path_factory.mktemp("sidecars") / "values.zarr"
    group = zarr.open_group(str(root), mode="w", zarr_format=2)
    rng = np.random.default_rng(14)
    references = {}
    for dtype_text in GDAL_DTYPES + NRRD_ONLY:
        dtype = np.dtype(dtype_text)
        for ndim, (shape, chunks) in SHAPES.items():
            name = array_name(dtype_text, ndim)
            fill = 7 + 2j if dtype.kind == "c" else 7
            z = group.create_array(
                name,
                shape=shape,
                chunks=chunks,
                dtype=dtype,
                fill_value=fill,
                compressors=[{"id": "zlib", "level": 1}],
            )
            # Only the first row of chunks is stored: the rest reads as fill value.
            z[: chunks[0]] = random_values(rng, dtype, (chunks[0], *shape[1:]))
            references[name] = z[...]
    with mounted(root, "--read-only", log_dir=root.parent) as m:
        yield Values(m, references)


@pytest.mark.parametrize("ndim", sorted(SHAPES))
@pytest.mark.parametrize("dtype", GDAL_DTYPES)
def test_gdal_reads_array_raw_through_array_hdr(
    values: Values, dtype: str, ndim: int, tmp_path: Path
) -> None:
    name = array_name(dtype, ndim)
    expected = values.references[name]
    directory = values.mount / name
    listing = os.listdir(directory)
    assert HDR in listing and "array.raw.hdr" not in listing  # GDAL would take that first
    fields = header_fields(read_exact(directory / HDR), "=")
    assert fields["byte order"] == ("1" if dtype[0] == ">" else "0")
    info = gdalinfo(directory / "array.raw")
    assert info["driverShortName"] == "ENVI"
    assert info["size"] == [expected.shape[-1], expected.shape[-2]]
    assert len(info["bands"]) == int(np.prod(expected.shape[:-2]))
    got = gdal_read(directory / "array.raw", tmp_path / "out.raw", expected.shape)
    assert key(got.dtype) == key(np.dtype(dtype))  # GDAL took the type the header says
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("ndim", sorted(SHAPES))
@pytest.mark.parametrize("dtype", [d for d in GDAL_DTYPES if d[1] != "c"] + NRRD_ONLY)
def test_simpleitk_and_pynrrd_read_array_nhdr(values: Values, dtype: str, ndim: int) -> None:
    name = array_name(dtype, ndim)
    expected = values.references[name]
    path = values.mount / name / NHDR
    fields = header_fields(read_exact(path), ":")
    assert fields["sizes"] == " ".join(str(s) for s in reversed(expected.shape))
    image = sitk.GetArrayFromImage(sitk.ReadImage(str(path)))
    assert image.shape == expected.shape and key(image.dtype) == key(np.dtype(dtype))
    np.testing.assert_array_equal(image, expected)
    data, _ = nrrd.read(str(path), index_order="C")
    assert data.shape == expected.shape and key(data.dtype) == key(np.dtype(dtype))
    np.testing.assert_array_equal(data, expected)


@pytest.mark.parametrize("dtype", ["<i8", ">i8", "<u8", ">u8"])
def test_64_bit_integers_get_envi_codes_14_and_15(values: Values, dtype: str) -> None:
    """Written although Debian 12's GDAL 3.6 does not know them (newer GDAL does)."""
    name = array_name(dtype, 3)
    data = read_exact(values.mount / name / HDR)
    fields = header_fields(data, "=")
    assert fields["data type"] == ("14" if dtype[1] == "i" else "15")
    assert fields["byte order"] == ("1" if dtype[0] == ">" else "0")
    shape = values.references[name].shape
    assert (fields["samples"], fields["lines"], fields["bands"]) == (
        str(shape[2]),
        str(shape[1]),
        str(shape[0]),
    )
    result = subprocess.run(
        ["gdalinfo", str(values.mount / name / "array.raw")], capture_output=True, check=False
    )
    assert result.returncode != 0 and b"data_type" in result.stderr  # GDAL 3.6's refusal


# -- which arrays get which header ------------------------------------------------------


def test_headers_only_where_the_format_has_the_dtype(tmp_path: Path) -> None:
    root = tmp_path / "types.zarr"
    group = zarr.open_group(str(root), mode="w", zarr_format=2)
    cases = {  # name → (dtype, the headers expected)
        "int8": ("|i1", {NHDR}),
        "bool": ("|b1", set()),
        "half": ("<f2", set()),
        "complex128": (">c16", {HDR}),
        "bytes": ("|S5", set()),
        "text": ("<U3", set()),
        "datetime": ("<M8[s]", set()),
        "record": ([("a", "<i4"), ("b", "<f4")], set()),
        "float64": ("<f8", {HDR, NHDR}),
    }
    for name, (dtype, _) in cases.items():
        group.create_array(name, shape=(4, 3), chunks=(2, 3), dtype=dtype)
    zero = group.create_array("scalar", shape=(), dtype="<f4", fill_value=2.5)
    zero[...] = 1.5
    v3 = zarr.create_array(
        str(root / "v3big"),
        shape=(5, 4),
        chunks=(2, 2),
        dtype="<f4",
        serializer=BytesCodec(endian="big"),
        zarr_format=3,
    )
    v3[...] = np.arange(20, dtype="<f4").reshape(5, 4)
    with mounted(root, "--read-only") as m:
        for name, (_, headers) in cases.items():
            listing = set(os.listdir(m / name))
            assert listing & {HDR, NHDR, "array.raw.hdr"} == headers, name
        # A 0-d array is one element: a 1 x 1 raster of one band, a NRRD of size 1.
        envi = header_fields(read_exact(m / "scalar" / HDR), "=")
        assert (envi["samples"], envi["lines"], envi["bands"]) == ("1", "1", "1")
        assert header_fields(read_exact(m / "scalar" / NHDR), ":")["sizes"] == "1"
        assert nrrd.read(str(m / "scalar" / NHDR))[0].tolist() == [1.5]
        # v3: array.raw is little-endian whatever the bytes codec stores.
        assert header_fields(read_exact(m / "v3big" / HDR), "=")["byte order"] == "0"
        assert header_fields(read_exact(m / "v3big" / NHDR), ":")["endian"] == "little"
        got = gdal_read(m / "v3big" / "array.raw", tmp_path / "out.raw", (5, 4))
        np.testing.assert_array_equal(got, v3[...])


# -- map info from xarray coordinates -------------------------------------------------------


def coordinate(group: zarr.Group, name: str, values: np.ndarray, units: str) -> None:
    z = group.create_array(name, shape=values.shape, chunks=(7,), dtype=values.dtype)
    z[...] = values
    z.attrs.update({"_ARRAY_DIMENSIONS": [name], "units": units})


LAT = np.arange(89.875, 80, -0.25)  # cell centres, 40 rows, north first
LON = np.arange(-20.125, -10, 0.25)  # 41 columns


def geo_store(root: Path) -> dict[str, list[float] | None]:
    """Groups of data arrays with xarray coordinates → the geotransform GDAL must report."""
    expected: dict[str, list[float] | None] = {}
    top = zarr.open_group(str(root), mode="w", zarr_format=2)
    for group_name, lat in (("north", LAT), ("south", LAT[::-1])):
        group = top.create_group(group_name)
        coordinate(group, "lat", lat, "degrees_north")
        coordinate(group, "lon", LON, "degrees_east")
        for name, dims, shape in (
            ("v", ["lat", "lon"], (lat.size, LON.size)),
            ("t", ["time", "lat", "lon"], (3, lat.size, LON.size)),
        ):
            z = group.create_array(
                name, shape=shape, chunks=(2, 16, 16)[-len(shape) :], dtype="<f4"
            )
            z.attrs["_ARRAY_DIMENSIONS"] = dims
            z[...] = np.arange(np.prod(shape), dtype="<f4").reshape(shape)
            step = lat[1] - lat[0]
            expected[f"{group_name}/{name}"] = [
                LON[0] - 0.125,
                0.25,
                0.0,
                lat[0] - step / 2,
                0.0,
                step,
            ]
    irregular = top.create_group("irregular")
    coordinate(irregular, "lat", np.geomspace(1, 40, LAT.size), "degrees_north")
    coordinate(irregular, "lon", LON, "degrees_east")
    z = irregular.create_array("v", shape=(LAT.size, LON.size), chunks=(16, 16), dtype="<f4")
    z.attrs["_ARRAY_DIMENSIONS"] = ["lat", "lon"]
    expected["irregular/v"] = None
    # zarr v3, dimension_names, projected metres; y decreasing
    projected = zarr.open_group(str(root / "projected"), mode="w", zarr_format=3)
    for name, values in (("y", np.arange(5000.0, 0, -100)), ("x", np.arange(50.0, 3000, 100))):
        c = projected.create_array(
            name, shape=values.shape, chunks=(16,), dtype="<f8", dimension_names=[name]
        )
        c[...] = values
        c.attrs["units"] = "m"
    z = projected.create_array(
        "elevation", shape=(50, 30), chunks=(16, 16), dtype=">i2", dimension_names=["y", "x"]
    )
    z[...] = np.arange(1500, dtype=">i2").reshape(50, 30)
    expected["projected/elevation"] = [0.0, 100.0, 0.0, 5050.0, 0.0, -100.0]
    return expected


def test_gdal_reports_the_geotransform_of_regular_coordinates(tmp_path: Path) -> None:
    """North-up (y decreasing) and south-up (y increasing, "rotation=180" as GDAL itself
    writes it) lat/lon, cell centres as xarray and rioxarray take them; projected
    metres in zarr v3; irregular coordinates give no geotransform."""
    require("gdalinfo")
    root = tmp_path / "geo.zarr"
    expected = geo_store(root)
    with mounted(root, "--read-only") as m:
        for path, transform in expected.items():
            header = read_exact(m / path / HDR)
            map_info = next(line for line in header.decode().splitlines() if "map info" in line)
            info = gdalinfo(m / path / "array.raw")
            if transform is None:
                assert map_info.startswith(";"), path
                assert "geoTransform" not in info, path
                continue
            assert info["geoTransform"] == pytest.approx(transform, abs=1e-9), path
            assert ("rotation=180" in map_info) == (transform[5] > 0), path
        units = header_fields(read_exact(m / "north/v" / HDR), "=")["map info"]
        assert "units=Degrees" in units
        units = header_fields(read_exact(m / "projected/elevation" / HDR), "=")["map info"]
        assert "units=Meters" in units


def test_stat_and_listing_read_no_chunk_and_the_header_reads_the_coordinates(
    tmp_path: Path,
) -> None:
    root = tmp_path / "geo.zarr"
    geo_store(root)
    store = CountingStore(str(root))
    tree = Tree(store, ChunkCache(store, 2**20))
    sizes = {}
    for path in ("north/v", "north/t", "south/v", "irregular/v", "projected/elevation"):
        node = tree.resolve(path)
        assert isinstance(node, DirNode)
        for name in (HDR, NHDR):
            file = tree.lookup(node, name)
            assert isinstance(file, FileNode) and file.view.volatile
            sizes[f"{path}/{name}"] = file.view.size
    documents = {*hierarchy.NODE_KEYS, *hierarchy.ROOT_KEYS}
    chunks = [k for k in store.gets if k.rpartition("/")[2] not in documents]
    assert not chunks, f"listing and stat read chunks: {chunks}"
    hdr = tree.resolve("north/v/array.hdr")
    assert isinstance(hdr, FileNode)
    text = trio.run(hdr.view.read, 0, 1 << 16)
    assert len(text) == sizes["north/v/array.hdr"]
    assert b"map info = {Arbitrary, 1, 1, -20.25, 90.0, 0.25, 0.25" in text
    read = Counter(
        k.rpartition("/")[0] for k in store.gets if k.rpartition("/")[2] not in documents
    )
    assert read == {"north/lat": 6, "north/lon": 6}  # every chunk of both coordinates, once


# -- resizes through a read-write mount --------------------------------------------------


def test_a_resize_through_the_mount_changes_the_headers_and_their_size(tmp_path: Path) -> None:
    root = tmp_path / "rw.zarr"
    top = zarr.open_group(str(root), mode="w", zarr_format=2)
    coordinate(top, "lat", LAT[:10], "degrees_north")
    coordinate(top, "lon", LON[:8], "degrees_east")
    grid = top.create_array("grid", shape=(10, 8), chunks=(4, 4), dtype="<f4")
    grid.attrs["_ARRAY_DIMENSIONS"] = ["lat", "lon"]
    grid[...] = np.arange(80, dtype="<f4").reshape(10, 8)
    cube_data = np.arange(120, dtype=">i2").reshape(4, 6, 5)
    cube = top.create_array("cube", shape=(4, 6, 5), chunks=(3, 4, 4), dtype=">i2")
    cube[...] = cube_data
    with mounted(root) as m:
        grid_hdr = header_fields(read_exact(m / "grid" / HDR), "=")
        assert grid_hdr["lines"] == "10" and grid_hdr["map info"].startswith("{Arbitrary")
        before = os.stat(m / "grid" / HDR).st_size  # the kernel now holds this size
        os.truncate(m / "grid" / "array.raw", 6 * 8 * 4)
        data = read_exact(m / "grid" / HDR)
        # "lines = 10" is now "lines = 6", and the map info line keeps its width:
        # the kernel was told (it held the old size for 60 s otherwise).
        assert len(data) == before - 1
        fields = header_fields(data, "=")
        assert fields["lines"] == "6" and "map info" not in fields  # lat no longer fits
        assert b"; no map info" in data
        assert header_fields(read_exact(m / "grid" / NHDR), ":")["sizes"] == "8 6"
        info = gdalinfo(m / "grid" / "array.raw")
        assert info["size"] == [8, 6] and "geoTransform" not in info

        os.stat(m / "cube" / HDR)
        os.stat(m / "cube" / NHDR)
        os.truncate(m / "cube" / "array.raw", 2 * 6 * 5 * 2)
        assert header_fields(read_exact(m / "cube" / HDR), "=")["bands"] == "2"
        assert header_fields(read_exact(m / "cube" / NHDR), ":")["sizes"] == "5 6 2"
        more = np.full((3, 6, 5), -3, dtype=">i2")
        with open(m / "cube" / "array.raw", "ab") as f:
            f.write(more.tobytes())
        assert header_fields(read_exact(m / "cube" / HDR), "=")["bands"] == "5"
        assert header_fields(read_exact(m / "cube" / NHDR), ":")["sizes"] == "5 6 5"
        expected = np.concatenate([cube_data[:2], more])
        got = gdal_read(m / "cube" / "array.raw", tmp_path / "out.raw", (5, 6, 5))
        np.testing.assert_array_equal(got, expected)
        data, _ = nrrd.read(str(m / "cube" / NHDR), index_order="C")
        np.testing.assert_array_equal(data, expected)
    assert zarr.open_array(str(root / "cube"), mode="r").shape == (5, 6, 5)


def test_map_info_follows_coordinates_written_through_the_mount(tmp_path: Path) -> None:
    root = tmp_path / "rw.zarr"
    top = zarr.open_group(str(root), mode="w", zarr_format=2)
    coordinate(top, "y", np.arange(9.5, 0, -1.0), "m")
    coordinate(top, "x", np.arange(0.5, 12, 1.0), "m")
    z = top.create_array("z", shape=(10, 12), chunks=(5, 5), dtype="<u2")
    z.attrs["_ARRAY_DIMENSIONS"] = ["y", "x"]
    with mounted(root) as m:
        size = os.stat(m / "z" / HDR).st_size
        assert gdalinfo(m / "z" / "array.raw")["geoTransform"] == [0, 1, 0, 10, 0, -1]
        (m / "x" / "array.raw").write_bytes(np.arange(100.0, 112.0, 1.0).tobytes())
        assert gdalinfo(m / "z" / "array.raw")["geoTransform"] == [99.5, 1, 0, 10, 0, -1]
        (m / "x" / "array.raw").write_bytes(np.geomspace(1.0, 2.0, 12).tobytes())
        assert "geoTransform" not in gdalinfo(m / "z" / "array.raw")
        assert len(read_exact(m / "z" / HDR)) == size


# -- what the coordinates may cost a header ----------------------------------------------


def one_element_chunks(group: zarr.Group, name: str, values: np.ndarray | int) -> None:
    """A coordinate stored in chunks of one element (``values``; or, for a length,
    metadata only: every chunk missing, read as fill value)."""
    length = values if isinstance(values, int) else values.size
    z = group.create_array(name, shape=(length,), chunks=(1,), dtype="<f8")
    if not isinstance(values, int):
        z[...] = values
    z.attrs["_ARRAY_DIMENSIONS"] = [name]


def test_coordinates_in_too_many_chunks_give_no_map_info(tmp_path: Path) -> None:
    """x in 1025 chunks (one more than a header may read): regular as they are, the
    header has no map info, its size says so from the listing on, and x is not read."""
    root = tmp_path / "many.zarr"
    top = zarr.open_group(str(root), mode="w", zarr_format=2)
    one_element_chunks(top, "x", np.arange(1025) + 0.5)
    coordinate(top, "y", np.arange(3.5, 0, -1.0), "m")
    z = top.create_array("z", shape=(4, 1025), chunks=(4, 256), dtype="<f4")
    z.attrs["_ARRAY_DIMENSIONS"] = ["y", "x"]
    store = CountingStore(str(root))
    tree = Tree(store, ChunkCache(store, 2**24))
    hdr = tree.resolve("z/array.hdr")
    assert isinstance(hdr, FileNode)
    size = hdr.view.size
    text = trio.run(hdr.view.read, 0, 1 << 16)
    assert len(text) == size
    assert b"map info" not in text
    assert header_fields(text, "=")["samples"] == "1025"
    documents = {*hierarchy.NODE_KEYS, *hierarchy.ROOT_KEYS}
    assert not [k for k in store.gets if k.startswith("x/") and k[2:] not in documents]


def test_coordinates_too_slow_to_read_give_no_map_info(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that takes longer than MAP_INFO_SECONDS for the coordinates: the header
    comes when that time is up, with the comment where the map info would be."""
    root = tmp_path / "slow.zarr"
    top = zarr.open_group(str(root), mode="w", zarr_format=2)
    coordinate(top, "y", np.arange(3.5, 0, -1.0), "m")
    coordinate(top, "x", np.arange(0.5, 8, 1.0), "m")
    z = top.create_array("z", shape=(4, 8), chunks=(4, 8), dtype="<u2")
    z.attrs["_ARRAY_DIMENSIONS"] = ["y", "x"]

    class Slow(CountingStore):
        def get(self, key: str, *, limit: int | None = None) -> bytes | None:
            if key.startswith("x/") and key[2:].isdigit():
                time.sleep(3)
            return super().get(key, limit=limit)

    monkeypatch.setattr(views_sidecars, "MAP_INFO_SECONDS", 0.5, raising=False)
    store = Slow(str(root))
    tree = Tree(store, ChunkCache(store, 2**24))
    hdr = tree.resolve("z/array.hdr")
    assert isinstance(hdr, FileNode)
    size = hdr.view.size
    start = time.monotonic()
    text = trio.run(hdr.view.read, 0, 1 << 16)
    assert time.monotonic() - start < 2.5
    assert len(text) == size
    assert b"\n; no map info" in text and b"map info =" not in text


def test_a_million_one_element_chunks_cost_the_header_nothing(tmp_path: Path) -> None:
    """A metadata-only store whose x coordinate is 1 Mi float64 in chunks of one
    element: gdalinfo reads array.hdr at once and in little memory (all 1 Mi chunks
    were read for it, which took minutes and gigabytes), with no map info."""
    require("gdalinfo")
    root = tmp_path / "million.zarr"
    top = zarr.open_group(str(root), mode="w", zarr_format=2)
    one_element_chunks(top, "x", 1 << 20)
    coordinate(top, "y", np.arange(3.5, 0, -1.0), "m")
    z = top.create_array("z", shape=(4, 1 << 20), chunks=(4, 1 << 16), dtype="<f4")
    z.attrs["_ARRAY_DIMENSIONS"] = ["y", "x"]
    with mounted(root, "--read-only", log_dir=tmp_path, memory_limit=2 << 30) as m:
        start = time.monotonic()
        result = subprocess.run(
            ["gdalinfo", "-json", str(m / "z" / "array.raw")],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        elapsed = time.monotonic() - start
        assert result.returncode == 0, result.stderr
        info = json.loads(result.stdout)
        assert info["size"] == [1 << 20, 4] and "geoTransform" not in info
        header = read_exact(m / "z" / HDR)
        assert b"map info" not in header
        assert m.process.poll() is None
        peak = peak_rss(m.process)
    assert elapsed < 20, elapsed
    assert peak < 500 << 20, f"peak RSS {peak >> 20} MiB"


def test_coordinates_grown_past_the_bounds_turn_map_info_into_the_comment(
    tmp_path: Path,
) -> None:
    """y grown through the mount to 1100 one-element chunks, the array with it: the
    line reserved for map info becomes the comment of the same width."""
    root = tmp_path / "grow.zarr"
    top = zarr.open_group(str(root), mode="w", zarr_format=2)
    one_element_chunks(top, "y", np.arange(3.5, 0, -1.0))
    coordinate(top, "x", np.arange(0.5, 8, 1.0), "m")
    z = top.create_array("z", shape=(4, 8), chunks=(4, 8), dtype="<f4")
    z.attrs["_ARRAY_DIMENSIONS"] = ["y", "x"]
    rows = 1100
    with mounted(root, log_dir=tmp_path) as m:
        before = read_exact(m / "z" / HDR)
        assert header_fields(before, "=")["map info"].startswith("{Arbitrary")
        (m / "y" / "array.raw").write_bytes(np.arange(rows - 0.5, 0, -1.0).tobytes())
        with open(m / "z" / "array.raw", "ab") as f:
            f.write(np.zeros((rows - 4, 8), dtype="<f4").tobytes())
        after = read_exact(m / "z" / HDR)
        assert header_fields(after, "=")["lines"] == str(rows)
        assert b"\n; no map info" in after and b"map info =" not in after
        assert len(after) == len(before) + len(str(rows)) - 1
