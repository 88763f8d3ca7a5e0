"""OME-Zarr 0.4 (Zarr v2) and 0.5 (Zarr v3) ``multiscales`` (pure)."""

from __future__ import annotations

from zarrfs.formats.conventions.facts import Axis, Surroundings
from zarrfs.formats.model import ArrayMeta


def read_ome(meta: ArrayMeta, around: Surroundings) -> tuple[tuple[Axis, ...] | None, str]:
    """The axes of ``meta`` at its level of its group's multiscales, and the
    convention's version as ``info`` shows it ("OME-Zarr 0.4")."""
    return None, ""
