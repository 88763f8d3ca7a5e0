"""The benchmark's FUSE ceilings (bench/ceilings.py): bench/memfs.py mounted and read
in each access mode zarrfs's figures are compared in. Nothing is timed here: each
mode must serve the file (direct I/O, the page cache, a shared map) and report a
rate and the CPU it took; a mode that fails to mount or read fails loudly."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench import ceilings
from bench.mounting import memfs_mounted

SIZE = 8 * 2**20


@pytest.mark.parametrize("mode", ceilings.MODES)
def test_each_access_mode_is_read_and_measured(
    tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ceilings, "ROUNDS", 1)  # a mount each: nothing is timed here
    size = SIZE + 4096 * ceilings.MODES.index(mode)  # each its own, never one shared
    ceiling = ceilings.read_ceiling(tmp_path, size, mode)
    assert ceiling.mode == mode and ceiling.rate > 0 and ceiling.busy_per_mib >= 0
    assert mode in ceiling.text() and "CPU s" in ceiling.cpu
    # Measured once per run and size: the sections share it.
    assert ceilings.read_ceiling(tmp_path, size, mode) is ceiling


def test_direct_io_is_how_memfs_opens_when_asked(tmp_path: Path) -> None:
    # A direct_io file's reads bypass the page cache: every read reaches the daemon,
    # so reading the file twice serves twice the requests.
    with memfs_mounted(SIZE, tmp_path, direct_io=True) as (path, log):
        for _ in range(2):
            with open(path, "rb", buffering=0) as f:
                while f.read(2**20):
                    pass
    with memfs_mounted(SIZE, tmp_path) as (cached, cached_log):
        for _ in range(2):
            with open(cached, "rb", buffering=0) as f:
                while f.read(2**20):
                    pass
    direct_reads = int(log.read_text().split("served ")[1].split()[0])
    cached_reads = int(cached_log.read_text().split("served ")[1].split()[0])
    assert direct_reads >= 2 * (SIZE // 2**20)
    assert cached_reads < direct_reads


def test_an_unknown_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        ceilings.read_ceiling(tmp_path, SIZE, "O_DIRECT")
    assert not os.listdir(tmp_path)
