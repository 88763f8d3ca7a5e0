"""The STORE argument: which store each form names, and the one-line refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from zarrfs.stores.directory import DirectoryStore
from zarrfs.stores.location import StoreOpenError, is_remote, kind, open_store


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        ("/data/x.zarr", "directory"),
        ("relative/x", "directory"),
        ("/data/x.zip", "zip"),
        ("/data/X.ZIP", "zip"),
        ("s3://bucket", "s3"),
        ("s3://bucket/a/b.zarr", "s3"),
        ("S3://bucket/p", "s3"),
        ("http://127.0.0.1:8000/x.zarr", "http"),
        ("https://example.invalid/x.zarr", "http"),
    ],
)
def test_kind(location: str, expected: str) -> None:
    assert kind(location) == expected
    assert is_remote(location) == (expected in ("s3", "http"))


def test_a_directory_named_like_a_zip_is_a_directory(tmp_path: Path) -> None:
    odd = tmp_path / "x.zip"
    odd.mkdir()
    assert kind(str(odd)) == "directory"
    assert isinstance(open_store(str(odd)), DirectoryStore)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "missing", "does not exist"),
        (lambda p: p / "missing.zip", "does not exist"),
        (lambda p: (p / "file").write_bytes(b"x") and p / "file", "is not a directory"),
    ],
)
def test_bad_locations_are_one_line(tmp_path: Path, make, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(StoreOpenError) as info:
        open_store(str(make(tmp_path)))
    assert message in str(info.value) and "\n" not in str(info.value)
