"""Zarr readers pointed at the mountpoint itself read what the store holds.

The mount lists metadata documents but no chunk keys; a Zarr reader that opens the
mount (zarr-python 3 and 2.18, xarray, tensorstore, netCDF-C's ncdump) looks each
chunk up by its key. Those keys resolve, read-only and unlisted, to the stored
bytes, so each reader gets from the mount exactly the arrays it gets from the store
opened directly: never fill values where a chunk is stored. On a read-write mount a
reader sees what was written through ``array.raw``, stored first.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr
import zarr.storage
from numcodecs import Zlib

from tests.support.handlers import lookup_errno, read_key
from tests.support.http_server import HttpServer
from tests.support.mounting import mounted, peak_rss
from tests.support.oracles import assert_same_bits
from tests.support.paths import REPO
from zarrfs.daemon.build import MountOptions, build_operations

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


def zarr3_arrays_of(path: Path) -> np.ndarray:
    """The array at ``path`` (an array, not a group) as zarr-python 3 reads it."""
    store = zarr.storage.LocalStore(str(path), read_only=True)
    return np.asarray(zarr.open_array(store=store, mode="r")[...])


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


_TENSORSTORE_READ = """
import sys, numpy as np, tensorstore
spec = {"driver": sys.argv[1], "kvstore": {"driver": "file", "path": sys.argv[2]}}
np.save(sys.argv[3], tensorstore.open(spec, open=True, read=True).result().read().result())
"""


def tensorstore_array(path: Path, driver: str) -> np.ndarray:
    """Read in a process of its own: tensorstore's file driver may keep descriptors
    of the mount open for a while after a read (its threads close them later), which
    would make the unmount busy."""
    with tempfile.TemporaryDirectory() as work:
        out = Path(work) / "out.npy"
        subprocess.run(
            [sys.executable, "-c", _TENSORSTORE_READ, driver, str(path), str(out)],
            check=True,
            timeout=120,
        )
        return np.load(out)


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


# -- the names: found, never listed, exact, read-only ---------------------------------


def stored_keys(root: Path) -> dict[str, bytes]:
    """Every chunk (or shard) file of the store, by key."""
    documents = {".zarray", ".zattrs", ".zgroup", ".zmetadata", "zarr.json"}
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.name not in documents
    }


def test_chunk_keys_are_found_exactly_as_stored_but_never_listed(tmp_path: Path) -> None:
    v2, v3 = tmp_path / "v2.zarr", tmp_path / "v3.zarr"
    v2_store(v2, consolidated=False)
    v3_sharded_store(v3)
    for root in (v2, v3):
        keys = stored_keys(root)
        assert any("/" in k.split("/", 1)[1] for k in keys)  # nested keys among them
        with mounted(root, "--read-only") as m:
            for key, value in keys.items():
                assert (m.path / key).read_bytes() == value, key
                shown, stored = os.stat(m.path / key), (root / key).stat()
                assert shown.st_size == len(value)
                assert shown.st_mtime == pytest.approx(stored.st_mtime, abs=1e-3)
                assert os.listxattr(m.path / key) == []
            # ls shows what it showed: documents and the flat views, no key
            for directory in {k.split("/")[0] for k in keys}:
                names = os.listdir(m.path / directory)
                assert "array.raw" in names
                assert not [n for n in names if n == "c" or n[0].isdigit()], names
    with mounted(v2, "--read-only") as m:
        nested = m.path / "nested"
        assert (nested / "0").is_dir() and os.listdir(nested / "0") == []
        # the last chunk row was never written: missing (fill), as in the store
        missing = ["nested/2/0", "nested/2/2"]
        # outside the 3 x 3 grid, not an index, wrong separator or rank, no such key
        nothing = ["nested/3/0", "nested/0/3", "nested/00/0", "nested/+1/0", "nested/0.0"]
        nothing += ["nested/c", "nested/-1", "tas/0.0", "tas/0/0/0", "lat/3"]
        nothing += ["scalar/1", "scalar/0.0", "lat/0.5", "lat/ 0", "nested/0/0 "]
        for name in missing + nothing:
            with pytest.raises(FileNotFoundError):
                os.stat(m.path / name)
        with pytest.raises(NotADirectoryError):
            os.stat(m.path / "nested" / "0" / "0" / "0")
        assert (m.path / "scalar" / "0").read_bytes() == (v2 / "scalar" / "0").read_bytes()
        with pytest.raises(OSError) as refused:
            os.open(m.path / "tas" / "0.0.0", os.O_RDWR)
        assert refused.value.errno == errno.EROFS
    with mounted(v3, "--read-only") as m:
        sharded = m.path / "sharded"
        assert (sharded / "c").is_dir() and (sharded / "c" / "1").is_dir()
        assert os.listdir(sharded / "c") == [] and os.listdir(sharded / "c" / "1") == []
        # a 2 x 3 grid of shards; the last shard column was never written
        with pytest.raises(FileNotFoundError):
            os.stat(sharded / "c" / "1" / "2")
        # the shard is the key: an inner chunk's position names nothing
        for name in ["c/7/0", "c/2/0", "c/0", "0/0", "c.0.0", "c/0/0/0"]:
            with pytest.raises((FileNotFoundError, IsADirectoryError, NotADirectoryError)):
                (sharded / name).read_bytes()
        assert (m.path / "dotted" / "c.1.1").is_file()
        with pytest.raises(FileNotFoundError):
            os.stat(m.path / "dotted" / "c")
    with mounted(v2) as m:  # read-write: the keys are still read-only
        with pytest.raises(PermissionError):
            os.open(m.path / "tas" / "0.0.0", os.O_RDWR)
        with pytest.raises(OSError):
            os.truncate(m.path / "tas" / "0.0.0", 0)
        assert (m.path / "tas" / "0.0.0").read_bytes() == (v2 / "tas" / "0.0.0").read_bytes()


def test_a_large_shard_is_read_by_ranges(tmp_path: Path) -> None:
    root = tmp_path / "big.zarr"
    shape = (3072, 4096)  # one 48 MiB shard of 24 inner chunks, stored uncompressed
    array = zarr.create_array(
        str(root), shape=shape, chunks=(512, 1024), shards=shape, dtype="<f4", compressors=None
    )
    array[...] = np.arange(np.prod(shape), dtype="<f4").reshape(shape)
    shard = root / "c" / "0" / "0"
    with mounted(root, "--read-only") as m:
        os.stat(m.path / "c" / "0" / "0")
        before = peak_rss(m.process)
        digest_got = hashlib.sha256()
        with open(m.path / "c" / "0" / "0", "rb") as f:
            while piece := f.read(4 << 20):
                digest_got.update(piece)
        grown = peak_rss(m.process) - before
    assert digest_got.hexdigest() == hashlib.sha256(shard.read_bytes()).hexdigest()
    assert shard.stat().st_size > 48 << 20
    assert grown < 16 << 20, f"the daemon grew by {grown} bytes reading a 48 MiB shard"


# -- a write mount: the reader sees what array.raw holds ------------------------------


def test_a_reader_of_a_write_mount_sees_what_array_raw_holds(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    v2_store(root, consolidated=True)
    ds = climate()
    warmer = (ds["tas"].values + 1.5).astype("<f4")
    nested = np.arange(63, dtype="<i4").reshape(7, 9)
    nested[6] = -1
    with mounted(root) as m:
        first = zarr3_arrays(m.path)  # its documents are read (and cached) once
        assert first["nested"].shape == (7, 9)
        with open(m.path / "tas" / "array.raw", "r+b") as raw:
            raw.write(warmer.tobytes())
            raw.flush()  # written, not closed: the chunks are dirty, not stored
            assert not np.array_equal(zarr3_arrays(root)["tas"], warmer)
            assert_same_bits(zarr3_arrays(m.path)["tas"], warmer, "dirty chunks")
            assert_same_bits(xr.open_zarr(m.path)["tas"].values, warmer, "xarray")
            got = tensorstore_array(m.path / "tas", "zarr")
            assert_same_bits(got, warmer, "tensorstore")
        # two rows more, through a handle still open: the shape is the reader's too
        rows = np.arange(100, 118, dtype="<i4").reshape(2, 9)
        with open(m.path / "nested" / "array.raw", "ab") as raw:
            raw.write(rows.tobytes())
            raw.flush()
            grown = zarr3_arrays(m.path)["nested"]
            assert_same_bits(grown, np.concatenate([nested, rows]), "grown")
            assert json.loads((m.path / ".zmetadata").read_bytes())["metadata"]["nested/.zarray"][
                "shape"
            ] == [9, 9]
            assert xr.open_zarr(m.path)["nested"].shape == (9, 9)
        # shrunk to 4 rows: the chunks beyond are gone, and so are the rows
        os.truncate(m.path / "nested" / "array.raw", 4 * 9 * 4)
        assert_same_bits(zarr3_arrays(m.path)["nested"], nested[:4], "shrunk")
        assert zarr2_arrays(m.path, tmp_path / "got.npz", "consolidated")["nested"].shape == (
            4,
            9,
        )
        with pytest.raises(FileNotFoundError):
            os.stat(m.path / "nested" / "2" / "0")
        after = zarr3_arrays(m.path)
    assert_same_arrays(zarr3_arrays(root), after, "the store after unmount")


# -- the v2 key encoding in a v3 array ---------------------------------------------


def test_a_v3_array_with_v2_key_encoding(tmp_path: Path) -> None:
    root = tmp_path / "a.zarr"
    array = zarr.create_array(
        str(root),
        shape=(5, 7),
        chunks=(2, 3),
        dtype="<i2",
        chunk_key_encoding={"name": "v2", "separator": "/"},
    )
    array[...] = np.arange(35, dtype="<i2").reshape(5, 7)
    ops = build_operations(str(root), MountOptions(read_only=True))
    keys = stored_keys(root)
    assert "2/2" in keys and not any(k.startswith("c") for k in keys)
    for key, value in keys.items():
        assert read_key(ops, key) == value, key
    for key in ["c/0/0", "c", "3/0", "0.0", "0/3"]:
        assert lookup_errno(ops, key) == errno.ENOENT, key
    with mounted(root, "--read-only") as m:
        assert_same_bits(zarr3_arrays_of(m.path), array[...], "zarr-python 3")
