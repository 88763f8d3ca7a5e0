"""Nodata from a Zarr fill value (formats/conventions/cf.py): where xarray's Zarr v2
writer put ``_FillValue`` into ``.zarray``'s ``fill_value``, and never from the
default fill value of an array xarray did not write."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from tests.support.info import meta_of
from tests.support.stores import v2_zarray
from zarrfs.formats.conventions import Surroundings
from zarrfs.formats.conventions.cf import read_cf
from zarrfs.formats.metadata.v3 import parse_node
from zarrfs.formats.model import ArrayMeta

DIMS = {"_ARRAY_DIMENSIONS": ["time", "lat", "lon"]}
AROUND = Surroundings("a", lambda name: None, {})


def v2(attrs: dict[str, Any], dtype: str = "<i2", fill: object = -32768) -> ArrayMeta:
    return meta_of("g/a", v2_zarray([3, 4, 5], [3, 4, 5], dtype, fill_value=fill), attrs)


def v3(attrs: dict[str, Any], fill: object = 0, dims: bool = True) -> ArrayMeta:
    doc: dict[str, Any] = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [3, 4, 5],
        "data_type": "int16",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [3, 4, 5]}},
        "chunk_key_encoding": {"name": "default"},
        "fill_value": fill,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "attributes": attrs,
    }
    if dims:
        doc["dimension_names"] = ["time", "lat", "lon"]
    meta = parse_node("g/a", json.dumps(doc).encode())
    assert isinstance(meta, ArrayMeta)
    return meta


def nodata(meta: ArrayMeta) -> float | int | None:
    return read_cf(meta, AROUND).nodata


def test_xarray_v2_fill_value_is_nodata() -> None:
    assert nodata(v2(DIMS)) == -32768
    assert nodata(v2(DIMS, "<u1", 255)) == 255
    assert nodata(v2(DIMS, ">f4", 9.5)) == 9.5
    # xarray's default fill value of a float variable: NaN
    assert math.isnan(nodata(v2(DIMS, "<f8", "NaN")))  # type: ignore[arg-type]


def test_attributes_come_before_the_fill_value() -> None:
    assert nodata(v2({**DIMS, "_FillValue": -1})) == -1
    assert nodata(v2({**DIMS, "missing_value": -2})) == -2
    # An attribute that is no value of the type hides the fill value: no nodata.
    assert nodata(v2({**DIMS, "_FillValue": "x"})) is None


@pytest.mark.parametrize(
    "meta",
    [
        pytest.param(v2({}, fill=0), id="v2-no-dimensions-fill-0"),
        pytest.param(v2({}), id="v2-no-dimensions"),
        pytest.param(v2(DIMS, fill=None), id="v2-null-fill"),
        pytest.param(v3({}), id="v3-default-fill"),
        pytest.param(v3({}, fill=-32768), id="v3-fill-without-attribute"),
        pytest.param(v3({}, fill=-32768, dims=False), id="v3-no-dimensions"),
    ],
)
def test_no_nodata_from_a_fill_value_xarray_does_not_read(meta: ArrayMeta) -> None:
    assert nodata(meta) is None


def test_xarray_v3_keeps_fill_value_as_an_attribute() -> None:
    assert nodata(v3({"_FillValue": -32768})) == -32768


def test_fill_value_of_other_types_gives_none() -> None:
    assert nodata(v2(DIMS, "|b1", True)) is None
    assert nodata(v2(DIMS, "<M8[s]", 0)) is None
    assert nodata(v2(DIMS, "<c8", [1.0, 2.0])) is None
