"""Hostile metadata costs one log line, never the mount.

Each case failed before its fix: deep JSON escaped as RecursionError (EIO for the
whole parent directory, a 49-line traceback from ``zarrfs mount``), a subarray
dtype made ``ls`` of its array EIO, and a ``|V300000000`` dtype made ``ls -l``
take a minute and 3.5 GB building the fill value's repr.
"""

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
from zarrfs.errors import MetadataError
from zarrfs.formats.limits import MAX_JSON_DEPTH, check_depth, clip
from zarrfs.formats.metadata.consolidated import parse_consolidated
from zarrfs.formats.metadata.v2 import load_json, parse_array
from zarrfs.views.info import info_text
from zarrfs.views.xattrs import array_xattrs, fill_text

DEEP = b"[" * 2000 + b"]" * 2000


def nested(depth: int) -> object:
    """``depth`` lists, one inside the other."""
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "text",
    [DEEP, b'{"a": ' * 2000 + b"1" + b"}" * 2000, json.dumps(nested(MAX_JSON_DEPTH + 1)).encode()],
    ids=["lists", "objects", "just-too-deep"],
)
def test_deep_json_is_a_metadata_error(text: bytes) -> None:
    with pytest.raises(MetadataError, match="deeper"):
        load_json(text, "doc")


def test_json_at_the_depth_limit_is_read() -> None:
    value = nested(MAX_JSON_DEPTH)
    assert load_json(json.dumps(value).encode(), "doc") == value
    check_depth({"a": [{"b": nested(MAX_JSON_DEPTH - 3)}]}, "doc")


def test_deep_zarray_and_zmetadata_are_metadata_errors() -> None:
    with pytest.raises(MetadataError):
        parse_array("a", DEEP, None)
    zarray = json.dumps(v2_zarray([4], [2])).encode()
    with pytest.raises(MetadataError):
        parse_array("a", zarray.replace(b'"filters": null', b'"filters": ' + DEEP), None)
    with pytest.raises(MetadataError):
        parse_consolidated(b'{"zarr_consolidated_format": 1, "metadata": ' + DEEP + b"}")


def test_deep_zattrs_read_as_empty_attributes() -> None:
    meta = parse_array("a", json.dumps(v2_zarray([4], [2])).encode(), DEEP)
    assert meta.attrs == {} and meta.unsupported is None


@pytest.mark.parametrize(
    ("dtype", "shape", "chunks", "why"),
    [
        ("(2,)<i4", [4], [2], "subarray"),
        ("|V300000000", [4], [1], "larger than"),
        ("|u1", [(1 << 31) + 1], [(1 << 31) + 1], "more than"),
        ("<i4", [1] * 40, [1] * 40, "dimensions"),
    ],
)
def test_arrays_zarrfs_cannot_flatten_show_metadata_only(
    dtype: str, shape: list[int], chunks: list[int], why: str
) -> None:
    started = time.monotonic()
    meta = parse_array("a", json.dumps(v2_zarray(shape, chunks, dtype)).encode(), None)
    assert meta.unsupported is not None and why in meta.unsupported
    assert meta.fill_value is None  # never built for these
    info_text(meta, None, 0)
    array_xattrs(meta)
    assert time.monotonic() - started < 1.0


def test_fill_text_is_bounded_for_long_elements() -> None:
    long_bytes = parse_array("a", json.dumps(v2_zarray([2], [1], "|S100000")).encode(), None)
    text = fill_text(long_bytes)
    assert len(text) < 400, len(text)
    void = parse_array("a", json.dumps(v2_zarray([2], [1], "|V5000000")).encode(), None)
    started = time.monotonic()
    assert fill_text(void).endswith("(5000000 bytes)")
    assert len(info_text(void, None, 0)) < 4096
    assert time.monotonic() - started < 0.5
    small = parse_array(
        "a", json.dumps(v2_zarray([2], [1], "<f8", fill_value="NaN")).encode(), None
    )
    assert fill_text(small) == "nan"


def test_clip_says_how_long_the_text_was() -> None:
    assert clip("abc", 5) == "abc"
    assert clip("a" * 10, 4) == "aaaa... (10 characters)"


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
    assert "Traceback" not in log, log
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
