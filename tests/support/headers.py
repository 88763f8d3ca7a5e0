"""Reading the sidecar headers of a mount as legacy tools do: their fields, their
exact size, and Debian's GDAL (gdal-bin) on ``array.raw``.

A missing program fails the test that needs it (scripts/install.sh installs them).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np


def require(*programs: str) -> None:
    missing = [p for p in programs if shutil.which(p) is None]
    assert not missing, f"{missing} not on PATH: scripts/install.sh installs them"


def array_name(dtype: str, ndim: int) -> str:
    """A test array's name: its dtype, byte order and number of dimensions."""
    order = {"<": "le", ">": "be", "|": ""}[dtype[0]]
    return f"{dtype[1:]}{order}_{ndim}d"


def random_values(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """Values over the dtype's whole range (integers) or spread widely (floats)."""
    native = dtype.newbyteorder("=")
    if dtype.kind in "iu":
        info = np.iinfo(native)
        return rng.integers(info.min, info.max, size=shape, dtype=native, endpoint=True)
    if dtype.kind == "f":
        return (rng.standard_normal(shape) * 1000).astype(native)
    real = rng.standard_normal(shape) * 1000
    return (real + 1j * rng.standard_normal(shape)).astype(native)


def read_exact(path: Path) -> bytes:
    """The file's bytes, checking that stat's size is theirs."""
    data = path.read_bytes()
    assert os.stat(path).st_size == len(data), path
    return data


def header_fields(data: bytes, separator: str) -> dict[str, str]:
    """``key <separator> value`` lines of a header (comments skipped), as a dict."""
    out = {}
    for line in data.decode("ascii").splitlines()[1:]:
        name, sep, value = line.partition(separator)
        if sep and not line.startswith(("#", ";")):
            out[name.strip()] = value.strip()
    return out


def gdalinfo(raw: Path, *options: str) -> dict:
    """``gdalinfo -json`` of ``raw`` (with ``options``, e.g. ``-stats``)."""
    result = subprocess.run(
        ["gdalinfo", "-json", *options, str(raw)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)
