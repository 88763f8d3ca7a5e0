"""Hostile metadata through a real mount and ``zarrfs mount``: one log line, never the
mount (deep JSON, a subarray dtype, a ``|V300000000`` dtype), in bounded time and memory."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from tests.support.mounting import mounted, peak_rss, zarrfs_command
from tests.support.stores import v2_zarray

DEEP = b"[" * 2000 + b"]" * 2000  # JSON nested deeper than any limit


def write_array(root: Path, name: str, zarray: dict | bytes, zattrs: bytes | None = None) -> None:
    (root / name).mkdir(parents=True)
    data = zarray if isinstance(zarray, bytes) else json.dumps(zarray).encode()
    (root / name / ".zarray").write_bytes(data)
    if zattrs is not None:
        (root / name / ".zattrs").write_bytes(zattrs)


@pytest.fixture
def hostile_store(tmp_path: Path) -> Path:
    root = tmp_path / "s.zarr"
    root.mkdir()
    (root / ".zgroup").write_text('{"zarr_format": 2}')
    (root / ".zmetadata").write_bytes(b'{"zarr_consolidated_format": 1, "metadata": ' + DEEP + b"}")
    good = v2_zarray([4], [2], "<i4")
    write_array(root, "good", good)
    np.arange(2, dtype="<i4").tofile(root / "good" / "0")
    write_array(root, "deep_zarray", DEEP)
    write_array(root, "deep_zattrs", good, DEEP)
    write_array(root, "subarray", v2_zarray([4], [2], "(2,)<i4"))
    write_array(root, "huge_void", v2_zarray([4], [1], "|V300000000"))
    return root


def test_a_mount_of_hostile_metadata_keeps_serving(hostile_store: Path) -> None:
    with mounted(hostile_store, "--read-only", memory_limit=2 << 30) as m:
        started = time.monotonic()
        listing = subprocess.run(
            ["ls", "-l", str(m.path), *(str(m / n) for n in ("subarray", "huge_void"))],
            capture_output=True,
            text=True,
            timeout=60,
        )
        elapsed = time.monotonic() - started
        assert listing.returncode == 0, listing.stderr
        assert elapsed < 5, f"ls -l took {elapsed:.1f}s"
        names = sorted(os.listdir(m.path))
        assert names == [
            ".zarrfs",
            ".zgroup",
            ".zmetadata",
            "deep_zattrs",
            "good",
            "group.nc",
            "huge_void",
            "subarray",
        ]
        assert sorted(os.listdir(m / "subarray")) == [".zarray", "info"]
        assert sorted(os.listdir(m / "huge_void")) == [".zarray", "info"]
        assert (m / "good" / "array.raw").read_bytes()[:8] == np.arange(2, dtype="<i4").tobytes()
        assert (m / "deep_zattrs" / ".zattrs").read_bytes() == DEEP
        info = (m / "huge_void" / "info").read_text()
        assert "|V300000000" in info
        assert len(os.getxattr(m / "huge_void", "user.zarr.fill_value")) < 64
        assert peak_rss(m.process) < 400 << 20
        log = m.log()
    assert "RecursionError" not in log, log
    assert sum(".zmetadata" in line for line in log.splitlines()) == 1, log
    assert sum("deep_zarray" in line for line in log.splitlines()) == 1, log


def test_zarrfs_mount_of_a_deep_root_document_fails_with_one_line(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    root.mkdir()
    (root / ".zgroup").write_bytes(DEEP)
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    result = subprocess.run(
        zarrfs_command("mount", "-f", str(root), str(mountpoint)),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode != 0
    assert not os.path.ismount(mountpoint)
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and "deeper" in errors[0], result.stderr
    assert "Traceback" not in result.stderr
