"""Detached NRRD headers (``array.nhdr``, ``volumes/*.nhdr``) for ITK, SimpleITK,
3D Slicer, teem and pynrrd (pure: no I/O).

Where the array is a level of an OME-Zarr image (formats/conventions/ome.py), the
header says where its samples lie, per axis, fastest first: ``spacings`` (the
level's scale), ``axis mins`` (its translation: the position of the first
sample), ``centers: node`` (a sample's position is its centre, as OME-Zarr and
ITK take it), ``units``, ``labels`` and ``kinds`` (``space``, ``time``, ``list``
for the first channel axis, ``domain`` otherwise). Spacings rather than ``space
directions``: ITK refuses space directions unless every domain axis (time
included) is a space axis, while it reads spacings and axis mins of any domain
axis; pynrrd reads both. ITK reads the ``list`` axis as the components of a
vector pixel (``GetArrayFromImage`` puts it last).

An image whose leading axes are time, channel or other non-space axes, followed by
one to three space axes, also has one 3-D header per index of those leading axes
(``volumes/t0001_c02.nhdr``): the space axes of ``../array.raw`` from ``byte
skip`` on. pynrrd reads the raw data to the end of its file, so of these it reads
only the last volume; ITK, SimpleITK and teem read each one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from zarrfs.formats.conventions.facts import Axis
from zarrfs.formats.sidecars import _clean, is_big_endian, nrrd_type

# More volumes than this get no volumes/ directory (a listing, and an inode, each).
MAX_VOLUMES = 4096
VOLUMES_DIR = "volumes"
# Index widths of volume names, so that ls sorts them: at least these.
_WIDTHS = {"time": 4, "channel": 2}
_PREFIXES = {"time": "t", "channel": "c"}


def _labels(names: Sequence[str | None] | None) -> str | None:
    """NRRD's ``labels`` (fastest axis first), where every axis has a plain name."""
    if not names or not all(d and _clean(d) == d for d in names):
        return None
    return " ".join(f'"{d}"' for d in reversed(names))


def _number(value: float) -> str:
    return repr(float(value))


def _unit(unit: str | None) -> str:
    # NRRD is ASCII: the micro sign, which OME writers use, as "u".
    return _clean((unit or "").replace("\u00b5", "u").replace("\u03bc", "u"))


def axis_fields(axes: Sequence[Axis]) -> list[str]:
    """The per-axis lines that place the samples of ``axes`` (C order)."""
    kinds, spacings, mins, centers = [], [], [], []
    # ITK takes one range axis: the first channel axis
    listed = next((i for i, a in enumerate(axes) if a.type == "channel"), None)
    for position in reversed(range(len(axes))):  # NRRD: fastest first
        axis = axes[position]
        if position == listed:
            kinds.append("list")
            spacings.append("nan")
            mins.append("nan")
            centers.append("???")
            continue
        kinds.append(axis.type if axis.type in ("space", "time") else "domain")
        spacings.append(_number(axis.scale))
        mins.append(_number(axis.translation))
        centers.append("node")
    rows = [
        "kinds: " + " ".join(kinds),
        "centers: " + " ".join(centers),
        "spacings: " + " ".join(spacings),
        "axis mins: " + " ".join(mins),
    ]
    if any(axis.unit for axis in axes):
        rows.append("units: " + " ".join(f'"{_unit(a.unit)}"' for a in reversed(axes)))
    return rows


def nrrd_header(
    dtype: np.dtype,
    shape: Sequence[int],
    *,
    path: str,
    dimensions: Sequence[str | None] | None,
    data_file: str,
    axes: Sequence[Axis] | None = None,
    byte_skip: int = 0,
    content: str = "",
) -> bytes:
    """A detached NRRD header for ``data_file``: sizes fastest axis first (the C-order
    shape reversed); a 0-d array is one element of one axis. ``axes`` (one per
    dimension) place the samples and name the axes (else ``dimensions`` do);
    ``content`` follows the array's path.

    ValueError if NRRD has no type for ``dtype``.
    """
    name = nrrd_type(dtype)
    if name is None:
        raise ValueError(f"NRRD has no type for {dtype.str}")
    sizes = list(reversed(shape)) or [1]
    rows = [
        "NRRD0004",
        "# Complete NRRD file format specification at:",
        "# http://teem.sourceforge.net/nrrd/format.html",
        f"content: Zarr array /{_clean(path)}{_clean(content)}",
        f"type: {name}",
        f"dimension: {len(sizes)}",
        "sizes: " + " ".join(str(s) for s in sizes),
    ]
    placed = axes is not None and len(axes) == len(shape) > 0
    if placed:
        assert axes is not None
        rows += axis_fields(axes)
        dimensions = [a.name for a in axes]
    labels = _labels(dimensions) if len(shape) == len(sizes) else None
    if labels is not None:
        rows.append(f"labels: {labels}")
    if dtype.itemsize > 1:
        rows.append(f"endian: {'big' if is_big_endian(dtype) else 'little'}")
    rows.append("encoding: raw")
    if byte_skip:
        rows.append(f"byte skip: {byte_skip}")
    rows.append(f"data file: {data_file}")
    return ("\n".join(rows) + "\n").encode("ascii")


# -- one 3-D volume per index of the leading axes ---------------------------------------


@dataclass(frozen=True)
class Volume:
    """One volume: its file name, its index along the leading axes."""

    name: str
    index: tuple[int, ...]


def volume_axes(axes: Sequence[Axis] | None) -> int | None:
    """How many leading axes the volumes are taken along: the non-space axes before
    one to three trailing space axes; None where the image has no such layout."""
    if not axes:
        return None
    outer = 0
    while outer < len(axes) and axes[outer].type != "space":
        outer += 1
    inner = len(axes) - outer
    if outer == 0 or not 1 <= inner <= 3:
        return None
    if any(a.type != "space" for a in axes[outer:]):
        return None
    return outer


def why_no_volumes(axes: Sequence[Axis] | None, shape: Sequence[int]) -> str | None:
    """Why an image with leading non-space axes has no volumes (too many); None when
    it has them, or has no such axes."""
    outer = volume_axes(axes)
    if outer is None or len(shape) != len(axes or ()):
        return None
    count = math.prod(shape[:outer])
    if count > MAX_VOLUMES:
        return f"{count} volumes, more than {MAX_VOLUMES}"
    return None


def volumes_text(axes: Sequence[Axis] | None, shape: Sequence[int]) -> str | None:
    """What ``info`` says of the image's volumes; None where it has no leading
    non-space axes."""
    outer = volume_axes(axes)
    if outer is None or axes is None or len(shape) != len(axes):
        return None
    reason = why_no_volumes(axes, shape)
    if reason is not None:
        return f"none: {reason}"
    names = ", ".join(a.name for a in axes[:outer])
    return f"{math.prod(shape[:outer])} in {VOLUMES_DIR}/, one per ({names})"


def volumes_of(axes: Sequence[Axis] | None, shape: Sequence[int]) -> list[Volume] | None:
    """The volumes of an image of ``shape``, in C order of their index (names sort
    alike); None where it has none (no leading non-space axes, or too many)."""
    outer = volume_axes(axes)
    if outer is None or axes is None or len(shape) != len(axes):
        return None
    if why_no_volumes(axes, shape) is not None:
        return None
    parts = []
    for position, (axis, size) in enumerate(zip(axes[:outer], shape[:outer])):
        prefix = _PREFIXES.get(axis.type or "", f"i{position}-")
        width = max(_WIDTHS.get(axis.type or "", 2), len(str(max(size - 1, 0))))
        parts.append([f"{prefix}{i:0{width}d}" for i in range(size)])
    volumes = []
    for index in np.ndindex(*shape[:outer]):
        name = "_".join(part[i] for part, i in zip(parts, index)) + ".nhdr"
        volumes.append(Volume(name, tuple(int(i) for i in index)))
    return volumes


def volume_header(
    dtype: np.dtype,
    shape: Sequence[int],
    axes: Sequence[Axis],
    index: Sequence[int],
    *,
    path: str,
    data_file: str,
) -> bytes:
    """The header of the volume at ``index`` (of the leading axes) of an array of
    ``shape``: its space axes, from the byte where that volume starts."""
    outer = len(index)
    inner = shape[outer:]
    flat = 0
    for i, size in zip(index, shape[:outer]):
        flat = flat * size + i
    where = ", ".join(f"{a.name}={i}" for a, i in zip(axes[:outer], index))
    return nrrd_header(
        dtype,
        inner,
        path=path,
        dimensions=None,
        data_file=data_file,
        axes=axes[outer:],
        byte_skip=flat * math.prod(inner) * dtype.itemsize,
        content=f" at {where}",
    )
