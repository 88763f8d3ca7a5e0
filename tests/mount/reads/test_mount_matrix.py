"""One real mount of one store holding a matrix of Zarr v2 arrays, checked against zarr-python.

Dimensions covered (each value several times, not the full cross-product): dtype
(bool, i1, >i2, <i4, u8, <f2, >f4, <f8, c8, >c16, M8[ns], m8[s], |S6, <U5, >U3, |V4,
flat and nested structured, nested + subarray structured written by hand), compressor
(none, zlib, blosc lz4 + shuffle, blosc zstd + bitshuffle, gzip, bz2, lzma, zstd),
filters (none, Delta, Shuffle, Shuffle + Delta, FixedScaleOffset), order C/F, key
separator "." and "/", overhanging edge chunks, partly written or unwritten arrays
(missing chunks read as fill value: NaN, ±Infinity, -0.0, custom ints, strings, bytes,
null), 0-d arrays, zero-length axes and object dtype.

zarr-python 3 (``zarr.open_array(...)[...]``) is the oracle for every array it can
write; the hand-written structured arrays (zarr 3 cannot write subarray fields) and
the null fill value use a NumPy reference built alongside their chunks.
"""

from __future__ import annotations

import base64
import errno
import io
import json
import math
import os
import subprocess
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
from numcodecs import BZ2, LZMA, Blosc, Delta, FixedScaleOffset, GZip, Shuffle, Zlib, Zstd

from tests.support.mounting import Mounted, mounted
from zarrfs.formats.sidecars import envi_data_type, nrrd_type
from zarrfs.formats.tiff import tiff_sample

NAN = float("nan")
INF = float("inf")
DEFAULT = object()  # zarr-python's default fill value for the dtype

FLAT_RECORD = [("a", "<i4"), ("b", ">f8"), ("c", "|S3")]
NESTED_RECORD = [("a", "<i2"), ("b", [("x", ">f8"), ("y", "u1")])]
# zarr 3.1 cannot write subarray fields for v2: these arrays are written by hand.
SUBARRAY_RECORD = [("a", "<i4"), ("b", [("x", ">f8"), ("y", "u1", (2,))]), ("c", "<U2", (3,))]


@dataclass(frozen=True)
class Spec:
    path: str
    dtype: Any
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    compressor: str = "none"
    filters: str = "none"
    order: str = "C"
    separator: str = "."
    fill: Any = DEFAULT
    write: str = "full"  # "full", "partial" (the leading half of every axis) or "none"

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)


S = Spec
SPECS: list[Spec] = [
    # integers and bool
    S("ints/bool_a", "bool", (13, 7), (4, 3)),
    S("ints/bool_b", "bool", (50,), (16,), "zlib", "shuffle", "F", "/", True, "partial"),
    S("ints/i1_a", "i1", (5, 6, 7), (2, 4, 3), "blosc-lz4", "delta", "F", "/", -7, "partial"),
    S("ints/i1_b", "i1", (13, 7), (4, 3), "lzma"),
    S("ints/i2_a", ">i2", (31, 33), (8, 8), "gzip", "shuffle+delta", "C", "/", 1234, "partial"),
    S("ints/i2_b", ">i2", (9, 10), (9, 4), "zstd", "delta", "F"),
    S(
        "ints/i4_a",
        "<i4",
        (300, 257),
        (64, 100),
        "blosc-zstd",
        "shuffle+delta",
        "F",
        ".",
        -123456,
        "partial",
    ),
    S("ints/i4_b", "<i4", (50,), (16,), "bz2", "none", "C", "/", -5, "none"),
    S("ints/u8_a", "u8", (13, 7), (4, 3), "zlib", "delta", "C", "/", 42, "partial"),
    S("ints/u8_b", "u8", (5, 6, 7), (2, 4, 3), "none", "shuffle+delta", "F"),
    # floats: NaN / ±Infinity / -0.0 fill values, FixedScaleOffset
    S("floats/f2_a", "<f2", (31, 33), (8, 8), "blosc-lz4", "none", "C", "/", NAN, "partial"),
    S("floats/f2_b", "<f2", (13, 7), (4, 3), "bz2", "fso", "F"),
    S("floats/f4_a", ">f4", (5, 6, 7), (2, 4, 3), "zstd", "fso", "C", ".", 0.75, "partial"),
    S("floats/f4_b", ">f4", (9, 10), (9, 4), "gzip", "shuffle", "F", "/", -INF, "partial"),
    S("floats/f4_c", ">f4", (13, 7), (4, 3), "zstd", "none", "F", "/", INF, "partial"),
    S("floats/f8_a", "<f8", (300, 257), (64, 100), "zlib", "fso", "F", "/", -2.5, "partial"),
    S("floats/f8_b", "<f8", (50,), (16,), "lzma", "delta", "C", ".", -0.0, "partial"),
    S("floats/deep/f8_c", "<f8", (13, 7), (4, 3), "blosc-zstd", "shuffle", "C", "/", NAN, "none"),
    # complex
    S("complex/c8_a", "c8", (13, 7), (4, 3), "zlib", "none", "F"),
    S(
        "complex/c8_b",
        "c8",
        (31, 33),
        (8, 8),
        "blosc-zstd",
        "shuffle",
        "C",
        "/",
        complex(NAN, 1.5),
        "partial",
    ),
    S("complex/c16_a", ">c16", (5, 6, 7), (2, 4, 3), "bz2", "none", "C", "/", DEFAULT, "partial"),
    S(
        "complex/c16_b",
        ">c16",
        (9, 10),
        (9, 4),
        "none",
        "shuffle",
        "F",
        ".",
        complex(INF, -INF),
        "partial",
    ),
    # datetimes and timedeltas (default fill NaT)
    S("times/M8_a", "M8[ns]", (13, 7), (4, 3), "zstd", "none", "C", "/", DEFAULT, "partial"),
    S(
        "times/M8_b",
        "M8[ns]",
        (50,),
        (16,),
        "gzip",
        "shuffle",
        "F",
        ".",
        np.datetime64("2001-02-03T04:05:06", "ns"),
        "partial",
    ),
    S("times/m8_a", "m8[s]", (5, 6, 7), (2, 4, 3), "lzma", "none", "F", "/"),
    S(
        "times/m8_b",
        "m8[s]",
        (9, 10),
        (9, 4),
        "blosc-lz4",
        "shuffle",
        "C",
        ".",
        np.timedelta64(3600, "s"),
        "partial",
    ),
    # fixed-size strings and opaque bytes
    S("strings/S6_a", "|S6", (13, 7), (4, 3), "zlib", "none", "C", ".", DEFAULT, "partial"),
    S("strings/S6_b", "|S6", (9, 10), (9, 4), "lzma", "shuffle", "F", "/", b"fill", "partial"),
    S(
        "strings/U5_a",
        "<U5",
        (5, 6, 7),
        (2, 4, 3),
        "blosc-zstd",
        "none",
        "F",
        ".",
        "h\u00e9llo",
        "partial",
    ),
    S("strings/U5_b", "<U5", (50,), (16,), "gzip", "shuffle", "C", "/"),
    S("strings/U3_a", ">U3", (13, 7), (4, 3), "bz2", "none", "C", "/", "ab", "partial"),
    S("strings/U3_b", ">U3", (31, 33), (8, 8), "zstd", "none", "F", "."),
    S("strings/V4_a", "|V4", (13, 7), (4, 3), "none", "none", "C", "/", DEFAULT, "partial"),
    S(
        "strings/V4_b",
        "|V4",
        (9, 10),
        (9, 4),
        "blosc-lz4",
        "shuffle",
        "F",
        ".",
        b"\x01\x02\x03\x04",
        "partial",
    ),
    # structured
    S("records/flat", FLAT_RECORD, (13, 7), (4, 3), "zlib", "none", "C", ".", DEFAULT, "partial"),
    S(
        "records/nested",
        NESTED_RECORD,
        (9, 10),
        (9, 4),
        "lzma",
        "shuffle",
        "F",
        "/",
        DEFAULT,
        "partial",
    ),
    # edge cases: 0-d, zero-length axes, one chunk larger than the whole array
    S("edge/scalar_f8", "<f8", (), (), "none", "none", "C", ".", NAN, "none"),
    S("edge/scalar_i2", ">i2", (), (), "zlib", "none", "C", "/", 3),
    S("edge/scalar_U5", "<U5", (), (), "gzip"),
    S("edge/empty_i4", "<i4", (0, 5), (3, 5)),
    S("edge/empty_f4", ">f4", (4, 0, 3), (2, 2, 2), "zlib", "none", "F", "/"),
    S("edge/big_chunk", "<f8", (5, 5), (10, 10), "blosc-lz4", "none", "F", ".", NAN, "partial"),
]


@dataclass(frozen=True)
class HandSpec:
    """An array whose .zarray and chunks are written with json + numcodecs directly."""

    path: str
    dtype: Any
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    compressor: dict[str, Any] | None
    order: str
    separator: str
    fill: Any  # an element (encoded as base64 for structured dtypes) or None for null
    missing: tuple[tuple[int, ...], ...]  # chunk indices left unwritten
    with_attrs: bool


HAND_SPECS: list[HandSpec] = [
    HandSpec(
        "records/hand_sub_f",
        SUBARRAY_RECORD,
        (7, 5),
        (3, 2),
        {"id": "zlib", "level": 4},
        "F",
        "/",
        (-1, (2.5, (7, 9)), ("x", "yz", "")),
        ((1, 1), (2, 2)),
        True,
    ),
    HandSpec(
        "records/hand_sub_c",
        SUBARRAY_RECORD,
        (4, 3),
        (3, 2),
        None,
        "C",
        ".",
        None,
        ((0, 1),),
        False,
    ),
    HandSpec(
        "edge/null_fill",
        "<i4",
        (7,),
        (3,),
        {"id": "gzip", "level": 1},
        "C",
        ".",
        None,
        ((0,), (2,)),
        True,
    ),
]

# Arrays whose element size is not fixed: metadata only, no array.raw / array.npy.
OBJECT_ARRAYS = ["strings/objects"]

COMPRESSORS: dict[str, Any] = {
    "none": None,
    "zlib": Zlib(level=3),
    "blosc-lz4": Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE),
    "blosc-zstd": Blosc(cname="zstd", clevel=3, shuffle=Blosc.BITSHUFFLE),
    "gzip": GZip(level=5),
    "bz2": BZ2(level=9),
    "lzma": LZMA(preset=1),
    "zstd": Zstd(level=3),
}

ARRAY_PATHS = [s.path for s in SPECS] + [h.path for h in HAND_SPECS]


def filters_for(name: str, dtype: np.dtype) -> list[Any] | None:
    if name == "none":
        return None
    if name == "delta":
        return [Delta(dtype=dtype.str)]
    if name == "shuffle":
        return [Shuffle(elementsize=dtype.itemsize)]
    if name == "shuffle+delta":
        return [Shuffle(elementsize=dtype.itemsize), Delta(dtype=dtype.str)]
    if name == "fso":
        return [FixedScaleOffset(offset=1.5, scale=100, dtype=dtype.str, astype="<i4")]
    raise AssertionError(name)


# -- deterministic data --------------------------------------------------------------------


def make_data(
    dtype: np.dtype, shape: tuple[int, ...], rng: np.random.Generator, special_floats: bool = True
) -> np.ndarray:
    """Random values of ``dtype`` (recursing into structured and subarray fields)."""
    if dtype.subdtype is not None:
        base, sub = dtype.subdtype
        return make_data(base, shape + sub, rng, special_floats)
    if dtype.fields is not None:
        out = np.zeros(shape, dtype=dtype)
        for name in dtype.names:
            out[name] = make_data(dtype.fields[name][0], shape, rng, special_floats)
        return out
    n = math.prod(shape)
    kind = dtype.kind
    if kind == "b":
        flat = rng.random(n) < 0.5
    elif kind in "iu":
        info = np.iinfo(dtype)
        native = dtype.newbyteorder("=")
        flat = rng.integers(info.min, info.max, size=n, endpoint=True, dtype=native)
    elif kind in "fc":
        flat = rng.standard_normal(n) * 100
        if kind == "c":
            flat = flat + 1j * rng.standard_normal(n)
        flat = flat.astype(dtype)
        if special_floats and n >= 8:
            flat[[1, 3, 5, 7]] = [NAN, INF, -INF, -0.0]
    elif kind in "Mm":
        flat = rng.integers(-(2**40), 2**40, size=n).view(f"{kind}8[{np.datetime_data(dtype)[0]}]")
        if n >= 3:
            flat[2] = np.array("NaT", dtype=flat.dtype)
    elif kind == "S":
        alphabet = b"abcXYZ09\xff\x01 "
        flat = np.array(
            [
                bytes(rng.choice(list(alphabet), size=rng.integers(0, dtype.itemsize + 1)))
                for _ in range(n)
            ],
            dtype=dtype,
        )
    elif kind == "U":
        alphabet = ["a", "Z", "\u00e9", "\u00df", "\u6f22", "\U0001f600", " ", "0"]
        length = dtype.itemsize // 4
        flat = np.array(
            ["".join(rng.choice(alphabet, size=rng.integers(0, length + 1))) for _ in range(n)],
            dtype=dtype,
        )
    elif kind == "V":
        flat = rng.integers(0, 256, size=n * dtype.itemsize, dtype=np.uint8).view(dtype)
    else:
        raise AssertionError(dtype)
    return np.asarray(flat).astype(dtype).reshape(shape)


def write_region(shape: tuple[int, ...], how: str) -> tuple[slice, ...] | None:
    if how == "none" or math.prod(shape) == 0:
        return None
    if how == "full":
        return tuple(slice(None) for _ in shape)
    return tuple(slice(0, max(1, (n + 1) // 2)) for n in shape)


# -- building the store ------------------------------------------------------------------


def build_zarr_array(root: Path, spec: Spec, rng: np.random.Generator) -> zarr.Array:
    dtype = spec.np_dtype
    kwargs: dict[str, Any] = {}
    if spec.fill is not DEFAULT:
        kwargs["fill_value"] = spec.fill
    z = zarr.create_array(
        store=str(root / spec.path),
        shape=spec.shape,
        chunks=spec.chunks,
        dtype=dtype,
        zarr_format=2,
        compressors=COMPRESSORS[spec.compressor],
        filters=filters_for(spec.filters, dtype),
        order=spec.order,
        chunk_key_encoding={"name": "v2", "separator": spec.separator},
        **kwargs,
    )
    region = write_region(spec.shape, spec.write)
    if region is not None:
        # NaN and infinities do not survive arithmetic filters (lossy and noisy)
        special = spec.filters not in ("fso", "delta", "shuffle+delta")
        data = make_data(dtype, spec.shape, rng, special_floats=special)
        z[region] = data[region]
    return z


def encode_fill(fill: Any, dtype: np.dtype) -> Any:
    if fill is None:
        return None
    element = np.array(fill, dtype=dtype)
    if dtype.fields is not None or dtype.kind in "SV":
        return base64.standard_b64encode(element.tobytes()).decode()
    return element.item()


def build_hand_array(root: Path, spec: HandSpec, rng: np.random.Generator) -> np.ndarray:
    """Write .zarray, .zattrs and chunks directly; return the NumPy reference array."""
    dtype = np.dtype(spec.dtype)
    directory = root / spec.path
    directory.mkdir(parents=True)
    zarray = {
        "zarr_format": 2,
        "shape": list(spec.shape),
        "chunks": list(spec.chunks),
        "dtype": dtype.descr if dtype.fields is not None else dtype.str,
        "compressor": spec.compressor,
        "fill_value": encode_fill(spec.fill, dtype),
        "order": spec.order,
        "filters": None,
        "dimension_separator": spec.separator,
    }
    (directory / ".zarray").write_text(json.dumps(zarray, indent=4))
    if spec.with_attrs:
        (directory / ".zattrs").write_text(json.dumps({"written_by": "hand"}))
    fill_element = np.zeros((), dtype) if spec.fill is None else np.array(spec.fill, dtype=dtype)
    data = make_data(dtype, spec.shape, rng)
    reference = np.full(spec.shape, fill_element, dtype=dtype)
    codec = numcodecs.get_codec(dict(spec.compressor)) if spec.compressor else None
    grid = [range(-(-n // c)) for n, c in zip(spec.shape, spec.chunks)]
    for index in np.ndindex(*[len(g) for g in grid]):
        if index in spec.missing:
            continue
        box = tuple(
            slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(index, spec.chunks, spec.shape)
        )
        chunk = np.full(spec.chunks, fill_element, dtype=dtype)
        inner = tuple(slice(0, b.stop - b.start) for b in box)
        chunk[inner] = data[box]
        reference[box] = data[box]
        raw = chunk.tobytes(order=spec.order)
        encoded = codec.encode(raw) if codec else raw
        key = directory.joinpath(*(spec.separator.join(map(str, index)).split("/")))
        key.parent.mkdir(parents=True, exist_ok=True)
        key.write_bytes(bytes(encoded))
    return reference


def write_consolidated(root: Path) -> None:
    """A .zmetadata listing every metadata document of the store, as zarr 2 writes it."""
    metadata: dict[str, Any] = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in (".zgroup", ".zarray", ".zattrs"):
            if name in files:
                key = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
                metadata[key] = json.loads((Path(dirpath) / name).read_text())
    doc = {"zarr_consolidated_format": 1, "metadata": dict(sorted(metadata.items()))}
    (root / ".zmetadata").write_text(json.dumps(doc, indent=4, sort_keys=True))


@dataclass
class Matrix:
    store: Path
    mount: Mounted
    references: dict[str, np.ndarray]
    groups: dict[str, list[str]]  # group path → expected directory listing

    def raw(self, path: str) -> bytes:
        return np.ascontiguousarray(self.references[path]).tobytes()


def netcdf_numeric(dtype: np.dtype) -> bool:
    """Whether netCDF classic has a type for ``dtype``: integers and float32/64."""
    if dtype.fields is not None or dtype.subdtype is not None:
        return False
    return (dtype.kind in "iu" and dtype.itemsize in (1, 2, 4, 8)) or dtype.str[1:] in ("f4", "f8")


def build_store(root: Path) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
    rng = np.random.default_rng(20240601)
    group = zarr.open_group(str(root), mode="w", zarr_format=2)
    group.attrs["title"] = "zarrfs mount matrix"
    for path in sorted({p.rsplit("/", 1)[0] for p in ARRAY_PATHS + OBJECT_ARRAYS}):
        group.require_group(path)
    written = {spec.path: build_zarr_array(root, spec, rng) for spec in SPECS}
    objects = zarr.create_array(
        store=str(root / "strings/objects"), shape=(5,), chunks=(2,), dtype=str, zarr_format=2
    )
    objects[...] = ["a", "bb", "", "\u00e9\u00e9", "ccc"]
    references = {}
    for spec in SPECS:
        # zarr 3.1 cannot re-open nested structured v2 metadata it wrote, so read back
        # through the array objects that wrote the chunks (the chunks come from disk).
        value = np.asarray(written[spec.path][...])
        if value.shape == ():  # zarr returns 0-d values as native-order NumPy scalars
            value = value.astype(spec.np_dtype)
        assert value.dtype == spec.np_dtype, (spec.path, value.dtype)  # the oracle itself
        references[spec.path] = value
    for hand in HAND_SPECS:
        references[hand.path] = build_hand_array(root, hand, rng)
    # Things that are neither metadata nor chunks: never shown.
    (root / "README.txt").write_text("not part of the hierarchy\n")
    (root / "ints" / "not_a_node").mkdir()
    (root / "ints" / "not_a_node" / "x").write_text("stray")
    (root / "ints" / "i1_b" / "notes.txt").write_text("stray file inside an array")
    write_consolidated(root)

    groups: dict[str, list[str]] = {}
    nodes = ARRAY_PATHS + OBJECT_ARRAYS
    group_paths = {""} | {
        "/".join(p.split("/")[:i]) for p in nodes for i in range(1, p.count("/") + 1)
    }
    for g in group_paths:
        docs = [d for d in (".zgroup", ".zattrs", ".zmetadata") if (root / g / d).is_file()]
        prefix = f"{g}/" if g else ""
        children = {
            p[len(prefix) :].split("/")[0]
            for p in nodes + sorted(group_paths)
            if p.startswith(prefix) and p != g
        }
        # group.nc (views/netcdf.py) where a child array has a netCDF classic type.
        if any(
            f"{prefix}{child}" in ARRAY_PATHS
            and netcdf_numeric(references[f"{prefix}{child}"].dtype)
            for child in children
        ):
            children.add("group.nc")
        groups[g] = sorted(docs + sorted(children))
    return references, groups


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    root = tmp_path_factory.mktemp("matrix") / "matrix.zarr"
    references, groups = build_store(root)
    with mounted(root, log_dir=root.parent) as m:
        yield Matrix(root, m, references, groups)


def same_bytes(a: bytes, b: bytes, what: str) -> None:
    """Byte equality with a short message (the default diff of large bytes is useless)."""
    if a == b:
        return
    n = min(len(a), len(b))
    first = next((i for i in range(n) if a[i] != b[i]), n)
    raise AssertionError(f"{what}: {len(a)} vs {len(b)} bytes, first difference at byte {first}")


def assert_same_array(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    """dtype, shape and bytes identical (so NaN and -0.0 compare bitwise)."""
    assert actual.dtype == expected.dtype, what
    assert actual.dtype.str == expected.dtype.str, what  # byte order too
    assert actual.shape == expected.shape, what
    same_bytes(
        np.ascontiguousarray(actual).tobytes(), np.ascontiguousarray(expected).tobytes(), what
    )
    if expected.dtype.fields is None and expected.dtype.kind != "V":
        np.testing.assert_array_equal(actual, expected, err_msg=what)


def read_npy_header(f: Any) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran_order, dtype) of an NPY file; no field name here needs format 3.0."""
    version = np.lib.format.read_magic(f)
    assert version in ((1, 0), (2, 0)), version
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(f)
    return np.lib.format.read_array_header_2_0(f)


# -- per-array checks ---------------------------------------------------------------------


@pytest.mark.parametrize("path", ARRAY_PATHS)
def test_raw_equals_zarr(matrix: Matrix, path: str) -> None:
    raw = matrix.mount / f"{path}/array.raw"
    expected = matrix.raw(path)
    assert os.stat(raw).st_size == len(expected)
    same_bytes(raw.read_bytes(), expected, f"{path}/array.raw")


@pytest.mark.parametrize("path", ARRAY_PATHS)
def test_npy_loads_equal_to_zarr(matrix: Matrix, path: str) -> None:
    npy = matrix.mount / f"{path}/array.npy"
    expected = matrix.references[path]
    content = npy.read_bytes()
    assert os.stat(npy).st_size == len(content)
    with open(npy, "rb") as f:
        shape, fortran_order, dtype = read_npy_header(f)
        header_length = f.tell()
    assert (shape, fortran_order, dtype) == (expected.shape, False, expected.dtype)
    assert len(content) == header_length + expected.nbytes
    same_bytes(content[header_length:], matrix.raw(path), f"{path}/array.npy data")
    assert_same_array(np.load(npy), expected, f"np.load({path}/array.npy)")
    mapped = np.load(npy, mmap_mode="r")
    try:
        assert_same_array(np.asarray(mapped), expected, f"np.load({path}/array.npy, mmap)")
    finally:
        del mapped


@pytest.mark.parametrize("path", ARRAY_PATHS)
def test_fromfile(matrix: Matrix, path: str) -> None:
    expected = matrix.references[path]
    values = np.fromfile(matrix.mount / f"{path}/array.raw", dtype=expected.dtype)
    assert_same_array(values.reshape(expected.shape), expected, f"fromfile({path})")


@pytest.mark.parametrize("path", ARRAY_PATHS)
def test_random_preads(matrix: Matrix, path: str) -> None:
    expected = matrix.raw(path)
    n = len(expected)
    rng = np.random.default_rng(zlib.crc32(path.encode()))
    cases = [(0, 1), (0, n + 5), (max(n - 1, 0), 1), (max(n - 3, 0), 10), (n, 5), (n + 100, 7)]
    for _ in range(25):
        cases.append((int(rng.integers(0, n + 1)), int(rng.integers(1, 3 * 4096)) | 1))
    fd = os.open(matrix.mount / f"{path}/array.raw", os.O_RDONLY)
    try:
        for offset, length in cases:
            got = os.pread(fd, length, offset)
            what = f"pread({path}, {length}, {offset})"
            same_bytes(got, expected[offset : offset + length], what)
    finally:
        os.close(fd)
    npy_path = matrix.mount / f"{path}/array.npy"
    with open(npy_path, "rb") as f:
        read_npy_header(f)
        header = f.tell()
        f.seek(0)
        npy = f.read(header) + expected
    fd = os.open(npy_path, os.O_RDONLY)
    try:
        for offset, length in [(0, 6), (header - 3, 11), (header, n), (header + n // 3, 13)]:
            got = os.pread(fd, length, offset)
            same_bytes(got, npy[offset : offset + length], f"pread({path}.npy, {length}, {offset})")
    finally:
        os.close(fd)


@pytest.mark.parametrize("path", ARRAY_PATHS + OBJECT_ARRAYS)
def test_array_directory_listing(matrix: Matrix, path: str) -> None:
    names = os.listdir(matrix.mount / path)
    assert names == sorted(names), "directories list in sorted order"
    docs = [d for d in (".zarray", ".zattrs") if (matrix.store / path / d).is_file()]
    files = ["info"] if path in OBJECT_ARRAYS else ["array.npy", "array.raw", "info"]
    if path not in OBJECT_ARRAYS:  # the sidecar headers where the dtype allows
        dtype = matrix.references[path].dtype
        files += ["array.hdr"] if envi_data_type(dtype) is not None else []
        files += ["array.nhdr"] if nrrd_type(dtype) is not None else []
        ndim = len(matrix.references[path].shape)
        files += ["array.tif"] if tiff_sample(dtype) is not None and ndim >= 2 else []
    assert names == docs + sorted(files)
    assert os.path.isdir(matrix.mount / path)
    for name in names:
        assert os.path.isfile(matrix.mount / path / name)


@pytest.fixture(scope="module")
def plain_mount(matrix: Matrix) -> Iterator[Path]:
    """The matrix store mounted with --no-consolidated: documents come from their files.

    Read-only: the matrix's own mount holds the store's read-write lock."""
    with mounted(
        matrix.store, "--no-consolidated", "--read-only", log_dir=matrix.store.parent
    ) as m:
        yield m.path


@pytest.mark.parametrize("path", ARRAY_PATHS + OBJECT_ARRAYS + ["", "ints", "floats/deep"])
def test_metadata_documents_byte_identical(plain_mount: Path, matrix: Matrix, path: str) -> None:
    for name in (".zarray", ".zattrs", ".zgroup", ".zmetadata"):
        stored = matrix.store / path / name
        shown = plain_mount / path / name
        if not stored.is_file():
            assert not shown.exists(), f"{path}/{name} is not in the store"
            continue
        assert os.stat(shown).st_size == stored.stat().st_size
        assert shown.read_bytes() == stored.read_bytes(), f"{path}/{name}"


@pytest.mark.parametrize("path", [*ARRAY_PATHS, "", "ints", "floats/deep"])
def test_consolidated_documents_match_the_store(matrix: Matrix, path: str) -> None:
    """Listed from .zmetadata, a document is its consolidated entry: equal as JSON.

    (The matrix's documents come from two writers, zarr-python 3 and json by hand,
    so their formatting differs from the .zmetadata's; tests/handlers/test_consolidated.py
    checks that a store from one writer is shown byte for byte.)
    """
    for name in (".zarray", ".zattrs", ".zgroup"):
        stored = matrix.store / path / name
        shown = matrix.mount / path / name
        if not stored.is_file():
            assert not shown.exists(), f"{path}/{name} is not in the store"
            continue
        assert os.stat(shown).st_size == len(shown.read_bytes())
        assert json.loads(shown.read_bytes()) == json.loads(stored.read_bytes()), path


def test_group_listings(matrix: Matrix) -> None:
    assert "" in matrix.groups and "floats/deep" in matrix.groups
    for group, expected in matrix.groups.items():
        if not group:  # the mount root also holds the control directory
            expected = sorted([".zarrfs", *expected])
        names = os.listdir(matrix.mount / group)
        assert names == expected, group or "/"
        assert names == sorted(names)


def test_stray_files_not_shown(matrix: Matrix) -> None:
    assert "README.txt" not in os.listdir(matrix.mount.path)
    assert "not_a_node" not in os.listdir(matrix.mount / "ints")
    assert "notes.txt" not in os.listdir(matrix.mount / "ints/i1_b")
    for name in (
        "README.txt",
        "ints/not_a_node",
        "ints/i1_b/notes.txt",
        "ints/i1_b/array.zarr",
    ):
        with pytest.raises(FileNotFoundError):
            os.stat(matrix.mount / name)
    # Chunk keys are not listed, but a lookup finds them, as stored (for Zarr
    # readers pointed at the mount); a key the store does not hold is not found.
    found = 0
    for key in ("ints/i1_b/0.0", "floats/f8_a/0/0", "floats/f8_a/0.0"):
        stored = matrix.store / key
        if stored.is_file():
            assert (matrix.mount / key).read_bytes() == stored.read_bytes(), key
            found += 1
        else:
            with pytest.raises(FileNotFoundError):
                os.stat(matrix.mount / key)
    assert found, "no chunk key of the matrix was stored"


def test_object_dtype_has_metadata_only(matrix: Matrix) -> None:
    for path in OBJECT_ARRAYS:
        for name in ("array.raw", "array.npy"):
            with pytest.raises(OSError) as info:
                open(matrix.mount / path / name, "rb").close()
            assert info.value.errno == errno.ENOENT
        shown = (matrix.mount / path / ".zarray").read_bytes()
        assert json.loads(shown) == json.loads((matrix.store / path / ".zarray").read_bytes())
        assert json.loads(shown)["dtype"] == "|O"
    assert "strings/objects" in matrix.mount.log(), "the log says why there is no array.raw"


def test_statvfs(matrix: Matrix) -> None:
    st = os.statvfs(matrix.mount.path)
    assert st.f_bsize > 0
    assert st.f_namemax >= 255
    assert os.statvfs(matrix.mount / "ints/i1_a").f_bsize == st.f_bsize


def test_zero_d_and_zero_length(matrix: Matrix) -> None:
    assert os.stat(matrix.mount / "edge/empty_i4/array.raw").st_size == 0
    assert (matrix.mount / "edge/empty_i4/array.raw").read_bytes() == b""
    assert np.load(matrix.mount / "edge/empty_f4/array.npy").shape == (4, 0, 3)
    scalar = np.load(matrix.mount / "edge/scalar_f8/array.npy")
    assert scalar.shape == () and np.isnan(scalar)
    scalar_i2 = (matrix.mount / "edge/scalar_i2/array.raw").read_bytes()
    assert scalar_i2 == int(matrix.references["edge/scalar_i2"]).to_bytes(2, "big", signed=True)
    assert np.load(matrix.mount / "edge/null_fill/array.npy")[:3].tolist() == [0, 0, 0]


def test_cat_and_dd(matrix: Matrix) -> None:
    raw = matrix.mount / "ints/i4_a/array.raw"
    expected = matrix.raw("ints/i4_a")
    cat = subprocess.run(["cat", str(raw)], capture_output=True, check=True, timeout=30)
    same_bytes(cat.stdout, expected, "cat")
    dd = subprocess.run(
        ["dd", f"if={raw}", "bs=1000", "skip=37", "count=123", "status=none"],
        capture_output=True,
        check=True,
        timeout=30,
    )
    same_bytes(dd.stdout, expected[37000 : 37000 + 123000], "dd")
    npy = matrix.mount / "floats/f8_a/array.npy"
    cat = subprocess.run(["cat", str(npy)], capture_output=True, check=True, timeout=30)
    assert_same_array(np.load(io.BytesIO(cat.stdout)), matrix.references["floats/f8_a"], "cat npy")


def test_daemon_still_serving(matrix: Matrix) -> None:
    assert matrix.mount.process.poll() is None
