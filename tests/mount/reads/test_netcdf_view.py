"""``group.nc`` through real mounts, read by the climate community's programs:
ncdump (netcdf-bin), CDO, NCO's ncks, netCDF4-python and xarray (netCDF-C and scipy
engines), against zarr-python's values; a v2 store, a consolidated v2 store and a
sharded v3 store from a directory, and a v2 store from S3 (moto on loopback).

A missing program fails these tests (scripts/install.sh installs them): never a skip.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import netCDF4
import numpy as np
import pytest
import xarray as xr
import zarr

from tests.support.headers import require
from tests.support.mounting import Mounted, mounted
from tests.support.servers import Bucket

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

NC = "group.nc"
KINDS = ["v2", "v2_consolidated", "v3_sharded"]
CONSOLIDATED = {"v2": False, "v2_consolidated": True, "v3_sharded": False}



def dataset() -> xr.Dataset:
    rng = np.random.default_rng(7)
    temp = (rng.standard_normal((4, 6, 8)) * 10 + 280).astype("f4")
    temp[1, 2, 3] = np.nan  # masked through _FillValue
    return xr.Dataset(
        {
            "temp": (("time", "lat", "lon"), temp, {"units": "K", "long_name": "temperature"}),
            "mask": (("lat", "lon"), (np.arange(48) * 7 % 256).astype("u1").reshape(6, 8)),
            "elevation": (("lat", "lon"), np.arange(48, dtype="i2").reshape(6, 8) - 20),
        },
        coords={
            "time": np.arange(4, dtype="i4"),
            "lat": np.linspace(-50, 50, 6),
            "lon": np.linspace(0, 350, 8),
        },
        attrs={"title": "a test", "Conventions": "CF-1.8"},
    )


def make_store(root: Path, kind: str) -> None:
    ds = dataset()
    if kind == "v3_sharded":
        encoding = {"temp": {"chunks": (1, 3, 4), "shards": (2, 6, 8)}}
        ds.to_zarr(root, zarr_format=3, mode="w", consolidated=False, encoding=encoding)
        fmt = 3
    else:
        encoding = {"temp": {"chunks": (1, 3, 4)}}
        ds.to_zarr(root, zarr_format=2, mode="w", consolidated=False, encoding=encoding)
        fmt = 2
    group = zarr.open_group(root, mode="a", zarr_format=fmt)
    # A big-endian array (v2 keeps the byte order), one netCDF has no type for, and
    # a subgroup, which is not part of this group's file.
    dtype = ">i4" if fmt == 2 else "<i4"
    names = {"dimension_names": ["lat"]} if fmt == 3 else {}
    counts = group.create_array(
        "counts", shape=(6,), chunks=(4,), dtype=dtype, fill_value=-1, **names
    )
    counts[:4] = [3, 1, 4, 1]
    flags = group.create_array("flags", shape=(6,), dtype="bool", **names)
    flags[...] = True
    if fmt == 2:
        counts.attrs["_ARRAY_DIMENSIONS"] = flags.attrs["_ARRAY_DIMENSIONS"] = ["lat"]
    sub = group.create_group("sub")
    sub.create_array("inner", shape=(3,), dtype="<f8")[...] = [1.5, 2.5, 3.5]
    if kind == "v2_consolidated":
        zarr.consolidate_metadata(root, zarr_format=2)


@pytest.fixture(scope="module", params=KINDS)
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp(request.param) / f"{request.param}.zarr"
    make_store(root, request.param)
    return root


@pytest.fixture(scope="module")
def mount(store: Path) -> Iterator[Mounted]:
    with mounted(store, log_dir=store.parent) as m:
        yield m


def run(*command: str | Path) -> str:
    done = subprocess.run(
        [str(c) for c in command], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, f"{command}: {done.stderr}"
    return done.stdout


def zarr_values(store: Path, name: str) -> np.ndarray:
    return zarr.open_array(store / name, mode="r")[...]


def test_ncdump_reads_the_header_and_values(store: Path, mount: Mounted) -> None:
    require("ncdump")
    path = mount / NC
    v2 = (store / ".zgroup").exists()  # v3: no _FillValue but the attribute's
    data = path.read_bytes()
    assert os.stat(path).st_size == len(data)
    assert data[:4] == b"CDF\x02"
    header = run("ncdump", "-h", path)
    for line in (
        "lat = 6 ;",
        "lon = 8 ;",
        "time = 4 ;",
        "float temp(time, lat, lon) ;",
        'temp:units = "K" ;',
        "temp:_FillValue = NaNf ;",
        "byte mask(lat, lon) ;",
        'mask:_Unsigned = "true" ;',
        "short elevation(lat, lon) ;",
        "int counts(lat) ;",
        "counts:_FillValue = -1 ;" if v2 else "int counts(lat) ;",
        ':title = "a test" ;',
        ':Conventions = "CF-1.8" ;',
    ):
        assert line in header, header
    assert "flags" not in header and "inner" not in header
    dumped = run("ncdump", "-v", "time,elevation,counts", path)
    for name in ("time", "elevation", "counts"):
        text = dumped.split(f" {name} =", 1)[1].split(";", 1)[0]
        expected = [str(v) for v in zarr_values(store, name).ravel().tolist()]
        if name == "counts" and v2:  # ncdump prints the _FillValue as "_"
            expected = ["_" if v == "-1" else v for v in expected]
        assert re.findall(r"-?\d+|_", text) == expected
    ncdump_k = run("ncdump", "-k", path).strip()
    assert ncdump_k == "64-bit offset"


def test_a_subgroup_has_its_own_file(store: Path, mount: Mounted) -> None:
    require("ncdump")
    assert NC in os.listdir(mount / "sub")
    dumped = run("ncdump", "-v", "inner", mount / "sub" / NC)
    assert "inner = 1.5, 2.5, 3.5 ;" in dumped
    assert NC not in os.listdir(mount / "sub" / "inner")  # arrays have none


def test_cdo_reads_the_grid_and_means(store: Path, mount: Mounted) -> None:
    require("cdo")
    info = run("cdo", "-s", "sinfo", mount / NC)
    assert "points=48 (8x6)" in info and "4 steps" in info, info
    means = run("cdo", "-s", "outputf,%.6f,1", "-fldmean", "-selname,temp", mount / NC)
    temp = zarr_values(store, "temp").astype("f8")
    expected = np.nanmean(temp.reshape(4, -1), axis=1)
    assert np.allclose([float(v) for v in means.split()], expected, rtol=1e-5)


def test_ncks_prints_a_variable(store: Path, mount: Mounted) -> None:
    require("ncks")
    text = run("ncks", "-H", "-C", "-v", "lat", mount / NC)
    values = [
        float(v) for v in text.split("data:", 1)[1].split("lat =", 1)[1].split(";", 1)[0].split(",")
    ]
    assert np.allclose(values, zarr_values(store, "lat")), text


def test_python_readers_give_zarr_pythons_values(store: Path, mount: Mounted) -> None:
    with netCDF4.Dataset(mount / NC) as ds:
        ds.set_auto_mask(False)
        for name in ("temp", "mask", "elevation", "counts", "time", "lat", "lon"):
            expected = zarr_values(store, name)
            assert np.array_equal(ds[name][...], expected, equal_nan=True), name
    reference = xr.open_zarr(
        store, consolidated=CONSOLIDATED[store.stem], decode_times=False
    ).load()
    for engine in ("netcdf4", "scipy"):  # a CDF-2 file: scipy's reader too
        with xr.open_dataset(mount / NC, engine=engine, decode_times=False) as opened:
            opened.load()
            for name in ("temp", "mask", "elevation", "time", "lat", "lon"):
                if engine == "scipy" and name == "mask":
                    continue  # scipy's reader ignores _Unsigned: mask reads as int8
                got, want = opened[name], reference[name]
                assert got.dims == want.dims, (engine, name)
                assert got.dtype == want.dtype, (engine, name)
                assert np.array_equal(got.values, want.values, equal_nan=True), (engine, name)
            assert opened.attrs["title"] == "a test"


def test_pread_anywhere_gives_the_files_bytes(mount: Mounted) -> None:
    path = mount / NC
    whole = path.read_bytes()
    rng = np.random.default_rng(1)
    fd = os.open(path, os.O_RDONLY)
    try:
        for _ in range(200):
            offset = int(rng.integers(0, len(whole)))
            length = int(rng.integers(1, 700))
            assert os.pread(fd, length, offset) == whole[offset : offset + length]
    finally:
        os.close(fd)


def upload(bucket: Bucket, local: Path, prefix: str) -> None:
    for path in sorted(local.rglob("*")):
        if path.is_file():
            bucket.put(f"{prefix}/{path.relative_to(local)}", path.read_bytes())


def test_from_s3(s3_bucket: Bucket, tmp_path: Path) -> None:
    require("ncdump")
    local = tmp_path / "s.zarr"
    make_store(local, "v2_consolidated")
    upload(s3_bucket, local, "s.zarr")
    with mounted(f"s3://{s3_bucket.name}/s.zarr", log_dir=tmp_path) as m:
        assert 'temp:units = "K" ;' in run("ncdump", "-h", m / NC)
        reference = xr.open_zarr(local, consolidated=True, decode_times=False).load()
        with xr.open_dataset(m / NC, engine="netcdf4", decode_times=False) as opened:
            for name in ("temp", "mask", "elevation", "time", "lat", "lon"):
                assert np.array_equal(
                    opened[name].values, reference[name].values, equal_nan=True
                ), name


def test_cdf5_where_a_type_needs_it(tmp_path: Path) -> None:
    require("ncdump")
    root = tmp_path / "s.zarr"
    group = zarr.open_group(root, mode="w", zarr_format=3)
    big = group.create_array("big", shape=(5,), dtype="<i8", dimension_names=["n"])
    big[...] = [-(2**40), 0, 1, 2**62, 7]
    wide = group.create_array("wide", shape=(5,), dtype="<u2", dimension_names=["n"])
    wide[...] = [0, 1, 65535, 3, 4]
    small = group.create_array("small", shape=(2,), dtype="u1", dimension_names=["m"])
    small[...] = [200, 3]
    with mounted(root, log_dir=tmp_path) as m:
        assert run("ncdump", "-k", m / NC).strip() == "cdf5"
        assert "ubyte small(m) ;" in run("ncdump", "-h", m / NC)
        with netCDF4.Dataset(m / NC) as ds:
            for name in ("big", "wide", "small"):
                assert np.array_equal(ds[name][...], group[name][...]), name


def test_a_member_named_group_nc_is_shown(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    group = zarr.open_group(root, mode="w", zarr_format=2)
    group.create_array("group.nc", shape=(3,), dtype="<f4")[...] = 1
    group.create_array("other", shape=(3,), dtype="<f4")[...] = 2
    only_bool = group.create_group("bools")
    only_bool.create_array("b", shape=(3,), dtype="bool")
    with mounted(root, log_dir=tmp_path) as m:
        assert (m / NC).is_dir()
        assert (m / NC / "array.raw").read_bytes() == np.ones(3, "<f4").tobytes()
        assert NC not in os.listdir(m / "bools")
        assert "its member group.nc is shown, not the netCDF view" in m.log()


def test_group_nc_follows_a_resize_and_refuses_writes(tmp_path: Path) -> None:
    require("ncdump")
    root = tmp_path / "s.zarr"
    make_store(root, "v2")
    row = np.full((6, 8), 300.5, dtype="<f4")
    with mounted(root, "--rw", log_dir=tmp_path) as m:  # the kernel keeps attributes 60 s
        before = os.stat(m / NC).st_size
        with pytest.raises(PermissionError):
            open(m / NC, "r+b").close()
        with open(m / "temp" / "array.raw", "ab") as f:  # a fifth time step
            f.write(row.tobytes())
        # The data grew by a row, the header by a dimension (time_5, below).
        after = os.stat(m / NC).st_size
        assert after == before + row.nbytes + 16 == len((m / NC).read_bytes())
        header = run("ncdump", "-h", m / NC)
        # The coordinate keeps "time" (4 steps); temp's axis of 5 is renamed.
        assert "time = 4 ;" in header and "time_5 = 5 ;" in header, header
        assert "float temp(time_5, lat, lon) ;" in header, header
        with netCDF4.Dataset(m / NC) as ds:
            temp = ds["temp"][...]
            assert temp.shape == (5, 6, 8)
            assert np.array_equal(temp[4], row)
            assert np.array_equal(temp[:4], zarr_values(root, "temp")[:4], equal_nan=True)


def test_a_listing_then_stat_gives_the_size_read(tmp_path: Path) -> None:
    """The kernel is given group.nc's size at its first lookup, not by the listing
    (which leaves it to then): ``ls -l`` after ``ls`` shows the size a read finds."""
    root = tmp_path / "s.zarr"
    group = zarr.open_group(root, mode="w", zarr_format=2)
    for n in range(5):
        group.create_array(f"a{n}", shape=(4, 3), dtype="<f4")[...] = n
    with mounted(root, log_dir=tmp_path) as m:
        rows = [line.split() for line in run("ls", "-l", m.path).splitlines()]
        size = len((m / NC).read_bytes())
        assert [row[4] for row in rows if row[-1] == NC] == [str(size)]
        assert NC in os.listdir(m.path) and os.stat(m / NC).st_size == size > 0
