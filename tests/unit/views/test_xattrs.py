"""Extended attributes user.zarr.*: the mapping from metadata (pure); getfattr on a real
mount is in tests/mount/reads/test_xattrs_mount.py."""

from __future__ import annotations

import json
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import zarr

from zarrfs.formats.metadata.legacy import parse_v0_array, parse_v1_array
from zarrfs.formats.metadata.v2 import parse_array, parse_group
from zarrfs.formats.metadata.v3 import parse_node
from zarrfs.formats.model import ArrayMeta
from zarrfs.views.xattrs import MAX_JSON_TEXT, array_xattrs, group_xattrs


def test_array_xattrs_from_metadata(example_store: Path) -> None:
    temperature = example_store / "weather/temperature"
    meta = parse_array(
        "weather/temperature",
        (temperature / ".zarray").read_bytes(),
        (temperature / ".zattrs").read_bytes(),
    )
    got = array_xattrs(meta)
    assert json.loads(got["user.zarr.shape"]) == [24, 10, 12]
    assert json.loads(got["user.zarr.chunks"]) == [8, 5, 6]
    assert json.loads(got["user.zarr.dtype"]) == "<i2"
    assert got["user.zarr.order"] == b"C"
    assert got["user.zarr.format"] == b"2"
    assert got["user.zarr.fill_value"] == b"0"
    assert json.loads(got["user.zarr.compressor"]) == {"id": "zlib", "level": 1}
    assert json.loads(got["user.zarr.filters"]) is None
    assert json.loads(got["user.zarr.dimensions"]) == ["time", "lat", "lon"]
    assert json.loads(got["user.zarr.attrs.units"]) == "0.1 degC"


def test_group_xattrs(example_store: Path) -> None:
    meta = parse_group("", (example_store / ".zgroup").read_bytes(), b'{"a": [1, 2]}')
    assert group_xattrs(meta) == {"user.zarr.format": b"2", "user.zarr.attrs.a": b"[1, 2]"}


# -- every format: the document's own words ------------------------------------------


def v3_meta(root: Path, **kwargs: Any) -> ArrayMeta:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python's notes on unstable extension types
        zarr.create_array(store=str(root), overwrite=True, **kwargs)
    meta = parse_node("a", (root / "zarr.json").read_bytes())
    assert isinstance(meta, ArrayMeta)
    return meta


def test_v2_xattrs_keep_their_names_and_order(example_store: Path) -> None:
    bar = example_store / "foo/bar"
    meta = parse_array("foo/bar", (bar / ".zarray").read_bytes(), None)
    zarray = json.loads((bar / ".zarray").read_bytes())
    assert meta.codec_json == {"compressor": zarray["compressor"], "filters": None}
    names = [k.removeprefix("user.zarr.") for k in array_xattrs(meta)]
    expected = ["shape", "dtype", "chunks", "order", "fill_value", "compressor", "filters"]
    assert names[: len(expected)] == expected and "format" in names
    assert not {"codecs", "data_type", "shards"} & set(names)


def test_legacy_layouts_show_compressor_and_filters(corpus: Path) -> None:
    generated = corpus / "data" / "generated"
    v1 = generated / "v1-zarr-1.1.0" / "i4_2d_blosc_lz4"
    v0 = generated / "v0-zarr-0.4.0" / "i4_2d_lz4_shuffle"
    for meta in (
        parse_v1_array("a", (v1 / "meta").read_bytes(), None),
        parse_v0_array("a", (v0 / "__zmeta__").read_bytes(), None),
    ):
        got = array_xattrs(meta)
        compressor = json.loads(got["user.zarr.compressor"])
        assert compressor["id"] == "blosc" and compressor["cname"] == "lz4", compressor
        assert json.loads(got["user.zarr.filters"]) is None
        assert "user.zarr.codecs" not in got and "user.zarr.data_type" not in got


def test_v3_array_xattrs(tmp_path: Path) -> None:
    meta = v3_meta(
        tmp_path / "a.zarr",
        shape=(10, 12),
        chunks=(5, 6),
        dtype="f4",
        dimension_names=["y", "x"],
        fill_value=1.5,
    )
    doc = json.loads((tmp_path / "a.zarr" / "zarr.json").read_bytes())
    got = array_xattrs(meta)
    assert got["user.zarr.format"] == b"3"
    assert json.loads(got["user.zarr.data_type"]) == "float32"
    assert json.loads(got["user.zarr.dtype"]) == "<f4"
    assert json.loads(got["user.zarr.chunks"]) == [5, 6]
    assert json.loads(got["user.zarr.codecs"]) == doc["codecs"]
    assert got["user.zarr.fill_value"] == b"1.5"
    assert json.loads(got["user.zarr.dimensions"]) == ["y", "x"]
    assert not {"user.zarr.compressor", "user.zarr.filters", "user.zarr.shards"} & set(got)


def test_sharded_v3_array_xattrs(tmp_path: Path) -> None:
    meta = v3_meta(tmp_path / "s.zarr", shape=(64, 64), chunks=(8, 8), shards=(32, 32), dtype="<i2")
    assert meta.shards is not None
    doc = json.loads((tmp_path / "s.zarr" / "zarr.json").read_bytes())
    got = array_xattrs(meta)
    assert json.loads(got["user.zarr.shards"]) == [32, 32]
    assert json.loads(got["user.zarr.chunks"]) == [8, 8]  # the inner chunks
    assert json.loads(got["user.zarr.codecs"]) == doc["codecs"]
    assert json.loads(got["user.zarr.codecs"])[0]["name"] == "sharding_indexed"
    assert json.loads(got["user.zarr.data_type"]) == "int16"


def test_v3_extension_and_variable_length_data_types(tmp_path: Path) -> None:
    times = v3_meta(tmp_path / "t.zarr", shape=(3,), chunks=(3,), dtype="datetime64[s]")
    got = array_xattrs(times)
    assert json.loads(got["user.zarr.data_type"]) == {
        "name": "numpy.datetime64",
        "configuration": {"unit": "s", "scale_factor": 1},
    }
    assert json.loads(got["user.zarr.dtype"]) == "<M8[s]"
    text = v3_meta(tmp_path / "s.zarr", shape=(3,), chunks=(3,), dtype=str)
    assert text.unsupported is not None
    got = array_xattrs(text)
    assert json.loads(got["user.zarr.data_type"]) == "string"
    assert "user.zarr.dtype" not in got  # no numpy dtype stands for it


def test_huge_codec_configurations_are_cut(example_store: Path) -> None:
    bar = example_store / "foo/bar"
    meta = parse_array("foo/bar", (bar / ".zarray").read_bytes(), None)
    labels = [f"label{i}" for i in range(100_000)]
    filters = [{"id": "categorize", "labels": labels, "dtype": "<U10", "astype": "|u1"}]
    huge = replace(meta, codec_json={"compressor": None, "filters": filters})
    value = array_xattrs(huge)["user.zarr.filters"].decode()
    assert len(value) < MAX_JSON_TEXT + 100
    assert value.endswith("characters)")
