"""Hostile metadata costs one log line, never the mount (parsing and rendering here;
tests/mount/faults/test_hostile_metadata_mount.py mounts it).

The cases: deep JSON must not escape as RecursionError (EIO for the whole parent
directory, a 49-line traceback from ``zarrfs mount``), a subarray dtype must not make
``ls`` of its array EIO, and a ``|V300000000`` dtype must not make ``ls -l`` take a
minute and 3.5 GB building the fill value's repr.
"""

from __future__ import annotations

import json
import time

import pytest

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
