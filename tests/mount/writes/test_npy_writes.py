"""Writes to ``array.npy``: its header bytes are fixed (EPERM), appends to its data extend
the first axis, ``np.save`` onto it works for the same dtype and trailing shape, and
anything else is EINVAL."""

from __future__ import annotations

import errno
import io
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.support.model import ArrayModel
from tests.support.mounting import mounted
from tests.support.writes import (
    NO_FLUSH,
    ROWS_C,
    ROWS_F,
    Spec,
    Template,
    assert_mount_shows,
    assert_store_holds,
    assert_zarray_kept,
    errnos,
    expect_errno,
    model_of,
    npy_header_length,
    opened,
    random_values,
    run,
    same_bytes,
    zarray,
)

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
        model = ArrayModel(new, spec.fill_bytes)
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
        assert_mount_shows(m, name, ArrayModel(good, spec.fill_bytes))
    assert_zarray_kept(store / name, template.zarrays[name], good.shape)
    assert_store_holds(store / name, good, "after unmount")
