"""Two independent readers of a Zarr store on disk, to check what zarrfs wrote.

zarr-python 3 and tensorstore (Google's C++ implementation) share no code, so a store
both read back as the expected array is one other Zarr readers can use, not one that
only matches zarrfs's own reading of the spec. Both are test dependencies: a missing
one fails the importing test module at collection, it is never skipped.

    from tests.support.oracles import assert_store_holds
    assert_store_holds(tmp_path / "a.zarr", expected)

The comparison is bitwise (bytes of the arrays in little-endian form), so NaN payloads
and -0.0 count, and a big-endian store or expected array compares by its values.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import zarr

try:
    import tensorstore
except ImportError as e:  # a failure, never a skip
    raise ImportError(
        "tensorstore is a test dependency (tests/support/oracles.py reads stores with it): "
        "install it with scripts/install.sh or `.venv/bin/pip install -e '.[test]'`"
    ) from e


def zarr_format(path: str | Path) -> int:
    """2 or 3: the format of the array at ``path`` (a directory store)."""
    path = Path(path)
    if (path / "zarr.json").is_file():
        meta = json.loads((path / "zarr.json").read_text())
        if meta.get("node_type") != "array":
            raise AssertionError(f"{path}/zarr.json is a {meta.get('node_type')!r}, not an array")
        return 3
    if (path / ".zarray").is_file():
        return 2
    raise AssertionError(f"{path} holds no Zarr array (no zarr.json, no .zarray)")


def read_zarr_python(path: str | Path) -> np.ndarray:
    """The whole array at ``path`` as zarr-python 3 reads it."""
    return np.asarray(zarr.open_array(store=str(path), mode="r")[...])


def read_tensorstore(path: str | Path) -> np.ndarray:
    """The whole array at ``path`` as tensorstore reads it (driver zarr3 or zarr)."""
    driver = "zarr3" if zarr_format(path) == 3 else "zarr"
    spec = {"driver": driver, "kvstore": {"driver": "file", "path": str(Path(path).resolve())}}
    store = tensorstore.open(spec, open=True, read=True).result()
    return np.asarray(store.read().result())


def little_endian(a: np.ndarray) -> np.ndarray:
    """``a`` with a little-endian dtype, the same values bit for bit, C-contiguous."""
    a = np.asarray(a)
    if a.dtype.byteorder == ">":
        a = a.byteswap().view(a.dtype.newbyteorder("<"))
    return np.ascontiguousarray(a)


def _first_difference(a: np.ndarray, b: np.ndarray) -> str:
    """Where and how two arrays of one shape and dtype differ, bitwise."""
    if a.dtype.itemsize == 0 or a.size == 0:
        return "no elements"
    ab = a.reshape(-1).view(np.uint8).reshape(a.size, a.dtype.itemsize)
    bb = b.reshape(-1).view(np.uint8).reshape(b.size, b.dtype.itemsize)
    differ = np.flatnonzero((ab != bb).any(axis=1))
    first = int(differ[0])
    index = np.unravel_index(first, a.shape) if a.ndim else ()
    return (
        f"{differ.size} of {a.size} elements differ; first at {tuple(int(i) for i in index)}: "
        f"{a.reshape(-1)[first]!r} (bytes {ab[first].tobytes().hex()}) vs "
        f"{b.reshape(-1)[first]!r} (bytes {bb[first].tobytes().hex()})"
    )


def assert_same_bits(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """``got`` and ``want`` have one shape, one dtype (byte order aside) and equal bytes."""
    got, want = little_endian(got), little_endian(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    if got.tobytes() != want.tobytes():
        raise AssertionError(f"{what}: {_first_difference(got, want)}")


def assert_store_holds(path: str | Path, expected: np.ndarray) -> None:
    """zarr-python 3 and tensorstore both read ``expected`` from the array at ``path``
    (bitwise), so they also agree with each other."""
    by_zarr = read_zarr_python(path)
    by_ts = read_tensorstore(path)
    assert_same_bits(by_zarr, expected, f"zarr-python reading {path}")
    assert_same_bits(by_ts, expected, f"tensorstore reading {path}")
    assert_same_bits(by_ts, by_zarr, f"tensorstore vs zarr-python reading {path}")
