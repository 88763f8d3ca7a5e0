"""Zarr readers pointed at the mountpoint itself read what the store holds.

The mount lists metadata documents but no chunk keys; a Zarr reader that opens the
mount (zarr-python 3 and 2.18, xarray, tensorstore, netCDF-C's ncdump) looks each
chunk up by its key. Those keys resolve, read-only and unlisted, to the stored
bytes, so each reader gets from the mount exactly the arrays it gets from the store
opened directly: never fill values where a chunk is stored. On a read-write mount a
reader sees what was written through ``array.raw``, stored first.
"""

from __future__ import annotations

import subprocess
import textwrap
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tensorstore
import xarray as xr
import zarr
import zarr.storage
from numcodecs import Zlib

from tests.http_server import HttpServer, http_server_fixture  # noqa: F401
from tests.mounting import mounted
from tests.oracles import assert_same_bits

pytestmark = pytest.mark.mount

REPO = Path(__file__).resolve().parent.parent
# zarr-python 2.18 cannot share a venv with zarr-python 3: scripts/install.sh makes
# one of its own.
ZARR2_PYTHON = REPO / ".venv-zarr2" / "bin" / "python"

Arrays = dict[str, np.ndarray]


# -- stores ---------------------------------------------------------------------------


def climate() -> xr.Dataset:
    """A small dataset as xarray users write them: CF time, coordinates, NaN fill."""
    rng = np.random.default_rng(7)
    tas = (285.61 + 5 * rng.standard_normal((6, 10, 12))).astype("<f4")
    return xr.Dataset(
        {"tas": (("time", "lat", "lon"), tas, {"units": "K"})},
        coords={
            "time": pd.date_range("2020-01-01", periods=6, freq="D"),
            "lat": np.linspace(-45.0, 45.0, 10),
            "lon": np.arange(0.0, 360.0, 30.0),
        },
    )


def v2_store(root: Path, *, consolidated: bool, compressed: bool = True) -> None:
    """xarray's v2 layout, plus arrays with "/" keys, a missing chunk and a 0-d one.
    (Debian's netCDF-C has no blosc: it reads an uncompressed one.)"""
    ds = climate()
    encoding: dict[str, dict] = {"tas": {"chunks": (2, 4, 5)}, "lat": {"chunks": (4,)}}
    if not compressed:
        for name in ("tas", "lat", "lon", "time"):
            encoding.setdefault(name, {})["compressors"] = None
    ds.to_zarr(root, mode="w", zarr_format=2, consolidated=False, encoding=encoding)
    group = zarr.open_group(str(root), mode="a", zarr_format=2)
    nested = group.create_array(
        "nested",
        shape=(7, 9),
        chunks=(3, 4),
        dtype="<i4",
        fill_value=-1,
        chunk_key_encoding={"name": "v2", "separator": "/"},
        compressors=Zlib(level=1) if compressed else None,
        attributes={"_ARRAY_DIMENSIONS": ["row", "column"]},
    )
    block = np.arange(63, dtype="<i4").reshape(7, 9)
    nested[:6] = block[:6]  # the last chunk row is never written: missing, fill
    scalar = group.create_array(
        "scalar", shape=(), dtype="<f8", fill_value=0.0, attributes={"_ARRAY_DIMENSIONS": []}
    )
    scalar[...] = 2.5
    if consolidated:
        zarr.consolidate_metadata(str(root), zarr_format=2)


def v3_sharded_store(root: Path) -> None:
    group = zarr.open_group(str(root), mode="w", zarr_format=3)
    sharded = group.create_array(
        "sharded",
        shape=(40, 30),
        chunks=(5, 6),
        shards=(20, 12),
        dtype="<f4",
        fill_value=np.nan,
        dimension_names=["y", "x"],
    )
    data = np.arange(1200, dtype="<f4").reshape(40, 30) / 7
    sharded[:, :24] = data[:, :24]  # the last shard column is never written
    plain = group.create_array(
        "plain", shape=(11, 13), chunks=(4, 5), dtype="<i8", dimension_names=["y2", "x2"]
    )
    plain[...] = np.arange(143, dtype="<i8").reshape(11, 13)
    dotted = group.create_array(
        "dotted",
        shape=(6, 6),
        chunks=(4, 4),
        dtype="<u2",
        chunk_key_encoding={"name": "default", "separator": "."},
        dimension_names=["a", "b"],
    )
    dotted[...] = np.arange(36, dtype="<u2").reshape(6, 6)


STORES: dict[str, Callable[[Path], None]] = {
    "v2": lambda root: v2_store(root, consolidated=False),
    "v2-consolidated": lambda root: v2_store(root, consolidated=True),
    "v3-sharded": v3_sharded_store,
}


@pytest.fixture(params=sorted(STORES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    root = tmp_path / f"{request.param}.zarr"
    STORES[request.param](root)
    return root


# -- readers --------------------------------------------------------------------------


def zarr3_arrays(path: Path | str, **options: object) -> Arrays:
    store = zarr.storage.LocalStore(str(path), read_only=True)
    group = zarr.open_group(store=store, mode="r", **options)
    return {
        name: np.asarray(node[...])
        for name, node in group.members(max_depth=None)
        if isinstance(node, zarr.Array)
    }


_ZARR2_SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import zarr
    assert zarr.__version__.startswith("2."), zarr.__version__
    path, out, how = sys.argv[1:]
    group = zarr.open_consolidated(path) if how == "consolidated" else zarr.open_group(path, "r")
    arrays = {}
    group.visititems(
        lambda name, node: arrays.__setitem__(name, node[...])
        if isinstance(node, zarr.Array) else None
    )
    np.savez(out, **arrays)
    """
)


def zarr2_arrays(path: Path, out: Path, how: str) -> Arrays:
    assert ZARR2_PYTHON.exists(), f"{ZARR2_PYTHON} is missing: run scripts/install.sh"
    result = subprocess.run(
        [str(ZARR2_PYTHON), "-c", _ZARR2_SCRIPT, str(path), str(out), how],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    with np.load(out) as saved:
        return {name: saved[name] for name in saved.files}


def tensorstore_array(path: Path, driver: str) -> np.ndarray:
    spec = {"driver": driver, "kvstore": {"driver": "file", "path": str(path)}}
    return np.asarray(tensorstore.open(spec, open=True, read=True).result().read().result())


def ncdump(url: str, variable: str) -> str:
    result = subprocess.run(
        ["ncdump", "-v", variable, url], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def assert_same_arrays(got: Arrays, want: Arrays, what: str) -> None:
    assert sorted(got) == sorted(want), what
    for name in want:
        assert got[name].shape == want[name].shape, f"{what}: {name}"
        assert_same_bits(got[name], want[name], f"{what}: {name}")


def assert_not_only_fill(arrays: Arrays) -> None:
    """The comparison means something: the stored arrays hold data, not fill alone."""
    for name, array in arrays.items():
        if array.size > 1:
            assert len(np.unique(array)) > 1, name


# -- the readers on each kind of store ------------------------------------------------


def test_zarr_python_3_reads_the_mount_as_the_store(store: Path) -> None:
    want = zarr3_arrays(store)
    assert_not_only_fill(want)
    with mounted(store, "--read-only") as m:
        got = zarr3_arrays(m.path)
    assert_same_arrays(got, want, "zarr-python 3")


def test_zarr_python_2_reads_the_mount_as_the_store(tmp_path: Path) -> None:
    for consolidated in (False, True):
        root = tmp_path / f"c{int(consolidated)}.zarr"
        v2_store(root, consolidated=consolidated)
        how = "consolidated" if consolidated else "listed"
        want = zarr2_arrays(root, tmp_path / "want.npz", how)
        assert sorted(want) == ["lat", "lon", "nested", "scalar", "tas", "time"]
        assert_not_only_fill(want)
        with mounted(root, "--read-only") as m:
            got = zarr2_arrays(m.path, tmp_path / "got.npz", how)
        assert_same_arrays(got, want, f"zarr-python 2.18 ({how})")


@pytest.mark.parametrize("kind", ["v2", "v2-consolidated", "v3-sharded"])
def test_xarray_opens_the_mount_as_the_store(kind: str, tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    STORES[kind](root)
    consolidated = kind == "v2-consolidated"
    options = {"consolidated": consolidated, "zarr_format": 3 if kind == "v3-sharded" else 2}
    want = xr.open_zarr(root, **options).load()
    with mounted(root, "--read-only") as m:
        got = xr.open_zarr(m.path, **options).load()
    xr.testing.assert_identical(got, want)
    if kind != "v3-sharded":
        # what the reviewer saw: lat all NaN, every time 2020-01-01, tas the fill
        ds = climate()
        np.testing.assert_array_equal(got["lat"].values, ds["lat"].values)
        np.testing.assert_array_equal(got["time"].values, ds["time"].values)
        np.testing.assert_array_equal(got["tas"].values, ds["tas"].values)


def test_tensorstore_reads_the_mount_as_the_store(tmp_path: Path) -> None:
    cases = {"v2": ["tas", "lat", "nested", "scalar"], "v3-sharded": ["sharded", "plain", "dotted"]}
    for kind, names in cases.items():
        root = tmp_path / f"{kind}.zarr"
        STORES[kind](root)
        driver = "zarr3" if kind.startswith("v3") else "zarr"
        with mounted(root, "--read-only") as m:
            for name in names:
                want = tensorstore_array(root / name, driver)
                got = tensorstore_array(m.path / name, driver)
                assert_same_bits(got, want, f"tensorstore {kind}/{name}")


def test_ncdump_reads_the_mount_as_the_store(tmp_path: Path) -> None:
    root = tmp_path / "nc.zarr"
    v2_store(root, consolidated=False, compressed=False)
    want = ncdump(f"file://{root}#mode=zarr,file", "tas,nested")
    assert "tas =" in want and "285." in want and "45, 46, 47" in want
    with mounted(root, "--read-only") as m:
        got = ncdump(f"file://{m.path}#mode=zarr,file", "tas,nested")
    # only the first line names the dataset (after the path)
    assert got.splitlines()[1:] == want.splitlines()[1:]


def test_a_zip_archive_mount_is_read_as_the_store(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    v3_sharded_store(root)
    want = zarr3_arrays(root)
    archive = tmp_path / "s.zip"
    # zarr-python's ZipStore layout: one stored member per key, named by it
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as target:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            target.write(path, path.relative_to(root).as_posix())
    with mounted(archive) as m:
        got = zarr3_arrays(m.path)
    assert_same_arrays(got, want, "zarr-python 3 on a zip mount")


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_an_http_mount_is_read_as_the_store(http_server: HttpServer) -> None:
    root = http_server.root / "s.zarr"
    v3_sharded_store(root)
    zarr.consolidate_metadata(str(root))
    want = zarr3_arrays(root)
    http_server.reset()
    with mounted(f"{http_server.url}/s.zarr") as m:
        got = zarr3_arrays(m.path)
    assert_same_arrays(got, want, "zarr-python 3 on an HTTP mount")
    # a shard is never fetched whole: every GET of one carries a Range
    shard_gets = [r for r in http_server.settled() if "/sharded/c/" in r.path and r.method == "GET"]
    assert shard_gets and all(r.range for r in shard_gets), shard_gets
