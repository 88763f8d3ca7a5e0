"""fuse/directio.py: the probe starts no process while it holds its fd of the mount."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from zarrfs.fuse import directio


def test_the_probe_starts_no_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A child would inherit the probe's fd of the mount and, closing it, wait for the
    daemon to answer its FLUSH (ctypes.util.find_library runs ldconfig: a daemon
    stopped by a tracer such as py-spy meanwhile never answered)."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the probe started a process")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    monkeypatch.setattr(os, "fork", refuse)
    monkeypatch.setattr(os, "posix_spawn", refuse)
    path = tmp_path / "f"
    path.write_bytes(b"x")
    assert directio.shared_mmap_allowed(str(path)) is True
