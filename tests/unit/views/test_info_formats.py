"""``info`` of every format: v2's rows kept, v3's data type and codecs, sharded arrays."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import zarr

from tests.support.info import (
    METAS,
    assert_no_chunk_read,
    bytes_stored,
    field,
    info_node,
    initialized,
    make_tree,
    meta_of,
    read_info,
    write_json,
)
from tests.support.stores import v2_zarray as zarray
from zarrfs.formats.metadata.v3 import parse_node
from zarrfs.formats.model import ArrayMeta
from zarrfs.views.info import Stored, info_text, summarise

# -- every format: rows from the document's own words ---------------------------------


def v3_array(root: Path, **kwargs: object) -> zarr.Array:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python's notes on unstable extension types
        return zarr.create_array(store=str(root), overwrite=True, **kwargs)  # type: ignore[arg-type]


def v3_meta(root: Path, path: str = "a", **kwargs: object) -> ArrayMeta:
    v3_array(root, **kwargs)
    meta = parse_node(path, (root / "zarr.json").read_bytes())
    assert isinstance(meta, ArrayMeta)
    return meta


def row_names(text: str) -> list[str]:
    return [line.partition(": ")[0].strip() for line in text.splitlines()]


def test_v2_rows_are_unchanged() -> None:
    meta = METAS[10]  # "ten": >i2, zlib
    text = info_text(meta, None, 0)
    assert row_names(text) == [
        "Name",
        "Zarr format",
        "Shape",
        "Chunk shape",
        "Data type",
        "Order",
        "Fill value",
        "Filters",
        "Compressor",
        "Dimension names",
        "No. bytes",
        "No. bytes stored",
        "Storage ratio",
        "Chunks initialized",
        "Chunks not stored",
        "Views",
    ]
    assert field(text, "Data type") == ">i2 (int16)"
    assert field(text, "Filters") == "null"
    assert field(text, "Compressor") == '{"id": "zlib", "level": 1}'
    filtered = meta_of("f", zarray([4], [2], filters=[{"id": "delta", "dtype": "<i4"}]))
    assert field(info_text(filtered, None, 0), "Filters") == '[{"id": "delta", "dtype": "<i4"}]'


def test_v3_rows(tmp_path: Path) -> None:
    meta = v3_meta(tmp_path / "a.zarr", shape=(10, 12), chunks=(5, 6), dtype="f4")
    doc = json.loads((tmp_path / "a.zarr" / "zarr.json").read_bytes())
    text = info_text(meta, Stored(3, 100), 1)
    names = row_names(text)
    assert "Codecs" in names and "Shard shape" not in names and "Shards initialized" not in names
    assert not {"Filters", "Compressor"} & set(names)
    assert field(text, "Zarr format") == "3"
    assert field(text, "Data type") == "float32 (numpy <f4)"
    assert json.loads(field(text, "Codecs")) == doc["codecs"]
    assert field(text, "Chunk shape") == "(5, 6)"
    assert initialized(text) == (3, 4)
    # Another codec chain shows as another Codecs row.
    plain = v3_meta(
        tmp_path / "b.zarr", shape=(10, 12), chunks=(5, 6), dtype="f4", compressors=None
    )
    assert field(info_text(plain, None, 0), "Codecs") != field(text, "Codecs")


def test_v3_data_types(tmp_path: Path) -> None:
    times = v3_meta(tmp_path / "t.zarr", shape=(3,), chunks=(3,), dtype="datetime64[ms]")
    text = info_text(times, None, 0)
    name, _, numpy = field(text, "Data type").rpartition(" (numpy ")
    assert json.loads(name) == {
        "name": "numpy.datetime64",
        "configuration": {"unit": "ms", "scale_factor": 1},
    }
    assert numpy == "<M8[ms])"
    strings = v3_meta(tmp_path / "s.zarr", shape=(3,), chunks=(3,), dtype=str)
    text = info_text(strings, None, 0)
    assert field(text, "Data type") == "string (no fixed-size numpy type)"


def test_sharded_rows(tmp_path: Path) -> None:
    meta = v3_meta(tmp_path / "s.zarr", shape=(64, 64), chunks=(8, 8), shards=(32, 32), dtype="<i2")
    assert meta.shards is not None
    text = info_text(meta, Stored(32, 1748, shards=2), 0)
    names = row_names(text)
    assert names.index("Shard shape") + 1 == names.index("Chunk shape")
    assert field(text, "Shard shape") == "(32, 32)"
    assert field(text, "Chunk shape") == "(8, 8)"
    assert field(text, "Shards initialized") == "2/4"
    assert initialized(text) == (32, 64)
    assert json.loads(field(text, "Codecs"))[0]["name"] == "sharding_indexed"
    for stored in (None, Stored(64, 2**64 - 1, shards=4), Stored(0, 0)):
        text = info_text(meta, stored, 64)
        assert field(text, "Shards initialized") == f"{stored.shards if stored else 0}/4"
        assert int(field(text, "No. bytes stored").split()[0]) == (stored.nbytes if stored else 0)


def test_summarise_counts_shards_and_the_chunks_inside_the_array(tmp_path: Path) -> None:
    # (40, 40) in (32, 32) shards of (8, 8) chunks: a 5 x 5 chunk grid, the edge
    # shards overhang it (shard (1, 1) holds one chunk of the array).
    meta = v3_meta(
        tmp_path / "e.zarr", path="e", shape=(40, 40), chunks=(8, 8), shards=(32, 32), dtype="u1"
    )
    keys = [
        ("e/c/0/0", 100),
        ("e/c/1/1", 10),
        ("e/c/0/1", 20),
        ("e/c/2/0", 1000),  # outside the (2, 2) shard grid
        ("e/c/0.0", 1000),  # another key encoding: no shard of this array
        ("e/zarr.json", 50),
        ("other/c/0/0", 1000),
    ]
    assert summarise(meta, keys, documents=7) == Stored(16 + 1 + 4, 7 + 130, shards=3)


def test_sharded_info_in_a_tree_matches_zarr_python(tmp_path: Path) -> None:
    root = tmp_path / "s.zarr"
    write_json(root / "zarr.json", {"zarr_format": 3, "node_type": "group", "attributes": {}})
    a = v3_array(root / "arr", shape=(64, 64), chunks=(8, 8), shards=(32, 32), dtype="<i2")
    a[0:8, 0:40] = 3  # two shards
    tree = make_tree(root)
    text = read_info(info_node(tree))
    assert field(text, "Shards initialized") == f"{a._nshards_initialized}/4" == "2/4"
    assert initialized(text) == (a.nchunks_initialized, a.nchunks) == (32, 64)
    assert bytes_stored(text) == a.nbytes_stored()
    assert_no_chunk_read(tree.store)
