"""OME-Zarr ``multiscales`` read into axes (formats/conventions/ome.py): pure, from
attributes alone; hostile attributes give nothing or less, never an exception."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrfs.formats.conventions import Axis, Surroundings, conventions_of
from zarrfs.formats.conventions.ome import MAX_AXIS_TEXT, axes_text, read_ome
from zarrfs.formats.metadata.v2 import parse_array
from zarrfs.formats.model import ArrayMeta

TCZYX = [
    {"name": "t", "type": "time", "unit": "second"},
    {"name": "c", "type": "channel"},
    {"name": "z", "type": "space", "unit": "micrometer"},
    {"name": "y", "type": "space", "unit": "micrometer"},
    {"name": "x", "type": "space", "unit": "micrometer"},
]
SCALE_0 = {"type": "scale", "scale": [60, 1, 2, 0.325, 0.325]}
SHIFT_0 = {"type": "translation", "translation": [5, 0, 30, 20, 10]}
SCALE_1 = {"type": "scale", "scale": [60, 1, 4, 0.65, 0.65]}


def meta(ndim: int) -> ArrayMeta:
    zarray = {
        "zarr_format": 2,
        "shape": [2] * ndim,
        "chunks": [2] * ndim,
        "dtype": "<u2",
        "compressor": None,
        "fill_value": 0,
        "order": "C",
        "filters": None,
    }
    return parse_array("img/0", json.dumps(zarray).encode(), None)


def around(name: str, attrs: Any) -> Surroundings:
    return Surroundings(name, lambda n: None, attrs)


def multiscale(axes: Any = TCZYX, **extra: Any) -> dict[str, Any]:
    datasets = [
        {"path": "0", "coordinateTransformations": [SCALE_0, SHIFT_0]},
        {"path": "1", "coordinateTransformations": [SCALE_1]},
    ]
    return {"version": "0.4", "axes": axes, "datasets": datasets, **extra}


V04 = {"multiscales": [multiscale()]}
V05 = {
    "ome": {
        "version": "0.5",
        "multiscales": [{k: v for k, v in multiscale().items() if k != "version"}],
    }
}


def test_v04_level_0_has_the_axes_scale_and_translation() -> None:
    axes, version = read_ome(meta(5), around("0", V04))
    assert version == "OME-Zarr 0.4"
    assert axes == (
        Axis("t", "time", "second", 60.0, 5.0),
        Axis("c", "channel", None, 1.0, 0.0),
        Axis("z", "space", "micrometer", 2.0, 30.0),
        Axis("y", "space", "micrometer", 0.325, 20.0),
        Axis("x", "space", "micrometer", 0.325, 10.0),
    )


def test_each_level_has_its_own_scale() -> None:
    axes, _ = read_ome(meta(5), around("1", V04))
    assert axes is not None and [a.scale for a in axes] == [60.0, 1.0, 4.0, 0.65, 0.65]
    assert [a.translation for a in axes] == [0.0] * 5


def test_v05_under_the_ome_key() -> None:
    axes, version = read_ome(meta(5), around("0", V05))
    assert version == "OME-Zarr 0.5"
    assert axes is not None and axes[2] == Axis("z", "space", "micrometer", 2.0, 30.0)


def test_the_multiscale_transform_follows_the_dataset_transform() -> None:
    ms = multiscale(
        coordinateTransformations=[
            {"type": "scale", "scale": [1, 1, 10, 10, 10]},
            {"type": "translation", "translation": [0, 0, 1, 1, 1]},
        ]
    )
    axes, _ = read_ome(meta(5), around("0", {"multiscales": [ms]}))
    assert axes is not None
    z = axes[2]
    # 10 * (2 * i + 30) + 1
    assert (z.scale, z.translation) == (20.0, 301.0)


@pytest.mark.parametrize(
    ("ndim", "axes", "names", "types"),
    [
        (5, None, "tczyx", ["time", "channel", "space", "space", "space"]),  # 0.1, 0.2
        (3, ["z", "y", "x"], "zyx", ["space"] * 3),  # 0.3: names
        (4, ["c", "z", "y", "x"], "czyx", ["channel", "space", "space", "space"]),
        (2, [{"name": "y"}, {"name": "x"}], "yx", ["space", "space"]),  # no types
        (3, ["a", "y", "x"], "ayx", [None, "space", "space"]),
    ],
)
def test_older_versions_name_axes(ndim: int, axes: Any, names: str, types: list) -> None:
    ms: dict[str, Any] = {"version": "0.3", "datasets": [{"path": "0"}]}
    if axes is not None:
        ms["axes"] = axes
    found, version = read_ome(meta(ndim), around("0", {"multiscales": [ms]}))
    assert found is not None and version == "OME-Zarr 0.3"
    assert "".join(a.name for a in found) == names
    assert [a.type for a in found] == types
    assert all(a.scale == 1.0 and a.translation == 0.0 for a in found)


@pytest.mark.parametrize(
    ("name", "attrs", "ndim"),
    [
        ("0", {}, 5),
        ("2", V04, 5),  # no dataset of that path
        ("0", V04, 4),  # axes do not match the array's dimensions
        ("", V04, 5),  # the root array: no group
        ("0", {"multiscales": "no"}, 5),
        ("0", {"multiscales": [1, None, "x"]}, 5),
        ("0", {"multiscales": [{"datasets": [{"path": "0"}]}]}, 4),  # no axes, not 5-D
        ("0", {"multiscales": [multiscale(axes=[{"name": 1}] * 5)]}, 5),
        ("0", {"multiscales": [multiscale(axes="tczyx")]}, 5),
        ("0", {"ome": {"multiscales": {"axes": []}}}, 5),
        ("0", [], 5),
    ],
)
def test_nothing_where_the_array_is_no_level_of_an_image(name: str, attrs: Any, ndim: int) -> None:
    assert read_ome(meta(ndim), around(name, attrs)) == (None, "")


@pytest.mark.parametrize(
    "transform",
    [
        {"type": "scale", "scale": [1, 1, math.nan, 1, 1]},
        {"type": "scale", "scale": [1, 1, math.inf, 1, 1]},
        {"type": "scale", "scale": [1, 1, 0, 1, 1]},
        {"type": "scale", "scale": [1, 1, -2, 1, 1]},
        {"type": "scale", "scale": [1, 1, True, 1, 1]},
        {"type": "scale", "scale": [1, 1, "2", 1, 1]},
        {"type": "scale", "scale": [1, 1, 10**400, 1, 1]},
        {"type": "scale", "scale": [1, 1, 1]},  # one per axis, or none
        {"type": "scale", "scale": list(range(1, 10**5))},
        {"type": "scale", "path": "scale.bin"},
        {"type": "translation", "translation": [0, 0, math.nan, 0, 0]},
        {"type": "translation", "translation": None},
        {"type": "affine", "affine": [[1]]},
        "scale",
    ],
)
def test_a_bad_transform_is_left_out(transform: Any) -> None:
    ms = multiscale()
    ms["datasets"][0]["coordinateTransformations"] = [SCALE_0, transform]
    axes, _ = read_ome(meta(5), around("0", {"multiscales": [ms]}))
    assert axes is not None and [a.scale for a in axes] == [60, 1, 2, 0.325, 0.325]


def test_overflowing_products_give_the_axis_no_scale() -> None:
    ms = multiscale(coordinateTransformations=[{"type": "scale", "scale": [1e300] * 5}])
    ms["datasets"][0]["coordinateTransformations"] = [{"type": "scale", "scale": [1e300] * 5}]
    axes, _ = read_ome(meta(5), around("0", {"multiscales": [ms]}))
    assert axes is not None and all(a.scale == 1.0 and a.translation == 0.0 for a in axes)


def test_texts_are_cut_and_cleaned() -> None:
    axes = [dict(a) for a in TCZYX]
    axes[0]["name"] = 't"\n{x}\\'
    axes[2]["unit"] = "\u00b5m\x00" + "m" * 1000
    axes[3]["type"] = "space\r\n"
    found, _ = read_ome(meta(5), around("0", {"multiscales": [multiscale(axes=axes)]}))
    assert found is not None
    assert found[0].name == "t???x??"
    assert found[2].unit == "\u00b5m?" + "m" * (MAX_AXIS_TEXT - 3) + "..."
    assert found[3].type == "space??"


def test_huge_lists_are_read_up_to_a_bound() -> None:
    many = [{"datasets": [{"path": str(i)}]} for i in range(10**5)]
    assert read_ome(meta(5), around("99999", {"multiscales": many})) == (None, "")
    datasets = [{"path": str(i)} for i in range(10**5)]
    ms = {"axes": TCZYX, "datasets": datasets}
    assert read_ome(meta(5), around("99999", {"multiscales": [ms]})) == (None, "")
    assert read_ome(meta(5), around("3", {"multiscales": [ms]}))[0] is not None


def test_conventions_of_carries_the_axes_and_the_version() -> None:
    found = conventions_of(meta(5), around("0", V04))
    assert found.axes is not None and found.axes[4].scale == 0.325
    assert "OME-Zarr 0.4" in found.found


def test_axes_text_for_info() -> None:
    axes, _ = read_ome(meta(5), around("0", V04))
    assert axes is not None
    assert axes_text(axes[1:3]) == "c (channel): 1 from 0, z (space): 2 micrometer from 30"


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(["scale", "translation", "0", "space", "time", "channel"]),
    lambda inner: (
        st.lists(inner, max_size=6)
        | st.dictionaries(
            st.sampled_from(
                [
                    "multiscales",
                    "axes",
                    "datasets",
                    "path",
                    "type",
                    "scale",
                    "translation",
                    "coordinateTransformations",
                    "name",
                    "unit",
                    "version",
                    "ome",
                ]
            ),
            inner,
            max_size=6,
        )
    ),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None)
@given(attrs=JSON, ndim=st.integers(1, 6))
def test_any_json_gives_axes_or_nothing(attrs: Any, ndim: int) -> None:
    axes, version = read_ome(meta(ndim), around("0", attrs))
    if axes is None:
        assert version == ""
        return
    assert len(axes) == ndim and version.startswith("OME-Zarr")
    for axis in axes:
        assert math.isfinite(axis.scale) and axis.scale > 0 and math.isfinite(axis.translation)
        for text in (axis.name, axis.type, axis.unit):
            assert text is None or (len(text) <= MAX_AXIS_TEXT + 3 and text.isprintable())
            assert text is None or not set(text) & set('"{}\\')


@settings(max_examples=200, deadline=None)
@given(
    scale=st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=3, max_size=3),
    shift=st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=3, max_size=3),
)
def test_any_numbers_give_finite_placements(scale: list[float], shift: list[float]) -> None:
    ms = {
        "axes": ["z", "y", "x"],
        "datasets": [
            {
                "path": "0",
                "coordinateTransformations": [
                    {"type": "scale", "scale": scale},
                    {"type": "translation", "translation": shift},
                ],
            }
        ],
        "coordinateTransformations": [{"type": "scale", "scale": scale}],
    }
    axes, _ = read_ome(meta(3), around("0", {"multiscales": [ms]}))
    assert axes is not None
    assert all(math.isfinite(a.scale) and a.scale > 0 for a in axes)
    assert all(math.isfinite(a.translation) for a in axes)
