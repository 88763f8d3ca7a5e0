"""Damaged stores: corrupt and truncated chunks, unknown codecs, broken metadata.

A fault is an EIO for the reader of the damaged bytes plus one log line naming the
array and the chunk key; everything else in the mount keeps working. Every store is
a copy under tmp_path; ``data/example.zarr`` is never touched.

The arrays built here have chunks that span whole rows of 4 KiB multiples, so every
chunk occupies its own pages of ``array.raw``: the kernel reads pages, and a good
chunk sharing a page with a corrupt one could not be read through the page cache.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zarr
from numcodecs import Zlib

from tests.support.mounting import Mounted, expect_eio, mounted, read_range, unmount, zarrfs_command

GRID_ROWS, GRID_COLS, GRID_CHUNK_ROWS = 64, 512, 8  # <f8: one chunk = 8 rows = 32 KiB
CHUNK_BYTES = GRID_CHUNK_ROWS * GRID_COLS * 8
GARBAGE_CHUNK, TRUNCATED_CHUNK, WRONG_SIZE_CHUNK = 2, 5, 6
CORRUPT_CHUNKS = (GARBAGE_CHUNK, TRUNCATED_CHUNK, WRONG_SIZE_CHUNK)
GOOD_CHUNKS = tuple(i for i in range(GRID_ROWS // GRID_CHUNK_ROWS) if i not in CORRUPT_CHUNKS)

NOCODEC_FILL = 7
NOCODEC_STORED_ROWS = 32  # rows 0..31 have chunks, rows 32..63 do not


def chunk_lines(log: str, array: str, key: str) -> list[str]:
    """Log lines that name both the array path and the chunk key."""
    key_pattern = re.compile(rf"(?<![\w.]){re.escape(key)}(?![\w.])")
    return [line for line in log.splitlines() if array in line and key_pattern.search(line)]


def oracle(store: Path, path: str) -> bytes:
    return np.ascontiguousarray(zarr.open_array(str(store / path), mode="r")[...]).tobytes()


# -- the damaged store ---------------------------------------------------------------------


def build_fault_store(root: Path, example: Path) -> dict[str, bytes]:
    """A copy of the example plus damaged arrays; returns reference bytes per array."""
    shutil.copytree(example, root)
    references = {
        "foo/bar": oracle(root, "foo/bar"),
        "weather/temperature": oracle(root, "weather/temperature"),
    }

    (root / "faulty").mkdir()
    (root / "faulty/.zgroup").write_text('{"zarr_format": 2}')
    values = np.arange(GRID_ROWS * GRID_COLS, dtype="<f8").reshape(GRID_ROWS, GRID_COLS) / 3
    grid = zarr.create_array(
        store=str(root / "faulty/grid"),
        shape=values.shape,
        chunks=(GRID_CHUNK_ROWS, GRID_COLS),
        dtype="<f8",
        zarr_format=2,
        compressors=Zlib(level=1),
        fill_value=0.0,
    )
    grid[...] = values
    references["faulty/grid"] = values.tobytes()
    (root / "faulty/grid" / f"{GARBAGE_CHUNK}.0").write_bytes(
        bytes(np.random.default_rng(1).integers(0, 256, 5000, dtype=np.uint8))
    )
    truncated = root / "faulty/grid" / f"{TRUNCATED_CHUNK}.0"
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    # A valid zlib stream that decodes to the wrong number of bytes.
    (root / "faulty/grid" / f"{WRONG_SIZE_CHUNK}.0").write_bytes(zlib.compress(b"\1" * 1000))

    ints = np.arange(64 * 1024, dtype="<i4").reshape(64, 1024)
    nocodec = zarr.create_array(
        store=str(root / "faulty/nocodec"),
        shape=ints.shape,
        chunks=(8, 1024),
        dtype="<i4",
        zarr_format=2,
        compressors=Zlib(level=1),
        fill_value=NOCODEC_FILL,
    )
    nocodec[:NOCODEC_STORED_ROWS] = ints[:NOCODEC_STORED_ROWS]
    zarray = json.loads((root / "faulty/nocodec/.zarray").read_text())
    zarray["compressor"] = {"id": "nosuchcodec"}
    (root / "faulty/nocodec/.zarray").write_text(json.dumps(zarray, indent=4))
    reference = ints.copy()
    reference[NOCODEC_STORED_ROWS:] = NOCODEC_FILL
    references["faulty/nocodec"] = reference.tobytes()

    broken = zarr.open_group(str(root / "broken"), mode="w", zarr_format=2)
    good = broken.create_array("good", shape=(10, 3), chunks=(4, 2), dtype=">i4", fill_value=-1)
    good[:5] = np.arange(15).reshape(5, 3)
    references["broken/good"] = np.asarray(good[...]).astype(">i4").tobytes()
    inner = broken.create_group("sub").create_array("inner", shape=(4,), chunks=(3,), dtype="u1")
    inner[...] = [1, 2, 3, 4]
    references["broken/sub/inner"] = bytes([1, 2, 3, 4])
    attrs_broken = broken.create_array("attrs_broken", shape=(3,), chunks=(2,), dtype="<i2")
    attrs_broken[...] = [5, 6, 7]
    (root / "broken/attrs_broken/.zattrs").write_text('{"units": ')
    references["broken/attrs_broken"] = np.array([5, 6, 7], "<i2").tobytes()
    for name in ("bad_json", "missing_key", "negative_shape"):
        broken.create_array(name, shape=(4, 4), chunks=(2, 2), dtype="<i4")[...] = 1
    (root / "broken/bad_json/.zarray").write_text('{"zarr_format": 2, "shape": [4, 4], "chunks": [')
    doc = json.loads((root / "broken/missing_key/.zarray").read_text())
    del doc["dtype"]
    (root / "broken/missing_key/.zarray").write_text(json.dumps(doc))
    doc = json.loads((root / "broken/negative_shape/.zarray").read_text())
    doc["shape"] = [-3, 4]
    (root / "broken/negative_shape/.zarray").write_text(json.dumps(doc))
    return references


HIDDEN = ("broken/bad_json", "broken/missing_key", "broken/negative_shape")


@pytest.fixture(scope="module")
def fault_store(
    tmp_path_factory: pytest.TempPathFactory, example_store: Path
) -> tuple[Path, dict[str, bytes]]:
    root = tmp_path_factory.mktemp("faults") / "store.zarr"
    return root, build_fault_store(root, example_store)


@pytest.fixture
def fault_mount(fault_store: tuple[Path, dict[str, bytes]], tmp_path: Path) -> Iterator[Mounted]:
    """A fresh mount per test, so each test sees only its own log lines."""
    with mounted(fault_store[0], log_dir=tmp_path) as m:
        yield m


def grid_range(chunk: int) -> tuple[int, int]:
    return chunk * CHUNK_BYTES, CHUNK_BYTES


# -- corrupt chunks ------------------------------------------------------------------------


def test_corrupt_chunks_are_eio_and_the_rest_still_reads(
    fault_store: tuple[Path, dict[str, bytes]], fault_mount: Mounted
) -> None:
    _, references = fault_store
    raw = fault_mount / "faulty/grid/array.raw"
    expected = references["faulty/grid"]
    assert os.stat(raw).st_size == len(expected)
    for chunk in CORRUPT_CHUNKS:
        start, length = grid_range(chunk)
        expect_eio(raw, start + 1001, 77)
        expect_eio(raw, start, length)
    with pytest.raises(OSError) as info:
        raw.read_bytes()
    assert info.value.errno == errno.EIO
    npy = fault_mount / "faulty/grid/array.npy"
    header = os.stat(npy).st_size - len(expected)
    expect_eio(npy, header + GARBAGE_CHUNK * CHUNK_BYTES + 8, 8)

    # after the failures: the other chunks of the same array, other arrays, same mount
    for chunk in GOOD_CHUNKS:
        start, length = grid_range(chunk)
        assert read_range(raw, start, length) == expected[start : start + length], chunk
        assert read_range(raw, start + 333, 4097) == expected[start + 333 : start + 4430], chunk
    assert read_range(npy, header, CHUNK_BYTES) == expected[:CHUNK_BYTES]
    for path in ("foo/bar", "weather/temperature"):
        assert (fault_mount / path / "array.raw").read_bytes() == references[path], path
    assert fault_mount.process.poll() is None, "the daemon keeps serving"


def test_corrupt_chunk_is_one_log_line(fault_mount: Mounted) -> None:
    """One log line per corrupt chunk naming array and key, however often it is read."""
    raw = fault_mount / "faulty/grid/array.raw"
    for _ in range(2):
        for chunk in CORRUPT_CHUNKS:
            start, _length = grid_range(chunk)
            expect_eio(raw, start + 4096 * 3 + 5, 100)
    for chunk in GOOD_CHUNKS:
        start, length = grid_range(chunk)
        read_range(raw, start, length)
    log = fault_mount.log()
    for chunk in CORRUPT_CHUNKS:
        lines = chunk_lines(log, "faulty/grid", f"{chunk}.0")
        assert len(lines) == 1, f"chunk {chunk}.0:\n" + "\n".join(lines)
    for chunk in GOOD_CHUNKS:
        assert chunk_lines(log, "faulty/grid", f"{chunk}.0") == [], chunk


# -- unknown codec -------------------------------------------------------------------------


def test_unknown_codec(fault_store: tuple[Path, dict[str, bytes]], fault_mount: Mounted) -> None:
    store, references = fault_store
    directory = fault_mount / "faulty/nocodec"
    assert os.listdir(directory) == [
        ".zarray",
        ".zattrs",
        "array.hdr",
        "array.nhdr",
        "array.npy",
        "array.raw",
        "array.tif",
        "info",
    ]
    assert (directory / ".zarray").read_bytes() == (store / "faulty/nocodec/.zarray").read_bytes()
    raw = directory / "array.raw"
    expected = references["faulty/nocodec"]
    assert os.stat(raw).st_size == len(expected)
    row = 1024 * 4
    missing_start = NOCODEC_STORED_ROWS * row
    assert read_range(raw, missing_start, len(expected)) == expected[missing_start:]
    assert (
        read_range(raw, missing_start + 8 * row + 3, 1001)
        == expected[missing_start + 8 * row + 3 : missing_start + 8 * row + 1004]
    )
    expect_eio(raw, 0, 100)
    expect_eio(raw, 9 * row + 5, 10)
    assert "nosuchcodec" in fault_mount.log()
    expect_eio(raw, 0, 100)  # still an error, not a crash
    assert fault_mount.process.poll() is None


# -- broken metadata -----------------------------------------------------------------------


def test_broken_array_metadata_hides_only_that_array(
    fault_store: tuple[Path, dict[str, bytes]], fault_mount: Mounted
) -> None:
    store, references = fault_store
    names = os.listdir(fault_mount / "broken")
    assert names == [".zattrs", ".zgroup", "attrs_broken", "good", "group.nc", "sub"]
    for path in HIDDEN:
        with pytest.raises(FileNotFoundError):
            os.stat(fault_mount / path)
        with pytest.raises(FileNotFoundError):
            os.stat(fault_mount / path / "array.raw")
    for path in ("broken/good", "broken/sub/inner", "broken/attrs_broken"):
        assert (fault_mount / path / "array.raw").read_bytes() == references[path], path
    # a broken .zattrs is only informational: still shown as stored
    shown = (fault_mount / "broken/attrs_broken/.zattrs").read_bytes()
    assert shown == (store / "broken/attrs_broken/.zattrs").read_bytes()
    log = fault_mount.log()
    for path in HIDDEN:
        lines = [line for line in log.splitlines() if path in line]
        assert len(lines) == 1, f"{path}:\n{log}"
    assert fault_mount.process.poll() is None


@pytest.mark.parametrize("foreground", [False, True], ids=["detached", "foreground"])
@pytest.mark.parametrize(
    "zgroup",
    [b'{"zarr_format": 2', b'["zarr_format", 2]', b'{"zarr_format": 7}'],
    ids=["bad-json", "not-an-object", "bad-version"],
)
def test_broken_root_zgroup_fails_the_mount(
    tmp_path: Path, example_store: Path, zgroup: bytes, foreground: bool
) -> None:
    store = tmp_path / "store.zarr"
    shutil.copytree(example_store, store)
    (store / ".zgroup").write_bytes(zgroup)
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    command = zarrfs_command("mount", *(["-f"] if foreground else []), str(store), str(mountpoint))
    try:
        result = subprocess.run(
            command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30
        )
        assert result.returncode != 0
        assert "Traceback" not in result.stderr + result.stdout
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("zarrfs: error:"), result.stderr
        assert ".zgroup" in lines[0]
        assert not os.path.ismount(mountpoint)
    finally:
        unmount(mountpoint)


# -- a large hierarchy is listed without reading chunks ------------------------------------

N_GROUPS, N_ARRAYS_PER_GROUP = 100, 100


def write_new(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def build_large_store(root: Path) -> None:
    """10 000 arrays in 100 groups, each with one garbage chunk that fails to decode.

    Plain os calls: pathlib's per-file overhead would triple the build time.
    """
    zarray = json.dumps(
        {
            "zarr_format": 2,
            "shape": [4],
            "chunks": [4],
            "dtype": "<i4",
            "compressor": {"id": "zlib", "level": 1},
            "fill_value": 0,
            "order": "C",
            "filters": None,
            "dimension_separator": ".",
        }
    ).encode()
    zgroup = b'{"zarr_format": 2}'
    os.mkdir(root)
    write_new(f"{root}/.zgroup", zgroup)
    for g in range(N_GROUPS):
        group = f"{root}/g{g:03d}"
        os.mkdir(group)
        write_new(f"{group}/.zgroup", zgroup)
        for a in range(N_ARRAYS_PER_GROUP):
            array = f"{group}/a{a:03d}"
            os.mkdir(array)
            write_new(f"{array}/.zarray", zarray)
            write_new(f"{array}/0", b"garbage, not a zlib stream")


def test_walking_10000_arrays_reads_no_chunk(tmp_path: Path) -> None:
    store = tmp_path / "large.zarr"
    build_large_store(store)
    with mounted(store, log_dir=tmp_path) as m:
        arrays = 0
        files = 0
        for dirpath, dirnames, filenames in os.walk(m.path):
            assert dirnames == sorted(dirnames)
            for name in filenames:
                st = os.stat(os.path.join(dirpath, name))
                files += 1
                if name == "array.raw":
                    arrays += 1
                    assert st.st_size == 16
            for name in dirnames:
                os.stat(os.path.join(dirpath, name))
        assert arrays == N_GROUPS * N_ARRAYS_PER_GROUP
        # .zgroup files, each group's group.nc, .zarrfs/stats, flush and refresh; per
        # array .zarray, raw, npy, info and the sidecar headers hdr and nhdr (stat
        # makes them without a chunk)
        assert files == 1 + 2 * N_GROUPS + 3 + 6 * N_GROUPS * N_ARRAYS_PER_GROUP
        log = m.log()
        assert [line for line in log.splitlines() if "chunk" in line] == [], log[-2000:]
        # control: reading one array does decode its garbage chunk, and that is logged
        expect_eio(m / "g042/a017/array.raw", 0, 16)
        assert chunk_lines(m.log(), "g042/a017", "g042/a017/0") != []
        assert m.process.poll() is None
