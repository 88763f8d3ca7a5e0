"""fuse/directio.py: the probe of shared mappings of direct_io files, without a mount
(the mount's answer is tested in tests/mount/reads/test_direct_reads.py)."""

from __future__ import annotations

import ctypes
import errno
from pathlib import Path
from typing import Any

import pytest

from zarrfs.fuse import directio


def test_a_file_that_maps_says_yes(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x")
    assert directio.shared_mmap_allowed(str(path)) is True


def test_a_file_that_cannot_be_opened_says_no(tmp_path: Path) -> None:
    assert directio.shared_mmap_allowed(str(tmp_path / "missing")) is False


class _RefusingLibc:
    """mmap fails as the kernel fails it for a direct_io file it may not map."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.unmapped = False

    def mmap(self, *args: Any) -> int:
        ctypes.set_errno(self.code)
        return directio._MAP_FAILED  # type: ignore[no-any-return]

    def munmap(self, *args: Any) -> int:
        self.unmapped = True
        return 0


@pytest.mark.parametrize("code", [errno.ENODEV, errno.EACCES])
def test_a_refused_mapping_says_no(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x")
    libc = _RefusingLibc(code)
    monkeypatch.setattr(directio, "_libc", lambda: libc)
    assert directio.shared_mmap_allowed(str(path)) is False
    assert not libc.unmapped
