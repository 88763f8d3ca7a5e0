"""NRRD header text from OME axes (formats/nrrd.py): pure, no mount, no store."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrfs.formats.conventions import Axis
from zarrfs.formats.nrrd import (
    MAX_VOLUMES,
    Volume,
    axis_fields,
    nrrd_header,
    volume_axes,
    volume_header,
    volumes_of,
    why_no_volumes,
)

T = Axis("t", "time", "second", 60.0, 5.0)
C = Axis("c", "channel")
Z = Axis("z", "space", "micrometer", 2.0, 30.0)
Y = Axis("y", "space", "micrometer", 0.325, 20.0)
X = Axis("x", "space", "\u00b5m", 0.325, 10.0)
TCZYX = (T, C, Z, Y, X)
U2 = np.dtype("<u2")


def fields(header: bytes) -> dict[str, str]:
    out = {}
    for line in header.decode("ascii").splitlines()[1:]:
        name, sep, value = line.partition(": ")
        if sep and not line.startswith("#"):
            out[name] = value
    return out


def test_axis_fields_fastest_first() -> None:
    assert axis_fields(TCZYX) == [
        "kinds: space space space list time",
        "centers: node node node ??? node",
        "spacings: 0.325 0.325 2.0 nan 60.0",
        "axis mins: 10.0 20.0 30.0 nan 5.0",
        'units: "um" "micrometer" "micrometer" "" "second"',
    ]


def test_only_the_first_channel_axis_is_a_list_and_other_types_are_domains() -> None:
    rows = axis_fields((C, Axis("c2", "channel"), Axis("a", "angle", None, 3.0), Y, X))
    assert rows[0] == "kinds: space space domain domain list"
    assert rows[2] == "spacings: 0.325 0.325 3.0 1.0 nan"
    assert not any(r.startswith("units") for r in axis_fields((Axis("a"), Axis("b"))))


def test_header_with_axes_names_them_and_keeps_the_plain_fields() -> None:
    header = nrrd_header(
        U2, (2, 3, 4, 5, 6), path="img/0", dimensions=None, data_file="array.raw", axes=TCZYX
    )
    got = fields(header)
    assert got["sizes"] == "6 5 4 3 2"
    assert got["labels"] == '"x" "y" "z" "c" "t"'
    assert got["data file"] == "array.raw" and "byte skip" not in got
    assert got["kinds"] == "space space space list time"


def test_axes_that_do_not_fit_the_shape_are_not_used() -> None:
    header = nrrd_header(U2, (4, 5), path="a", dimensions=("y", "x"), data_file="a", axes=TCZYX)
    got = fields(header)
    assert "kinds" not in got and got["labels"] == '"x" "y"'


@pytest.mark.parametrize(
    ("axes", "outer"),
    [
        (TCZYX, 2),
        ((T, Z, Y, X), 1),
        ((C, Y, X), 1),
        ((T, C, X), 2),
        ((Z, Y, X), None),  # nothing to take volumes along
        ((Y, T, X), None),  # a space axis before a time axis: not contiguous
        ((T, Axis("w", "space"), Z, Y, X), None),  # four space axes
        ((T, C), None),
        ((), None),
        (None, None),
    ],
)
def test_volume_axes(axes: tuple[Axis, ...] | None, outer: int | None) -> None:
    assert volume_axes(axes) == outer


def test_volume_names_sort_as_their_index() -> None:
    volumes = volumes_of(TCZYX, (2, 3, 4, 5, 6))
    assert volumes is not None
    assert [v.name for v in volumes][:4] == [
        "t0000_c00.nhdr",
        "t0000_c01.nhdr",
        "t0000_c02.nhdr",
        "t0001_c00.nhdr",
    ]
    assert volumes[-1] == Volume("t0001_c02.nhdr", (1, 2))
    wide = volumes_of((Axis("c", "channel"), Y, X), (150, 2, 2))
    assert wide is not None and wide[0].name == "c000.nhdr" and len(wide) == 150
    other = volumes_of((Axis("a", "angle"), Y, X), (3, 2, 2))
    assert other is not None and other[0].name == "i0-00.nhdr"
    names = [v.name for v in volumes_of((T, C, Y, X), (12, 11, 2, 2)) or []]
    assert names == sorted(names) and len(names) == 132


def test_too_many_volumes_give_none_and_say_why() -> None:
    shape = (MAX_VOLUMES + 1, 1, 4, 4)
    assert volumes_of((T, C, Y, X), shape) is None
    assert why_no_volumes((T, C, Y, X), shape) == f"{MAX_VOLUMES + 1} volumes, more than 4096"
    assert why_no_volumes((T, C, Y, X), (MAX_VOLUMES, 1, 4, 4)) is None
    assert why_no_volumes((T, C, Y, X), (10**12, 10**12, 4, 4)) is not None
    assert len(volumes_of((T, C, Y, X), (64, 64, 1, 1)) or []) == MAX_VOLUMES


def test_volume_header_skips_to_its_volume() -> None:
    header = volume_header(
        U2, (2, 3, 4, 5, 6), TCZYX, (1, 2), path="img/0", data_file="../array.raw"
    )
    got = fields(header)
    assert got["sizes"] == "6 5 4" and got["dimension"] == "3"
    assert got["byte skip"] == str((1 * 3 + 2) * 4 * 5 * 6 * 2)
    assert got["data file"] == "../array.raw"
    assert got["kinds"] == "space space space"
    assert got["spacings"] == "0.325 0.325 2.0" and got["axis mins"] == "10.0 20.0 30.0"
    assert got["content"] == "Zarr array /img/0 at t=1, c=2"


AXIS = st.builds(
    Axis,
    name=st.text(max_size=8),
    type=st.sampled_from([None, "space", "time", "channel", "x"]),
    unit=st.none() | st.text(max_size=8),
    scale=st.floats(allow_nan=False, allow_infinity=False, min_value=1e-300),
    translation=st.floats(allow_nan=False, allow_infinity=False),
)


@settings(max_examples=300, deadline=None)
@given(axes=st.lists(AXIS, min_size=1, max_size=6), data=st.data())
def test_any_axes_give_one_ascii_header_line_per_field(
    axes: list[Axis], data: st.DataObject
) -> None:
    shape = tuple(data.draw(st.lists(st.integers(0, 5), min_size=len(axes), max_size=len(axes))))
    header = nrrd_header(U2, shape, path="a", dimensions=None, data_file="array.raw", axes=axes)
    got = fields(header)
    names = [line.partition(": ")[0] for line in header.decode("ascii").splitlines()]
    assert len(names) == len(set(names))
    for name in ("kinds", "centers", "spacings", "axis mins"):
        assert len(got[name].split()) == len(axes)
    assert all(math.isfinite(float(v)) for v in got["spacings"].split() if v != "nan")
    if "units" in got:
        assert got["units"].count('"') == 2 * len(axes)
    volumes = volumes_of(axes, shape)
    outer = volume_axes(axes)
    if volumes is not None:
        assert outer is not None
        assert len(volumes) == math.prod(shape[:outer])
        assert len({v.name for v in volumes}) == len(volumes)
