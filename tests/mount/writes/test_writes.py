"""Writes through a read-write mount, checked against a byte-level model and zarr-python.

What the write semantics (docs/semantics.md, "Writing") promise and these tests check:

- a mount is read-write unless ``--read-only`` (then EROFS);
- ``pwrite`` of any length at any offset of ``array.raw`` / the data part of
  ``array.npy`` changes exactly those bytes, and every read through the mount (the
  other file, an ``np.load(mmap_mode="r")`` map opened before the write) sees them;
- dirty chunks reach the store at fsync/fdatasync, close (before close returns), the
  flush interval, the dirty budget, unmount, SIGTERM/SIGINT and ``zarrfs umount``;
- chunks bit-for-bit equal to the fill value are deleted, never with a null fill;
- ``array.raw`` is a regular file of whole rows (truncate, O_TRUNC, appends, cp, dd,
  shell redirections), a trailing partial row makes fsync/close fail with EINVAL;
- ``array.npy``: header bytes are fixed (EPERM), ``np.save`` onto it works for the
  same dtype and trailing shape, anything else is EINVAL;
- metadata documents stay read-only (EACCES or EPERM);
- concurrent writers of one chunk both land; a concurrent reader never sees a torn
  element; fio's verifying random-write jobs pass.

The reference for every check is a bytearray model of ``array.raw`` (``Model``) that
applies each write, truncate and extension; the store is read back with zarr-python
(``zarr.open_array(..., zarr_format=2)``) after close or unmount. Every store is a
copy under tmp_path.
"""

from __future__ import annotations

import errno
import gc
import io
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from numcodecs import Blosc, Zlib

from tests.support.mounting import Mounted, mounted, zarrfs_command

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


# -- the reference model -------------------------------------------------------------------


class Model:
    """The bytes array.raw must show: a bytearray of whole rows, grown with fill elements."""

    def __init__(self, initial: np.ndarray, fill: bytes) -> None:
        self.dtype = initial.dtype
        self.zero_d = initial.ndim == 0
        self.inner = initial.shape[1:]
        self.fill = fill
        self.row = math.prod(self.inner) * self.dtype.itemsize
        self.buf = bytearray(np.ascontiguousarray(initial).tobytes())

    def __len__(self) -> int:
        return len(self.buf)

    def bytes(self) -> bytes:
        return bytes(self.buf)

    @property
    def rows(self) -> int:
        return len(self.buf) // self.row

    def truncate(self, size: int) -> None:
        assert not self.zero_d and size % self.row == 0, size
        if size < len(self.buf):
            del self.buf[size:]
        else:
            missing = size - len(self.buf)
            self.buf += self.fill * (missing // self.dtype.itemsize)

    def write(self, offset: int, data: bytes) -> None:
        end = offset + len(data)
        if end > len(self.buf):
            assert not self.zero_d
            self.truncate(-(-end // self.row) * self.row)  # whole rows of fill, then the data
        self.buf[offset:end] = data

    def array(self) -> np.ndarray:
        if self.zero_d:
            return np.frombuffer(self.bytes(), self.dtype).reshape(())
        return np.frombuffer(self.bytes(), self.dtype).reshape((self.rows, *self.inner))


def model_of(template: Template, name: str) -> Model:
    return Model(template.initial[name], SPECS[name].fill_bytes)


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


def assert_mount_shows(m: Mounted, name: str, model: Model) -> None:
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


# -- read-write by default -----------------------------------------------------------------


def test_default_mount_is_read_write(template: Template, tmp_path: Path) -> None:
    store = template.copy(tmp_path)
    name = "f4_blosc_2d"
    model = model_of(template, name)
    with mounted(store, log_dir=tmp_path) as m:
        for file in ("array.raw", "array.npy"):
            assert os.stat(m / name / file).st_mode & 0o200, f"{file} is writable"
        with opened(m / name / "array.raw") as fd:
            assert os.pwrite(fd, b"\x01\x02\x03", 5) == 3
        model.write(5, b"\x01\x02\x03")
        assert_mount_shows(m, name, model)
    assert_store_holds(store / name, model.array(), name)


def test_read_only_mount_refuses_writes_with_erofs(template: Template, tmp_path: Path) -> None:
    store = template.copy(tmp_path)
    name = "f4_blosc_2d"
    before = {p.name: p.read_bytes() for p in (store / name).iterdir()}
    with mounted(store, "--read-only", log_dir=tmp_path) as m:
        for file in ("array.raw", "array.npy"):
            path = m / name / file
            assert not os.stat(path).st_mode & 0o222
            for flags in WRITE_FLAGS:
                expect_errno(
                    lambda p=path, f=flags: os.close(os.open(p, f)),
                    (errno.EROFS,),
                    f"open({file}, {flags:#o})",
                )
            expect_errno(lambda p=path: os.truncate(p, 0), (errno.EROFS,), f"truncate {file}")
        same_bytes(
            (m / name / "array.raw").read_bytes(), model_of(template, name).bytes(), "unchanged"
        )
    assert {p.name: p.read_bytes() for p in (store / name).iterdir()} == before


# -- pwrite anywhere -----------------------------------------------------------------------


@pytest.mark.parametrize("spec", PWRITE_SPECS, ids=[s.name for s in PWRITE_SPECS])
def test_pwrites_change_exactly_those_bytes(template: Template, tmp_path: Path, spec: Spec) -> None:
    """Random (offset, length) pwrites through array.raw and array.npy, alternating;
    after each one, windows of both files read back through the mount equal the model."""
    store = template.copy(tmp_path)
    name = spec.name
    model = model_of(template, name)
    size = len(model)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    writes = [(0, size), (size - 1, 1), (0, 1)]  # whole file, last byte, first byte
    for _ in range(40):
        length = int(rng.integers(1, min(size, 3 * spec.chunk_bytes) + 1))
        writes.append((int(rng.integers(0, size - length + 1)), length))
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m:
        header = npy_header_length(m / name / "array.npy")
        with opened(m / name / "array.raw") as raw, opened(m / name / "array.npy") as npy:
            for i, (offset, length) in enumerate(writes):
                data = rng.bytes(length)
                if i % 2:
                    assert os.pwrite(npy, data, header + offset) == length
                else:
                    assert os.pwrite(raw, data, offset) == length
                model.write(offset, data)
                expected = model.bytes()
                lo, hi = max(0, offset - 9), min(size, offset + length + 9)
                what = f"write {i} ({offset}, {length})"
                same_bytes(os.pread(raw, hi - lo, lo), expected[lo:hi], f"{what}: array.raw")
                same_bytes(os.pread(npy, hi - lo, header + lo), expected[lo:hi], f"{what}: npy")
            assert os.fstat(raw).st_size == size
            same_bytes(os.pread(raw, size + 10, 0), model.bytes(), "whole array.raw")
        assert_store_holds(store / name, model.array(), f"{name} after close")
        assert_mount_shows(m, name, model)
    assert_zarray_kept(store / name, template.zarrays[name], spec.shape)
    assert_store_holds(store / name, model.array(), f"{name} after unmount")


def test_mmap_opened_before_a_write_sees_it(template: Template, tmp_path: Path) -> None:
    """Maps of array.raw and array.npy made (and faulted in) before writes to either file
    show the new bytes as soon as the write returns."""
    store = template.copy(tmp_path)
    name = "f8_zlib_f_2d"
    model = model_of(template, name)
    rng = np.random.default_rng(3)
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m:
        raw, npy = m / name / "array.raw", m / name / "array.npy"
        header = npy_header_length(npy)
        raw_map = np.memmap(raw, dtype=np.uint8, mode="r")
        npy_map = np.load(npy, mmap_mode="r")
        try:
            same_bytes(raw_map.tobytes(), model.bytes(), "raw map before")
            same_bytes(npy_map.tobytes(), model.bytes(), "npy map before")
            for i, (offset, length) in enumerate([(0, 8), (1001, 77), (3, 2000), (4795, 5)]):
                data = rng.bytes(length)
                target, base = (raw, 0) if i % 2 == 0 else (npy, header)
                with opened(target, os.O_WRONLY) as fd:
                    assert os.pwrite(fd, data, base + offset) == length
                    model.write(offset, data)
                    same_bytes(raw_map.tobytes(), model.bytes(), f"raw map, write {i}")
                    same_bytes(npy_map.tobytes(), model.bytes(), f"npy map, write {i}")
        finally:
            del raw_map, npy_map
            gc.collect()
    assert_store_holds(store / name, model.array(), name)


def test_fully_overwritten_chunk_is_never_read(template: Template, tmp_path: Path) -> None:
    """A chunk written whole replaces a corrupt stored one without reading it (no EIO)."""
    store = template.copy(tmp_path)
    name = "corrupt_i4"
    (store / name / "1").write_bytes(b"this is not a zlib stream")
    model = model_of(template, name)
    new = np.arange(100, 116, dtype="<i4").tobytes()  # chunk 1 = elements 16..31
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m:
        with opened(m / name / "array.raw", os.O_WRONLY) as fd:
            assert os.pwrite(fd, new, 16 * 4) == len(new)
        model.write(16 * 4, new)
        assert_mount_shows(m, name, model)
    assert_store_holds(store / name, model.array(), name)


# -- flush points --------------------------------------------------------------------------


def scattered_writes(model: Model, rng: np.random.Generator, count: int) -> list[tuple[int, bytes]]:
    writes = []
    for _ in range(count):
        length = int(rng.integers(1, 3000))
        offset = int(rng.integers(0, len(model) - length))
        writes.append((offset, rng.bytes(length)))
    return writes


@pytest.mark.parametrize("sync", [os.fsync, os.fdatasync], ids=["fsync", "fdatasync"])
def test_fsync_stores_dirty_chunks(
    template: Template, tmp_path: Path, sync: Callable[[int], None]
) -> None:
    store = template.copy(tmp_path)
    name = "f8_large_f"
    model = model_of(template, name)
    rng = np.random.default_rng(11)
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m, opened(m / name / "array.raw") as fd:
        for round_ in range(2):
            for offset, data in scattered_writes(model, rng, 25):
                os.pwrite(fd, data, offset)
                model.write(offset, data)
            sync(fd)
            assert_store_holds(store / name, model.array(), f"after {sync.__name__} {round_}")


def test_close_returns_after_the_chunks_are_stored(template: Template, tmp_path: Path) -> None:
    store = template.copy(tmp_path)
    name = "f8_large_f"
    model = model_of(template, name)
    rng = np.random.default_rng(12)
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m:
        raw = m / name / "array.raw"
        with opened(raw) as first, opened(raw, os.O_WRONLY) as second:
            for i, (offset, data) in enumerate(scattered_writes(model, rng, 30)):
                os.pwrite(first if i % 2 else second, data, offset)
                model.write(offset, data)
        assert_store_holds(store / name, model.array(), "after both closes")
        with open(raw, "r+b") as f:  # Python's buffered file: written at close
            f.seek(12345)
            f.write(b"\xff" * 70000)
        model.write(12345, b"\xff" * 70000)
        assert_store_holds(store / name, model.array(), "after the buffered file's close")


def test_flush_interval_stores_while_the_file_is_open(template: Template, tmp_path: Path) -> None:
    store = template.copy(tmp_path)
    name = "f8_large_f"
    model = model_of(template, name)
    rng = np.random.default_rng(13)
    with (
        mounted(store, "--flush-interval", "1", log_dir=tmp_path) as m,
        opened(m / name / "array.raw") as fd,
    ):
        for offset, data in scattered_writes(model, rng, 20):
            os.pwrite(fd, data, offset)
            model.write(offset, data)
        written = time.monotonic()
        expected = model.array().tobytes()
        while read_store(store / name).tobytes() != expected:
            assert time.monotonic() - written < 15, "not stored 15 s after the writes"
            time.sleep(0.2)


def test_dirty_budget_stores_while_the_file_is_open(template: Template, tmp_path: Path) -> None:
    """4 MiB written with a 1 MiB budget and no other flush point: most of it is stored."""
    store = template.copy(tmp_path)
    spec = SPECS["budget_f4"]
    rng = np.random.default_rng(14)
    data = rng.standard_normal(spec.shape).astype("<f4")  # no element equals the fill 0.0
    rows, cols = spec.chunks
    n_chunks = math.prod(-(-n // c) for n, c in zip(spec.shape, spec.chunks))
    budget_chunks = 2**20 // spec.chunk_bytes
    with mounted(store, "--write-cache-size", "1M", *NO_FLUSH, log_dir=tmp_path) as m:
        with opened(m / spec.name / "array.raw", os.O_WRONLY) as fd:
            raw = data.tobytes()
            for offset in range(0, len(raw), 256 * 1024):
                os.pwrite(fd, raw[offset : offset + 256 * 1024], offset)
            deadline = time.monotonic() + 10
            while True:
                stored = read_store(store / spec.name)
                good = sum(
                    np.array_equal(
                        stored[i : i + rows, j : j + cols].view("u4"),
                        data[i : i + rows, j : j + cols].view("u4"),
                    )
                    for i in range(0, spec.shape[0], rows)
                    for j in range(0, spec.shape[1], cols)
                )
                # dirty ≤ budget, with room for one budget of slack in the accounting
                if good >= n_chunks - 2 * budget_chunks or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert good >= n_chunks - 2 * budget_chunks, f"{good}/{n_chunks} chunks stored"
        assert_store_holds(store / spec.name, data, "after close")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_stores_dirty_chunks_then_exits(
    template: Template, tmp_path: Path, signum: int
) -> None:
    store = template.copy(tmp_path)
    name = "f8_large_f"
    model = model_of(template, name)
    rng = np.random.default_rng(15)
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m:
        fd = os.open(m / name / "array.raw", os.O_RDWR)
        try:
            for offset, data in scattered_writes(model, rng, 20):
                os.pwrite(fd, data, offset)
                model.write(offset, data)
            m.process.send_signal(signum)
            assert m.process.wait(timeout=30) == 0, m.log()
        finally:
            with suppress(OSError):  # the mount is gone: this close may fail
                os.close(fd)
    assert "Traceback" not in m.log()
    assert_store_holds(store / name, model.array(), f"after {signal.Signals(signum).name}")


def test_zarrfs_umount_returns_after_store_and_exit(template: Template, tmp_path: Path) -> None:
    """Writes, a closed handle and a truncate by path (no handle: only a flush point that
    is not a close stores it); ``zarrfs umount`` returns once all of it is stored."""
    store = template.copy(tmp_path)
    name = ROWS_C.name
    model = model_of(template, name)
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m:
        with opened(m / name / "array.raw") as fd:
            os.pwrite(fd, b"\x07" * 50, 30)
        model.write(30, b"\x07" * 50)
        os.truncate(m / name / "array.raw", 3 * ROWS_C.row_bytes)
        model.truncate(3 * ROWS_C.row_bytes)
        done = subprocess.run(
            zarrfs_command("umount", str(m.path)), capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert m.process.poll() == 0, "the daemon had exited when zarrfs umount returned"
        assert_store_holds(store / name, model.array(), "right after zarrfs umount")
        assert chunk_files(store / name) == {"0.0", "0.1"}, "chunks beyond the end deleted"
    assert_zarray_kept(store / name, template.zarrays[name], (3, 6))


# -- fill-value chunks ---------------------------------------------------------------------


def element(dtype: str, value: Any) -> bytes:
    return np.array(value, dtype=dtype).tobytes()


def test_chunks_equal_to_the_fill_value_are_deleted(template: Template, tmp_path: Path) -> None:
    store = template.copy(tmp_path)
    models = {s.name: model_of(template, s.name) for s in FILL_SPECS}
    quiet_nan = element("<f8", NAN)
    other_nan = (0x7FF8000000000001).to_bytes(8, "little")
    assert quiet_nan == (0x7FF8000000000000).to_bytes(8, "little")
    writes = {
        # rows 0-3: chunks 0.x to +0.0 (the fill), rows 4-7: chunks 1.x to -0.0 (kept),
        # rows 8-9: the overhanging edge chunks 2.x to +0.0
        "fill_zero_f4": [
            (0, element("<f4", 0.0) * 40),
            (160, element("<f4", -0.0) * 40),
            (320, element("<f4", 0.0) * 20),
        ],
        # chunk 0 to the fill's NaN, chunk 1 to a NaN with another payload (kept)
        "fill_nan_f8": [(0, quiet_nan * 4), (32, other_nan * 4)],
        # order F: rows 0-2 (chunk 0.0) to -0.0 (the fill), rows 3-5 (chunk 1.0) to +0.0
        "fill_negzero_f8_f": [(0, element("<f8", -0.0) * 12), (96, element("<f8", 0.0) * 12)],
        # a null fill value: zeros are data, every chunk stays
        "fill_null_u1": [(0, bytes(16))],
    }
    kept = {
        "fill_zero_f4": {"1.0", "1.1", "1.2"},
        "fill_nan_f8": {"1"},
        "fill_negzero_f8_f": {"1.0"},
        "fill_null_u1": {"0", "1", "2", "3"},
    }
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m:
        for name, pieces in writes.items():
            with opened(m / name / "array.raw", os.O_WRONLY) as fd:
                for offset, data in pieces:
                    assert os.pwrite(fd, data, offset) == len(data)
                    models[name].write(offset, data)
            assert chunk_files(store / name) == kept[name], f"{name} after close"
            assert_store_holds(store / name, models[name].array(), name)
            assert_mount_shows(m, name, models[name])
    for name, model in models.items():
        assert chunk_files(store / name) == kept[name], f"{name} after unmount"
        assert_store_holds(store / name, model.array(), name)
        assert_zarray_kept(store / name, template.zarrays[name], SPECS[name].shape)


def test_chunk_written_back_to_fill_is_deleted(template: Template, tmp_path: Path) -> None:
    """A missing chunk written with data, flushed, then rewritten to the fill value."""
    store = template.copy(tmp_path)
    name = "u1_none_1d"  # fill 3, no chunk stored
    model = model_of(template, name)
    assert chunk_files(store / name) == set()
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m:
        with opened(m / name / "array.raw", os.O_WRONLY) as fd:
            os.pwrite(fd, b"\x09" * 10, 130)  # chunk 2 (bytes 128..191)
            os.fsync(fd)
            assert chunk_files(store / name) == {"2"}
            os.pwrite(fd, b"\x03" * 10, 130)
            os.fsync(fd)
            assert chunk_files(store / name) == set()
        assert_mount_shows(m, name, model)
    assert chunk_files(store / name) == set()
    assert_store_holds(store / name, model.array(), name)


# -- array.raw as a regular file of whole rows ---------------------------------------------


@pytest.mark.parametrize("spec", ROW_SPECS, ids=[s.name for s in ROW_SPECS])
def test_truncate_sets_shape0(template: Template, tmp_path: Path, spec: Spec) -> None:
    store = template.copy(tmp_path)
    name, row = spec.name, spec.row_bytes
    model = model_of(template, name)
    n = spec.shape[0]
    chunk_rows = spec.chunks[0]
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m:
        raw = m / name / "array.raw"
        os.truncate(raw, (n - 1) * row)
        model.truncate((n - 1) * row)
        assert_mount_shows(m, name, model)
        for bad in ((n - 1) * row + 1, (n - 2) * row - 1, 1, row // 2, (n + 3) * row + 2):
            expect_errno(lambda b=bad: os.truncate(raw, b), (errno.EINVAL,), f"truncate {bad}")
            assert os.stat(raw).st_size == (n - 1) * row
        with opened(raw) as fd:
            os.ftruncate(fd, 1 * row)  # inside chunk row 0: every later chunk goes
            model.truncate(1 * row)
            expect_errno(lambda: os.ftruncate(fd, row + 2), (errno.EINVAL,), "ftruncate")
            assert os.fstat(fd).st_size == row
            os.fsync(fd)
            assert_store_holds(store / name, model.array(), "after ftruncate + fsync")
            assert {k.split(".")[0] for k in chunk_files(store / name)} == {"0"}
            # growing again: the new rows are fill, the old bytes of row 1.. do not come back
            os.ftruncate(fd, (chunk_rows + 2) * row)
            model.truncate((chunk_rows + 2) * row)
            assert os.fstat(fd).st_size == (chunk_rows + 2) * row
            same_bytes(os.pread(fd, len(model) + 1, 0), model.bytes(), "after growing")
        assert_mount_shows(m, name, model)
        assert_store_holds(store / name, model.array(), "after close")
        subprocess.run(["truncate", "-s", str(2 * row), str(raw)], check=True, timeout=30)
        model.truncate(2 * row)
        bad = subprocess.run(["truncate", "-s", str(2 * row + 1), str(raw)], timeout=30)
        assert bad.returncode != 0
        assert_mount_shows(m, name, model)
    assert_zarray_kept(store / name, template.zarrays[name], model.array().shape)
    assert_store_holds(store / name, model.array(), "after unmount")


@pytest.mark.parametrize("spec", ROW_SPECS, ids=[s.name for s in ROW_SPECS])
def test_open_o_trunc_empties_the_array(template: Template, tmp_path: Path, spec: Spec) -> None:
    store = template.copy(tmp_path)
    name = spec.name
    model = model_of(template, name)
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m:
        os.close(os.open(m / name / "array.raw", os.O_WRONLY | os.O_TRUNC))
        model.truncate(0)
        assert_mount_shows(m, name, model)
        assert_store_holds(store / name, model.array(), "after close")
        assert chunk_files(store / name) == set()
    assert_zarray_kept(store / name, template.zarrays[name], (0, *spec.shape[1:]))
    assert chunk_files(store / name) == set()


@pytest.mark.parametrize("spec", ROW_SPECS, ids=[s.name for s in ROW_SPECS])
def test_writes_at_or_past_the_end_extend_shape0(
    template: Template, tmp_path: Path, spec: Spec
) -> None:
    store = template.copy(tmp_path)
    name, row = spec.name, spec.row_bytes
    model = model_of(template, name)
    rng = np.random.default_rng(21)
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m:
        raw = m / name / "array.raw"
        with opened(raw) as fd:
            end = len(model)
            for offset, data, rows_after in [
                (end, rng.bytes(2 * row), spec.shape[0] + 2),  # exactly at the end
                (end + 5 * row, rng.bytes(row), spec.shape[0] + 6),  # a gap of 3 fill rows
                (end + 4 * row, rng.bytes(3 * row), spec.shape[0] + 7),  # straddling the end
            ]:
                assert os.pwrite(fd, data, offset) == len(data)
                model.write(offset, data)
                assert model.rows == rows_after
                assert os.fstat(fd).st_size == len(model)
                same_bytes(os.pread(fd, len(model) + 1, 0), model.bytes(), f"write at {offset}")
            # a row in two writes that split it inside an element
            first, second = rng.bytes(3), rng.bytes(row - 3)
            os.pwrite(fd, first, len(model))
            os.pwrite(fd, second, len(model) + 3)
            model.write(len(model), first + second)
            assert os.fstat(fd).st_size == len(model)
        assert_mount_shows(m, name, model)
        assert_store_holds(store / name, model.array(), "after close")
    assert_zarray_kept(store / name, template.zarrays[name], model.array().shape)
    assert_store_holds(store / name, model.array(), "after unmount")


def test_partial_trailing_row_fails_fsync_and_close(template: Template, tmp_path: Path) -> None:
    spec = ROWS_C
    store = template.copy(tmp_path)
    name, row = spec.name, spec.row_bytes
    model = model_of(template, name)
    rng = np.random.default_rng(22)
    data = rng.bytes(2 * row + 5)
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m:
        fd = os.open(m / name / "array.raw", os.O_RDWR)
        try:
            assert os.pwrite(fd, data, len(model)) == len(data)
            model.write(len(model), data[: 2 * row])  # complete rows are stored
            expect_errno(lambda: os.fsync(fd), (errno.EINVAL,), "fsync with a partial row")
            assert_store_holds(store / name, model.array(), "after the failed fsync")
        finally:
            closed = close_error(fd)  # the fd is released even when close fails
        assert errnos(closed) == [errno.EINVAL], f"close with a partial row: {closed!r}"
        assert_store_holds(store / name, model.array(), "after the failed close")
    # at unmount the partial row is dropped, with a log line
    assert_zarray_kept(store / name, template.zarrays[name], model.array().shape)
    assert_store_holds(store / name, model.array(), "after unmount")
    assert name in m.log(), "a log line names the array whose partial row was dropped"


def test_partial_row_completed_by_a_later_handle(template: Template, tmp_path: Path) -> None:
    """The partial row is held in memory past the failed close: another handle that
    writes the rest of the row completes it (``cat a >> f; cat b >> f`` style)."""
    spec = ROWS_F
    store = template.copy(tmp_path)
    name, row = spec.name, spec.row_bytes
    model = model_of(template, name)
    data = np.random.default_rng(23).bytes(row)
    end = len(model)
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m:
        fd = os.open(m / name / "array.raw", os.O_WRONLY)
        try:
            assert os.pwrite(fd, data[:11], end) == 11
        finally:
            closed = close_error(fd)
        assert errnos(closed) == [errno.EINVAL], f"close with a partial row: {closed!r}"
        with opened(m / name / "array.raw", os.O_WRONLY) as fd2:
            os.pwrite(fd2, data[11:], end + 11)
        model.write(end, data)
        assert_store_holds(store / name, model.array(), "after the completing close")
        assert_mount_shows(m, name, model)
    assert_zarray_kept(store / name, template.zarrays[name], model.array().shape)


def test_zero_d_array_keeps_its_size(template: Template, tmp_path: Path) -> None:
    store = template.copy(tmp_path)
    name = "scalar_f8"
    model = model_of(template, name)
    refused = (errno.EINVAL, errno.EFBIG, errno.EPERM)
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m:
        raw = m / name / "array.raw"
        with opened(raw) as fd:
            assert os.pwrite(fd, element("<f8", -0.0), 0) == 8
            model.write(0, element("<f8", -0.0))
            assert os.pwrite(fd, b"\x42", 3) == 1  # inside the element
            model.write(3, b"\x42")
            expect_errno(lambda: os.pwrite(fd, b"\x01", 8), refused, "write past a 0-d array")
            expect_errno(lambda: os.ftruncate(fd, 0), refused, "ftruncate 0-d to 0")
            expect_errno(lambda: os.ftruncate(fd, 16), refused, "ftruncate 0-d to 16")
            assert os.fstat(fd).st_size == 8
            same_bytes(os.pread(fd, 100, 0), model.bytes(), "0-d array.raw")
        assert_mount_shows(m, name, model)
    assert_zarray_kept(store / name, template.zarrays[name], ())
    assert_store_holds(store / name, model.array(), name)


# -- whole-file rewrites with everyday tools -----------------------------------------------


def _cp(raw: Path, work: Path, old: bytes, row: int, rng: np.random.Generator) -> bytes:
    new = rng.bytes(13 * row)
    (work / "new.raw").write_bytes(new)
    run(f"cp new.raw '{raw}'", work)
    return new


def _cp_fewer_rows(raw: Path, work: Path, old: bytes, row: int, rng: np.random.Generator) -> bytes:
    new = rng.bytes(2 * row)
    (work / "new.raw").write_bytes(new)
    run(f"cp new.raw '{raw}'", work)
    return new


def _redirect(raw: Path, work: Path, old: bytes, row: int, rng: np.random.Generator) -> bytes:
    new = rng.bytes(4 * row)
    (work / "new.raw").write_bytes(new)
    run(f"cat new.raw > '{raw}'", work)
    return new


def _redirect_nothing(
    raw: Path, work: Path, old: bytes, row: int, rng: np.random.Generator
) -> bytes:
    run(f": > '{raw}'", work)
    return b""


def _python_wb(raw: Path, work: Path, old: bytes, row: int, rng: np.random.Generator) -> bytes:
    new = rng.bytes(7 * row)
    with open(raw, "wb") as f:
        f.write(new[:100])
        f.flush()
        f.write(new[100:])
    return new


def _append(raw: Path, work: Path, old: bytes, row: int, rng: np.random.Generator) -> bytes:
    more = rng.bytes(3 * row)
    (work / "more.raw").write_bytes(more)
    run(f"cat more.raw >> '{raw}'", work)
    return old + more


def _append_twice(raw: Path, work: Path, old: bytes, row: int, rng: np.random.Generator) -> bytes:
    a, b = rng.bytes(row), rng.bytes(2 * row)
    (work / "a.raw").write_bytes(a)
    (work / "b.raw").write_bytes(b)
    run(f"cat a.raw >> '{raw}' && cat b.raw >> '{raw}'", work)
    return old + a + b


def _python_ab(raw: Path, work: Path, old: bytes, row: int, rng: np.random.Generator) -> bytes:
    more = rng.bytes(5 * row)
    with open(raw, "ab") as f:
        f.write(more)
    return old + more


def _dd_shorter(raw: Path, work: Path, old: bytes, row: int, rng: np.random.Generator) -> bytes:
    new = rng.bytes(3 * row)
    (work / "new.raw").write_bytes(new)
    run(f"dd if=new.raw of='{raw}' bs=7 conv=notrunc status=none", work)
    return new + old[len(new) :]


def _dd_longer(raw: Path, work: Path, old: bytes, row: int, rng: np.random.Generator) -> bytes:
    new = rng.bytes(len(old) + 4 * row)
    (work / "new.raw").write_bytes(new)
    run(f"dd if=new.raw of='{raw}' bs=4096 conv=notrunc status=none", work)
    return new


def _dd_seek(raw: Path, work: Path, old: bytes, row: int, rng: np.random.Generator) -> bytes:
    part = rng.bytes(2 * row)
    (work / "part.raw").write_bytes(part)
    run(f"dd if=part.raw of='{raw}' bs={row} seek=2 conv=notrunc status=none", work)
    return old[: 2 * row] + part + old[4 * row :]


SHELL_CASES: dict[str, Callable[[Path, Path, bytes, int, np.random.Generator], bytes]] = {
    "cp": _cp,
    "cp-fewer-rows": _cp_fewer_rows,
    "redirect": _redirect,
    "redirect-nothing": _redirect_nothing,
    "python-wb": _python_wb,
    "append": _append,
    "append-twice": _append_twice,
    "python-ab": _python_ab,
    "dd-notrunc-shorter": _dd_shorter,
    "dd-notrunc-longer": _dd_longer,
    "dd-seek": _dd_seek,
}


# Every case on the 2-D C-order array; the ones that grow, shrink or empty it also on
# the 3-D order F array (kept short: one mount per case).
SHELL_MATRIX = [(name, ROWS_C) for name in SHELL_CASES] + [
    (name, ROWS_F) for name in ("cp", "cp-fewer-rows", "redirect-nothing", "append", "dd-seek")
]


@pytest.mark.parametrize(
    ("case", "spec"),
    [(SHELL_CASES[name], spec) for name, spec in SHELL_MATRIX],
    ids=[f"{name}-{spec.name}" for name, spec in SHELL_MATRIX],
)
def test_everyday_tools_rewrite_the_array(
    template: Template,
    tmp_path: Path,
    case: Callable[[Path, Path, bytes, int, np.random.Generator], bytes],
    spec: Spec,
) -> None:
    store = template.copy(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    name, row = spec.name, spec.row_bytes
    model = model_of(template, name)
    rng = np.random.default_rng(zlib.crc32(f"{case.__name__}{name}".encode()))
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m:
        expected = case(m / name / "array.raw", work, model.bytes(), row, rng)
        assert len(expected) % row == 0
        model.truncate(0)
        model.write(0, expected)
        assert_mount_shows(m, name, model)
        assert_store_holds(store / name, model.array(), "after the tool closed the file")
    assert_zarray_kept(store / name, template.zarrays[name], model.array().shape)
    assert_store_holds(store / name, model.array(), "after unmount")


# -- array.npy -----------------------------------------------------------------------------


def test_npy_header_bytes_are_fixed(template: Template, tmp_path: Path) -> None:
    store = template.copy(tmp_path)
    name = ROWS_C.name
    model = model_of(template, name)
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m:
        npy = m / name / "array.npy"
        hlen = npy_header_length(npy)
        header = npy.read_bytes()[:hlen]
        changed_shape = header.replace(b"(10, 6)", b"(11, 6)")
        assert changed_shape != header and len(changed_shape) == hlen
        with opened(npy) as fd:
            assert os.pwrite(fd, header, 0) == hlen  # identical bytes: fine
            assert os.pwrite(fd, header[7:20], 7) == 13
            data = b"\x11" * 30
            assert os.pwrite(fd, header[-4:] + data, hlen - 4) == 34  # identical + data
            model.write(0, data)
            for offset, bad in [
                (0, b"\x93NUMPZ"),
                (0, changed_shape),
                (hlen - 1, b" "),  # the header ends in "\n"
                (hlen - 2, b"x\n" + b"\x22" * 8),  # straddling header and data
            ]:
                expect_errno(
                    lambda o=offset, b=bad: os.pwrite(fd, b, o), (errno.EPERM,), f"header {bad!r}"
                )
            same_bytes(os.pread(fd, hlen, 0), header, "header unchanged")
        assert_mount_shows(m, name, model)
        assert_store_holds(store / name, model.array(), "after close")


def test_npy_data_append_extends_shape0(template: Template, tmp_path: Path) -> None:
    store = template.copy(tmp_path)
    name = ROWS_F.name
    model = model_of(template, name)
    more = np.random.default_rng(31).bytes(2 * ROWS_F.row_bytes)
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m:
        with open(m / name / "array.npy", "ab") as f:
            f.write(more)
        model.write(len(model), more)
        assert_mount_shows(m, name, model)
        assert_store_holds(store / name, model.array(), "after close")
    assert_zarray_kept(store / name, template.zarrays[name], model.array().shape)


def _np_save(npy: Path, work: Path, new: np.ndarray) -> None:
    np.save(npy, new)


def _cat_npy(npy: Path, work: Path, new: np.ndarray) -> None:
    np.save(work / "new.npy", new)
    run(f"cat new.npy > '{npy}'", work)


NPY_REWRITES = [
    (ROWS_C, 13, _np_save),
    (ROWS_C, 3, _np_save),
    (ROWS_C, 0, _np_save),
    (ROWS_C, 12, _cat_npy),
    (ROWS_F, 9, _np_save),
    (ROWS_F, 2, _cat_npy),
]


@pytest.mark.parametrize(
    ("spec", "rows", "how"),
    NPY_REWRITES,
    ids=[f"{how.__name__[1:]}-{rows}-rows-{spec.name}" for spec, rows, how in NPY_REWRITES],
)
def test_np_save_onto_array_npy(
    template: Template,
    tmp_path: Path,
    spec: Spec,
    rows: int,
    how: Callable[[Path, Path, np.ndarray], None],
) -> None:
    store = template.copy(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    name = spec.name
    new = random_values(spec.np_dtype, (rows, *spec.shape[1:]), np.random.default_rng(rows))
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m:
        how(m / name / "array.npy", work, new)
        model = Model(new, spec.fill_bytes)
        assert_mount_shows(m, name, model)
        assert_store_holds(store / name, new, "after close")
    assert_zarray_kept(store / name, template.zarrays[name], new.shape)
    assert_store_holds(store / name, new, "after unmount")


def test_np_save_of_another_dtype_or_shape_is_einval(template: Template, tmp_path: Path) -> None:
    spec = ROWS_C
    store = template.copy(tmp_path)
    name = spec.name
    rng = np.random.default_rng(41)
    mismatches = {
        "dtype <f8": rng.standard_normal((10, 6)),
        "byte order >f4": rng.standard_normal((10, 6)).astype(">f4"),
        "dtype <i4": np.arange(60, dtype="<i4").reshape(10, 6),
        "trailing shape (10, 7)": rng.standard_normal((10, 7)).astype("<f4"),
        "1-D (60,)": rng.standard_normal(60).astype("<f4"),
        "3-D (10, 6, 1)": rng.standard_normal((10, 6, 1)).astype("<f4"),
    }
    model = model_of(template, name)
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m:
        npy = m / name / "array.npy"
        for what, bad in mismatches.items():
            with pytest.raises(OSError) as info:
                np.save(npy, bad)
            # the header's write fails; closing the file may fail again on top of it
            assert errno.EINVAL in errnos(info.value), f"{what}: {info.value!r}"
            assert zarray(store / name)["dtype"] == "<f4", what
            # the O_TRUNC was held for a matching header: nothing changed
            assert_mount_shows(m, name, model)
            assert_store_holds(store / name, model.array(), f"after a refused {what}")
        # the same header written by hand after O_TRUNC
        with opened(npy, os.O_WRONLY | os.O_TRUNC, check_close=False) as fd:
            buf = io.BytesIO()
            np.lib.format.write_array_header_1_0(
                buf, {"descr": "<f8", "fortran_order": False, "shape": (2, 6)}
            )
            expect_errno(lambda: os.write(fd, buf.getvalue()), (errno.EINVAL,), "raw header")
        assert_mount_shows(m, name, model)
        refusals = [line for line in m.log().splitlines() if "refusing a new array.npy" in line]
        assert len(refusals) == len(mismatches) + 1, refusals
        assert all(name in line for line in refusals), refusals
        # still usable: the right dtype and trailing shape works
        good = rng.standard_normal((4, 6)).astype("<f4")
        np.save(npy, good)
        assert_mount_shows(m, name, Model(good, spec.fill_bytes))
    assert_zarray_kept(store / name, template.zarrays[name], good.shape)
    assert_store_holds(store / name, good, "after unmount")


# -- metadata documents --------------------------------------------------------------------


def test_metadata_documents_stay_read_only(template: Template, tmp_path: Path) -> None:
    store = template.copy(tmp_path)
    docs = [".zgroup", ".zattrs", f"{ROWS_C.name}/.zarray", f"{ROWS_C.name}/.zattrs"]
    before = {doc: (store / doc).read_bytes() for doc in docs}
    refused = (errno.EACCES, errno.EPERM)
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m:
        for doc in docs:
            path = m / doc
            for flags in WRITE_FLAGS:
                expect_errno(
                    lambda p=path, f=flags: os.close(os.open(p, f)), refused, f"{doc} {flags:#o}"
                )
            assert path.read_bytes() == before[doc], doc
    assert {doc: (store / doc).read_bytes() for doc in docs} == before


# -- concurrency ---------------------------------------------------------------------------

PIECE_WRITER = r"""
import json, os, sys
path, pieces = sys.argv[1], json.load(open(sys.argv[2]))
fd = os.open(path, os.O_WRONLY)
print("ready", flush=True)
sys.stdin.readline()
for i, (offset, hexdata) in enumerate(pieces):
    data = bytes.fromhex(hexdata)
    assert os.pwrite(fd, data, offset) == len(data)
    if i % 97 == 96:
        os.fsync(fd)
os.close(fd)
"""


def test_two_processes_write_disjoint_parts_of_one_chunk(
    template: Template, tmp_path: Path
) -> None:
    """Bytes of the same chunks cut in pieces of 1..20 bytes (element boundaries ignored),
    alternately dealt to two processes that write them in random order at the same time."""
    spec = SPECS["shared_f4"]
    store = template.copy(tmp_path)
    model = model_of(template, spec.name)
    rng = np.random.default_rng(51)
    size = len(model)
    dealt: list[list[tuple[int, str]]] = [[], []]
    offset = 0
    while offset < size:
        length = min(int(rng.integers(1, 21)), size - offset)
        data = rng.bytes(length)
        dealt[len(dealt[0]) > len(dealt[1])].append((offset, data.hex()))
        model.write(offset, data)
        offset += length
    for i, pieces in enumerate(dealt):
        order = rng.permutation(len(pieces))
        (tmp_path / f"pieces{i}.json").write_text(json.dumps([pieces[j] for j in order]))
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m:
        raw = str(m / spec.name / "array.raw")
        writers = [
            subprocess.Popen(
                [sys.executable, "-c", PIECE_WRITER, raw, str(tmp_path / f"pieces{i}.json")],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(2)
        ]
        try:
            for w in writers:
                assert w.stdout.readline().strip() == "ready", w.stderr.read()
            for w in writers:
                w.stdin.write("go\n")
                w.stdin.flush()
            for w in writers:
                _, err = w.communicate(timeout=120)
                assert w.returncode == 0, err
        finally:
            for w in writers:
                if w.poll() is None:
                    w.kill()
                    w.wait()
        assert_mount_shows(m, spec.name, model)
        assert_store_holds(store / spec.name, model.array(), "after both writers closed")
    assert_store_holds(store / spec.name, model.array(), "after unmount")


TORN_WRITER = r"""
import os, random, sys
path, size, generations = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(5)
n = size // 8
fd = os.open(path, os.O_WRONLY)
for gen in range(1, generations + 1):
    value = bytes([gen % 250 + 1]) * 8
    for _ in range(6):
        a = rng.randrange(n)
        b = min(n, a + rng.randrange(1, n // 3))
        os.pwrite(fd, value * (b - a), a * 8)
    os.fsync(fd)
os.close(fd)
"""


def torn_elements(data: bytes) -> int:
    """Elements of 8 bytes that are not 8 copies of one byte."""
    elements = np.frombuffer(data, np.uint8).reshape(-1, 8)
    return int((elements != elements[:, :1]).any(axis=1).sum())


def test_reader_never_sees_a_torn_element(template: Template, tmp_path: Path) -> None:
    """Every element ever written is 8 equal bytes; a writer rewrites element-aligned
    ranges across chunk boundaries and fsyncs after each round, while this process reads
    the whole file (page cache dropped first, so reads reach the daemon) and the store."""
    spec = SPECS["torn_u8"]
    store = template.copy(tmp_path)
    size = math.prod(spec.shape) * 8
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m:
        raw = m / spec.name / "array.raw"
        writer = subprocess.Popen(
            [sys.executable, "-c", TORN_WRITER, str(raw), str(size), "40"],
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        reads = 0
        try:
            with opened(raw, os.O_RDONLY) as fd:
                while writer.poll() is None:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    data = os.pread(fd, size, 0)
                    assert len(data) == size
                    assert torn_elements(data) == 0, f"torn elements in read {reads}"
                    if reads % 5 == 0:
                        stored = read_store(store / spec.name).tobytes()
                        assert torn_elements(stored) == 0, "torn elements in the store"
                    reads += 1
            _, err = writer.communicate(timeout=120)
            assert writer.returncode == 0, err
        finally:
            if writer.poll() is None:
                writer.kill()
                writer.wait()
        assert reads >= 3, "the reader hardly overlapped the writer"
        final = raw.read_bytes()
        assert torn_elements(final) == 0
        assert final != bytes(size), "the writer wrote"
        same_bytes(read_store(store / spec.name).tobytes(), final, "store after the writer")
    same_bytes(read_store(store / spec.name).tobytes(), final, "store after unmount")


# -- fio -----------------------------------------------------------------------------------


def run_fio(raw: Path, size: int, cwd: Path, *job: str) -> None:
    assert size % 65536 == 0 and os.stat(raw).st_size == size
    command = [
        "fio",
        f"--filename={raw}",
        f"--size={size}",
        f"--filesize={size}",
        "--ioengine=psync",
        "--direct=0",
        "--verify=crc32c",
        "--do_verify=1",
        "--verify_fatal=1",
        "--create_on_open=0",
        "--allow_file_create=0",
        "--overwrite=1",
        "--fallocate=none",
        "--randseed=20250101",
        "--verify_state_save=0",  # no <job>-verify.state file left in the working directory
        *job,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=cwd)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "verify" not in output.lower(), output
    assert "err= 0" in output, output


FIO_JOBS = {
    "randwrite-4k": ("fio_f4", ("--name=randwrite", "--rw=randwrite", "--bs=4k")),
    "randrw-bssplit": (
        "fio_i2_f",
        ("--name=randrw", "--rw=randrw", "--bssplit=512/20:4k/40:64k/40"),
    ),
}


@pytest.mark.parametrize("job", FIO_JOBS.values(), ids=FIO_JOBS.keys())
def test_fio_verify(
    fio_template: Template, tmp_path: Path, job: tuple[str, tuple[str, ...]]
) -> None:
    name, options = job
    store = fio_template.copy(tmp_path)
    initial = np.ascontiguousarray(fio_template.initial[name]).tobytes()
    with mounted(store, log_dir=tmp_path) as m:
        raw = m / name / "array.raw"
        run_fio(raw, len(initial), tmp_path, *options)
        assert os.stat(raw).st_size == len(initial)
        after = raw.read_bytes()
        assert after != initial, "fio wrote"
        assert_store_holds(
            store / name,
            np.frombuffer(after, SPECS[name].np_dtype).reshape(SPECS[name].shape),
            "after fio closed the file",
        )
    assert_zarray_kept(store / name, fio_template.zarrays[name], SPECS[name].shape)
    same_bytes(read_store(store / name).tobytes(), after, f"{name} after unmount")
