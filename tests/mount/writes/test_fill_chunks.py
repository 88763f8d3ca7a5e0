"""Chunks bit for bit equal to the fill value are deleted from the store when stored
(also a chunk written back to fill), never for a null fill value."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.mounting import mounted
from tests.support.writes import (
    FILL_SPECS,
    NAN,
    NO_FLUSH,
    SPECS,
    Template,
    assert_mount_shows,
    assert_store_holds,
    assert_zarray_kept,
    chunk_files,
    element,
    model_of,
    opened,
)

# -- fill-value chunks ---------------------------------------------------------------------


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
