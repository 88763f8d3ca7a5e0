"""What the write tests share: one template store holding an array per write case
(``Spec``), built once per test module with zarr-python and copied for each test; the
store read back with zarr-python; the reference model of each array; file helpers.

The reference for every check is the bytes ``array.raw`` must hold (``ArrayModel``),
which each test updates with every write, truncate and extension it makes; the store is
read back with zarr-python (``zarr.open_array(..., zarr_format=2)``) after close or
unmount.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from numcodecs import Blosc, Zlib

from tests.support.model import ArrayModel
from tests.support.mounting import Mounted

NAN = float("nan")
RECORD = [("a", "<i4"), ("b", ">f8"), ("c", "|S3")]
COMPRESSORS: dict[str, Any] = {
    "none": None,
    "zlib": Zlib(level=1),
    "blosc-lz4": Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE),
}
NO_FLUSH = ("--flush-interval", "3600")  # only the flush point under test may store
WRITE_FLAGS = (os.O_RDWR, os.O_WRONLY, os.O_WRONLY | os.O_TRUNC, os.O_WRONLY | os.O_APPEND)


@dataclass(frozen=True)
class Spec:
    name: str
    dtype: Any
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    compressor: str
    order: str
    fill: Any  # a value of the dtype, or None for a null fill value
    initial: str  # "random" (every element written), "half" (leading half of axis 0), "none"

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    @property
    def fill_bytes(self) -> bytes:
        """One element of the fill value, as array.raw shows missing chunks."""
        if self.fill is None:
            return bytes(self.np_dtype.itemsize)
        return np.array(self.fill, dtype=self.np_dtype).tobytes()

    @property
    def row_bytes(self) -> int:
        return math.prod(self.shape[1:]) * self.np_dtype.itemsize

    @property
    def chunk_bytes(self) -> int:
        return math.prod(self.chunks) * self.np_dtype.itemsize


S = Spec
# Random pwrites: dtypes, compressors, C/F order, 1-D/2-D/3-D, overhanging edge chunks.
PWRITE_SPECS = [
    S("f4_blosc_2d", "<f4", (37, 53), (8, 16), "blosc-lz4", "C", 0.0, "random"),
    S("i2_zlib_f_3d", ">i2", (7, 9, 11), (3, 4, 5), "zlib", "F", -7, "half"),
    S("u1_none_1d", "u1", (1000,), (64,), "none", "C", 3, "none"),
    S("f8_zlib_f_2d", "<f8", (20, 30), (7, 8), "zlib", "F", NAN, "half"),
    S("c16_blosc_f_2d", "<c16", (12, 10), (5, 4), "blosc-lz4", "F", complex(1, 2), "random"),
    S("records_1d", RECORD, (50,), (8,), "zlib", "C", (-1, 0.5, b"ab"), "half"),
    S("big_chunk_2d", "<f4", (5, 5), (10, 10), "none", "C", 1.5, "random"),
    S("f8_large_f", "<f8", (300, 257), (64, 100), "zlib", "F", -2.5, "random"),
]
# Resizing: row = 6 * 4 = 24 bytes; row = 5 * 3 * 2 = 30 bytes (order F, 3-D).
ROWS_C = S("rows_f4", "<f4", (10, 6), (4, 4), "blosc-lz4", "C", 1.5, "random")
ROWS_F = S("rows_i2_f", ">i2", (6, 5, 3), (4, 2, 2), "zlib", "F", -7, "random")
ROW_SPECS = [ROWS_C, ROWS_F]
# Fill-value deletion (edge chunks overhang on both axes of fill_zero_f4).
FILL_SPECS = [
    S("fill_zero_f4", "<f4", (10, 10), (4, 4), "blosc-lz4", "C", 0.0, "random"),
    S("fill_nan_f8", "<f8", (8,), (4,), "zlib", "C", NAN, "random"),
    S("fill_negzero_f8_f", "<f8", (6, 4), (3, 4), "none", "F", -0.0, "random"),
    S("fill_null_u1", "u1", (16,), (4,), "zlib", "C", None, "random"),
]
OTHER_SPECS = [
    S("scalar_f8", "<f8", (), (), "zlib", "C", 0.0, "random"),
    S("corrupt_i4", "<i4", (64,), (16,), "zlib", "C", 0, "random"),
    # 4 MiB in 64 chunks of 64 KiB, no chunk stored yet: the dirty budget test
    S("budget_f4", "<f4", (1024, 1024), (64, 256), "zlib", "C", 0.0, "none"),
    # 256 KiB of 16 KiB chunks, elements whose 8 bytes are all equal: the torn-read test
    S("torn_u8", "<u8", (64, 512), (16, 128), "zlib", "C", 0, "none"),
    S("shared_f4", "<f4", (64, 64), (32, 32), "blosc-lz4", "C", 0.0, "half"),
]
# fio: 8 MiB each, sizes a multiple of 64 KiB.
FIO_SPECS = [
    S("fio_f4", "<f4", (2048, 1024), (256, 256), "blosc-lz4", "C", 0.0, "random"),
    S("fio_i2_f", ">i2", (2048, 2048), (300, 500), "zlib", "F", 11, "half"),
]
SPECS = {s.name: s for s in PWRITE_SPECS + ROW_SPECS + FILL_SPECS + OTHER_SPECS + FIO_SPECS}


# -- building stores -----------------------------------------------------------------------


def random_values(dtype: np.dtype, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Ordinary values (no NaN), so zarr-python is a trustworthy oracle for the initial data."""
    if dtype.fields is not None:
        out = np.zeros(shape, dtype)
        for name in dtype.names:
            out[name] = random_values(dtype.fields[name][0], shape, rng)
        return out
    n = math.prod(shape)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        flat = rng.integers(info.min, info.max, size=n, endpoint=True)
    elif dtype.kind == "f":
        flat = rng.standard_normal(n) * 100
    elif dtype.kind == "c":
        flat = rng.standard_normal(n) + 1j * rng.standard_normal(n)
    elif dtype.kind == "S":
        letters = rng.integers(97, 123, size=(n, dtype.itemsize), dtype=np.uint8)
        flat = np.array([bytes(row) for row in letters])
    else:
        raise AssertionError(dtype)
    return np.asarray(flat).astype(dtype).reshape(shape)


def create_array(root: Path, spec: Spec, rng: np.random.Generator) -> np.ndarray:
    """Create and fill one array with zarr-python; return zarr-python's reading of it."""
    z = zarr.create_array(
        store=str(root / spec.name),
        shape=spec.shape,
        chunks=spec.chunks,
        dtype=spec.np_dtype,
        zarr_format=2,
        compressors=COMPRESSORS[spec.compressor],
        order=spec.order,
        fill_value=spec.fill,
    )
    if spec.initial == "random":
        z[...] = random_values(spec.np_dtype, spec.shape, rng)
    elif spec.initial == "half":
        rows = max(1, spec.shape[0] // 2)
        z[:rows] = random_values(spec.np_dtype, (rows, *spec.shape[1:]), rng)
    else:
        assert spec.initial == "none", spec
    return read_store(root / spec.name)


@dataclass
class Template:
    path: Path
    initial: dict[str, np.ndarray]
    zarrays: dict[str, dict[str, Any]]

    def copy(self, tmp_path: Path) -> Path:
        target = tmp_path / "store.zarr"
        shutil.copytree(self.path, target)
        return target


def build_template(root: Path, specs: list[Spec], seed: int) -> Template:
    rng = np.random.default_rng(seed)
    group = zarr.open_group(str(root), mode="w", zarr_format=2)
    group.attrs["title"] = "zarrfs write tests"
    initial = {spec.name: create_array(root, spec, rng) for spec in specs}
    zarrays = {spec.name: zarray(root / spec.name) for spec in specs}
    return Template(root, initial, zarrays)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    root = tmp_path_factory.mktemp("template") / "store.zarr"
    specs = [s for s in SPECS.values() if s not in FIO_SPECS]
    return build_template(root, specs, seed=20250101)


@pytest.fixture(scope="module")
def fio_template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    root = tmp_path_factory.mktemp("fio") / "store.zarr"
    return build_template(root, FIO_SPECS, seed=7)


# -- reading the store back ----------------------------------------------------------------


def zarray(array_dir: Path) -> dict[str, Any]:
    return json.loads((array_dir / ".zarray").read_text())


def declared_dtype(doc: dict[str, Any]) -> np.dtype:
    descr = doc["dtype"]
    if isinstance(descr, list):
        return np.dtype([tuple(field) for field in descr])
    return np.dtype(descr)


def read_store(array_dir: Path) -> np.ndarray:
    """zarr-python's reading of the array, in its declared dtype (byte order included)."""
    doc = zarray(array_dir)
    dtype = declared_dtype(doc)
    value = np.asarray(zarr.open_array(str(array_dir), mode="r", zarr_format=2)[...])
    assert value.shape == tuple(doc["shape"]), (value.shape, doc["shape"])
    if value.dtype != dtype or value.dtype.str != dtype.str:
        value = value.astype(dtype)  # 0-d values come back as native-order scalars
    return np.array(value, order="C")  # (np.ascontiguousarray would make 0-d arrays 1-d)


def chunk_files(array_dir: Path) -> set[str]:
    return {p.name for p in array_dir.iterdir() if not p.name.startswith(".")}


def same_bytes(actual: bytes, expected: bytes, what: str) -> None:
    """Byte equality with a short message (the default diff of large bytes is useless)."""
    if actual == expected:
        return
    n = min(len(actual), len(expected))
    first = next((i for i in range(n) if actual[i] != expected[i]), n)
    raise AssertionError(
        f"{what}: {len(actual)} vs {len(expected)} bytes, first difference at byte {first}"
    )


def assert_store_holds(array_dir: Path, expected: np.ndarray, what: str) -> None:
    """.zarray's shape and zarr-python's data are exactly ``expected`` (bitwise)."""
    doc = zarray(array_dir)
    assert tuple(doc["shape"]) == expected.shape, f"{what}: .zarray shape {doc['shape']}"
    actual = read_store(array_dir)
    assert actual.dtype.str == expected.dtype.str, what
    same_bytes(actual.tobytes(), np.ascontiguousarray(expected).tobytes(), what)


def assert_zarray_kept(array_dir: Path, before: dict[str, Any], shape: tuple[int, ...]) -> None:
    """Everything but the shape is as it was (order F stays F, codecs, fill value...)."""
    after = zarray(array_dir)
    assert after["shape"] == list(shape)
    assert {k: v for k, v in after.items() if k != "shape"} == {
        k: v for k, v in before.items() if k != "shape"
    }


def model_of(template: Template, name: str) -> ArrayModel:
    return ArrayModel(template.initial[name], SPECS[name].fill_bytes)


# -- file helpers --------------------------------------------------------------------------


@contextmanager
def opened(path: Path, flags: int = os.O_RDWR, check_close: bool = True) -> Iterator[int]:
    """An fd closed on exit; a close error (EINVAL, EIO...) is raised, as close returned it
    (unless ``check_close`` is false). Linux releases the fd even when close fails."""
    fd = os.open(path, flags)
    try:
        yield fd
    except BaseException:
        with suppress(OSError):
            os.close(fd)
        raise
    if check_close:
        os.close(fd)
    else:
        with suppress(OSError):
            os.close(fd)


def close_error(fd: int) -> OSError | None:
    try:
        os.close(fd)
    except OSError as e:
        return e
    return None


def errnos(error: BaseException | None) -> list[int | None]:
    """The errno of an exception and of every exception in its context chain."""
    found = []
    while error is not None:
        found.append(getattr(error, "errno", None))
        error = error.__context__ or error.__cause__
    return found


def npy_header_length(npy: Path) -> int:
    with open(npy, "rb") as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            np.lib.format.read_array_header_1_0(f)
        else:
            np.lib.format.read_array_header_2_0(f)
        return f.tell()


def expect_errno(action: Callable[[], object], codes: tuple[int, ...], what: str) -> None:
    with pytest.raises(OSError) as info:
        action()
    assert info.value.errno in codes, f"{what}: {info.value!r}, wanted {codes}"


def assert_mount_shows(m: Mounted, name: str, model: ArrayModel) -> None:
    """array.raw and array.npy through the mount (fresh opens) equal the model."""
    raw = m / name / "array.raw"
    assert os.stat(raw).st_size == len(model), f"{name}: st_size"
    same_bytes(raw.read_bytes(), model.bytes(), f"{name}/array.raw")
    loaded = np.load(m / name / "array.npy")
    expected = model.array()
    assert (loaded.dtype.str, loaded.shape) == (expected.dtype.str, expected.shape), name
    same_bytes(loaded.tobytes(), expected.tobytes(), f"np.load({name}/array.npy)")
    assert os.stat(m / name / "array.npy").st_size == npy_header_length(
        m / name / "array.npy"
    ) + len(model), f"{name}: array.npy st_size"


def run(command: str, cwd: Path) -> None:
    subprocess.run(["bash", "-c", command], cwd=cwd, check=True, timeout=60)


def element(dtype: str, value: Any) -> bytes:
    return np.array(value, dtype=dtype).tobytes()
