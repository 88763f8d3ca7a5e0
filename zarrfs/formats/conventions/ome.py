"""OME-Zarr ``multiscales``: 0.4 (Zarr v2, the group's ``multiscales``), 0.5 (Zarr
v3, the group's ``ome.multiscales``), and 0.1 to 0.3 (axes as plain names, or
none: then ``tczyx``) (pure).

An array is a level of its group's image when a dataset's ``path`` is its name in
the group. Its axes get the names, types and units the multiscale gives, and the
scale and translation of the dataset's transforms followed by the multiscale's
own (a point at index i lies at ``ms_scale * (scale * i + translation) +
ms_translation``). Attributes are hostile: lists are read up to a bound, texts
are cut short with their control characters, quotes and braces replaced, a
transform that is not a list of finite numbers, one per axis (scales above 0), is
left out; axes that do not match the array's dimensions give nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from zarrfs.formats.conventions.facts import Axis, Surroundings
from zarrfs.formats.limits import MAX_DIMENSIONS
from zarrfs.formats.model import ArrayMeta

# Multiscales and datasets looked at, at most (an image has a few of each).
MAX_MULTISCALES = 16
MAX_DATASETS = 64
MAX_TRANSFORMS = 16
# Axis names, types and units are cut to this many characters.
MAX_AXIS_TEXT = 64
# What versions before 0.4 had without an ``axes`` list: five dimensions.
LEGACY_AXES = "tczyx"
_TYPE_BY_NAME = {"x": "space", "y": "space", "z": "space", "t": "time", "c": "channel"}

_UNSAFE = re.compile(r'[\x00-\x1f\x7f-\x9f{}"\\]')
_VERSION = re.compile(r"[0-9A-Za-z.\-]{1,16}")

NOTHING: tuple[tuple[Axis, ...] | None, str] = (None, "")


def clean_text(value: object, limit: int = MAX_AXIS_TEXT) -> str | None:
    """``value`` as a one-line text safe in any header (no control characters,
    quotes, backslashes or braces; at most ``limit`` characters); None unless a
    string."""
    if not isinstance(value, str):
        return None
    out = _UNSAFE.sub("?", value[:limit])
    return out if len(value) <= limit else out + "..."


def _multiscales(attrs: Mapping[str, Any]) -> tuple[list[Any], object] | None:
    """The multiscales list and the version the ``ome`` object gives (0.5)."""
    ome = attrs.get("ome")
    if isinstance(ome, Mapping) and "multiscales" in ome:
        found, version = ome.get("multiscales"), ome.get("version")
    else:
        found, version = attrs.get("multiscales"), None
    return (found, version) if isinstance(found, list) else None


def _dataset(multiscale: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    datasets = multiscale.get("datasets")
    if not isinstance(datasets, list):
        return None
    for dataset in datasets[:MAX_DATASETS]:
        if isinstance(dataset, Mapping) and dataset.get("path") == name:
            return dataset
    return None


def _axis(entry: object) -> Axis | None:
    if isinstance(entry, str):  # 0.3: names only
        name = clean_text(entry)
        return None if name is None else Axis(name, _TYPE_BY_NAME.get(name))
    if not isinstance(entry, Mapping):
        return None
    name = clean_text(entry.get("name"))
    if name is None:
        return None
    kind = clean_text(entry.get("type"))
    if kind is None:
        kind = _TYPE_BY_NAME.get(name)
    return Axis(name, kind, clean_text(entry.get("unit")))


def _axes(found: object, ndim: int) -> list[Axis] | None:
    if found is None:
        names = LEGACY_AXES if ndim == len(LEGACY_AXES) else None
        return None if names is None else [Axis(n, _TYPE_BY_NAME[n]) for n in names]
    if not isinstance(found, list) or len(found) != ndim:
        return None
    axes = [_axis(entry) for entry in found]
    return None if any(a is None for a in axes) else axes  # type: ignore[return-value]


def _numbers(values: object, ndim: int, *, positive: bool) -> list[float] | None:
    """One finite float per axis (above 0 where ``positive``), else None."""
    if not isinstance(values, list) or len(values) != ndim:
        return None
    out = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        number = float(value) if abs(value) < 1e308 else math.inf  # huge ints
        if not math.isfinite(number) or (positive and number <= 0):
            return None
        out.append(number)
    return out


def _apply(transforms: object, scale: list[float], shift: list[float]) -> None:
    """Follow ``scale``/``shift`` (a point's position: scale * i + shift) by the
    valid ``scale`` and ``translation`` transforms of a list, in its order."""
    if not isinstance(transforms, list):
        return
    ndim = len(scale)
    for transform in transforms[:MAX_TRANSFORMS]:
        if not isinstance(transform, Mapping):
            continue
        kind = transform.get("type")
        if kind == "scale":
            factors = _numbers(transform.get("scale"), ndim, positive=True)
            if factors is not None:
                for i, f in enumerate(factors):
                    scale[i] *= f
                    shift[i] *= f
        elif kind == "translation":
            offsets = _numbers(transform.get("translation"), ndim, positive=False)
            if offsets is not None:
                for i, o in enumerate(offsets):
                    shift[i] += o
    # A product or sum of finite values may still overflow: such an axis gets none.
    for i in range(ndim):
        if not (math.isfinite(scale[i]) and scale[i] > 0 and math.isfinite(shift[i])):
            scale[i], shift[i] = 1.0, 0.0


def _version_text(version: object, multiscale: Mapping[str, Any]) -> str:
    if version is None:
        version = multiscale.get("version")
    if isinstance(version, str) and _VERSION.fullmatch(version):
        return f"OME-Zarr {version}"
    return "OME-Zarr"


def read_ome(meta: ArrayMeta, around: Surroundings) -> tuple[tuple[Axis, ...] | None, str]:
    """The axes of ``meta`` at its level of its group's multiscales, and the
    convention's version as ``info`` shows it ("OME-Zarr 0.4"); (None, "") where
    the array is no level of an image, or the image's axes do not fit it."""
    attrs = around.group_attrs
    ndim = len(meta.shape)
    if not isinstance(attrs, Mapping) or not around.name or not 0 < ndim <= MAX_DIMENSIONS:
        return NOTHING
    found = _multiscales(attrs)
    if found is None:
        return NOTHING
    multiscales, version = found
    for multiscale in multiscales[:MAX_MULTISCALES]:
        if not isinstance(multiscale, Mapping):
            continue
        dataset = _dataset(multiscale, around.name)
        if dataset is None:
            continue
        axes = _axes(multiscale.get("axes"), ndim)
        if axes is None:
            return NOTHING
        scale, shift = [1.0] * ndim, [0.0] * ndim
        _apply(dataset.get("coordinateTransformations"), scale, shift)
        _apply(multiscale.get("coordinateTransformations"), scale, shift)
        placed = tuple(Axis(a.name, a.type, a.unit, s, t) for a, s, t in zip(axes, scale, shift))
        return placed, _version_text(version, multiscale)
    return NOTHING


def axes_text(axes: Sequence[Axis]) -> str:
    """The axes as ``info`` shows them: "z (space): 2 micrometer from 30, ..."."""
    parts = []
    for axis in axes:
        kind = f" ({axis.type})" if axis.type else ""
        unit = f" {axis.unit}" if axis.unit else ""
        parts.append(f"{axis.name}{kind}: {axis.scale:g}{unit} from {axis.translation:g}")
    return ", ".join(parts)
