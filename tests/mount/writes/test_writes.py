"""Writes through a read-write mount (docs/semantics.md, "Writing"), checked against a
byte-level model and zarr-python:

- a mount is read-write unless ``--read-only`` (then EROFS);
- ``pwrite`` of any length at any offset of ``array.raw`` / the data part of
  ``array.npy`` changes exactly those bytes, and every read through the mount (the
  other file, an ``np.load(mmap_mode="r")`` map opened before the write) sees them;
- metadata documents stay read-only (EACCES or EPERM).

The other promises of writing each have their file here: when chunks are stored
(test_flush_points.py), chunks equal to the fill value (test_fill_chunks.py),
``array.raw`` as a file of whole rows (test_whole_rows.py), ``array.npy``
(test_npy_writes.py), concurrent writers (test_concurrent_writes.py). Every store is
a copy of a template (tests/support/writes.py) under tmp_path.
"""

from __future__ import annotations

import errno
import gc
import os
import zlib
from pathlib import Path

import numpy as np
import pytest

from tests.support.mounting import mounted
from tests.support.writes import (
    NO_FLUSH,
    PWRITE_SPECS,
    ROWS_C,
    WRITE_FLAGS,
    Spec,
    Template,
    assert_mount_shows,
    assert_store_holds,
    assert_zarray_kept,
    expect_errno,
    model_of,
    npy_header_length,
    opened,
    same_bytes,
)

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
