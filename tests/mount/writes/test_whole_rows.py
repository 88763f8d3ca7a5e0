"""``array.raw`` is a regular file of whole rows: truncate, O_TRUNC and writes past the end
set the first axis of the shape; a trailing partial row fails fsync and close with
EINVAL (unless a later handle completes it); a 0-d array keeps its size; and everyday
tools that rewrite a whole file (cp, dd, shell redirections, appends) work."""

from __future__ import annotations

import errno
import os
import subprocess
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.support.mounting import mounted
from tests.support.writes import (
    NO_FLUSH,
    ROW_SPECS,
    ROWS_C,
    ROWS_F,
    Spec,
    Template,
    assert_mount_shows,
    assert_store_holds,
    assert_zarray_kept,
    chunk_files,
    close_error,
    element,
    errnos,
    expect_errno,
    model_of,
    opened,
    run,
    same_bytes,
)

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
        model.resize((n - 1) * row)
        assert_mount_shows(m, name, model)
        for bad in ((n - 1) * row + 1, (n - 2) * row - 1, 1, row // 2, (n + 3) * row + 2):
            expect_errno(lambda b=bad: os.truncate(raw, b), (errno.EINVAL,), f"truncate {bad}")
            assert os.stat(raw).st_size == (n - 1) * row
        with opened(raw) as fd:
            os.ftruncate(fd, 1 * row)  # inside chunk row 0: every later chunk goes
            model.resize(1 * row)
            expect_errno(lambda: os.ftruncate(fd, row + 2), (errno.EINVAL,), "ftruncate")
            assert os.fstat(fd).st_size == row
            os.fsync(fd)
            assert_store_holds(store / name, model.array(), "after ftruncate + fsync")
            assert {k.split(".")[0] for k in chunk_files(store / name)} == {"0"}
            # growing again: the new rows are fill, the old bytes of row 1.. do not come back
            os.ftruncate(fd, (chunk_rows + 2) * row)
            model.resize((chunk_rows + 2) * row)
            assert os.fstat(fd).st_size == (chunk_rows + 2) * row
            same_bytes(os.pread(fd, len(model) + 1, 0), model.bytes(), "after growing")
        assert_mount_shows(m, name, model)
        assert_store_holds(store / name, model.array(), "after close")
        subprocess.run(["truncate", "-s", str(2 * row), str(raw)], check=True, timeout=30)
        model.resize(2 * row)
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
        model.resize(0)
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
        model.resize(0)
        model.write(0, expected)
        assert_mount_shows(m, name, model)
        assert_store_holds(store / name, model.array(), "after the tool closed the file")
    assert_zarray_kept(store / name, template.zarrays[name], model.array().shape)
    assert_store_holds(store / name, model.array(), "after unmount")
