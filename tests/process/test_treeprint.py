"""``zarrfs tree STORE``: the hierarchy drawn as zarr-python's ``Group.tree()`` draws
it, one line per group and array with shape, data type, chunks, shards and codecs;
listed from consolidated metadata when the root holds it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numcodecs
import pytest
import zarr

from tests.support.http_server import HttpServer
from tests.support.mounting import zarrfs_command
from tests.support.stores import v2_zarray
from zarrfs.commands.tree import codec_text

BLOSC = "codecs=[blosc(cname=lz4, clevel=5, shuffle=1, blocksize=0)]"
EXAMPLE_TREE = [
    "/",
    "├── foo",
    f"│   └── bar (100, 60) <f4 chunks=(32, 32) {BLOSC}",
    "└── weather",
    f"    ├── mask (10, 10) |b1 chunks=(10, 10) {BLOSC}",
    f"    ├── scalar () <f8 chunks=() {BLOSC}",
    f"    ├── station_names (5,) <U8 chunks=(5,) {BLOSC}",
    "    └── temperature (24, 10, 12) <i2 chunks=(8, 5, 6) codecs=[zlib(level=1)]",
]
ZSTD = "zstd(level=0, checksum=false)"
V3_TREE = [
    "/",
    "├── grp",
    "│   ├── deep",
    f"│   │   └── strings (3,) string chunks=(3,) codecs=[vlen-utf8, {ZSTD}]",
    "│   └── sharded (64, 48) int32 shards=(32, 24) chunks=(8, 12) "
    f"codecs=[sharding_indexed(codecs=[bytes(endian=little), {ZSTD}], "
    "index_codecs=[bytes(endian=little), crc32c], index_location=end)]",
    "├── gz (10,) uint8 chunks=(5,) codecs=[transpose(order=[0]), bytes, gzip(level=1)]",
    f"└── plain (60, 40) float32 chunks=(16, 40) codecs=[bytes(endian=little), {ZSTD}]",
]


def tree(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        zarrfs_command("tree", *args),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def make_v3(root: Path) -> None:
    group = zarr.open_group(str(root), mode="w", zarr_format=3)
    group.attrs["title"] = "a tree"
    group.create_array("plain", shape=(60, 40), chunks=(16, 40), dtype="<f4")
    group.create_array("grp/sharded", shape=(64, 48), chunks=(8, 12), shards=(32, 24), dtype="<i4")
    group.create_array("grp/deep/strings", shape=(3,), chunks=(3,), dtype=str)
    group.create_array(
        "gz",
        shape=(10,),
        chunks=(5,),
        dtype="u1",
        compressors=zarr.codecs.GzipCodec(level=1),
        filters=[zarr.codecs.TransposeCodec(order=(0,))],
    )


def test_the_example_store(example_store: Path) -> None:
    result = tree(str(example_store))
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == EXAMPLE_TREE


@pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning")
def test_a_consolidated_v3_store_is_drawn_from_its_consolidated_metadata(tmp_path: Path) -> None:
    root = tmp_path / "v3.zarr"
    make_v3(root)
    zarr.consolidate_metadata(str(root))
    result = tree(str(root))
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == V3_TREE
    # The consolidated document alone lists it: a node gone from the store is still
    # drawn, and --no-consolidated lists the store itself.
    shutil.rmtree(root / "gz")
    assert tree(str(root)).stdout.splitlines() == V3_TREE
    listed = tree("--no-consolidated", str(root))
    assert listed.returncode == 0
    assert listed.stdout.splitlines() == [line for line in V3_TREE if "gz" not in line]


@pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning")
def test_over_http_one_document_lists_the_tree(http_server: HttpServer) -> None:
    root = http_server.root / "v3.zarr"
    make_v3(root)
    zarr.consolidate_metadata(str(root))
    http_server.reset()
    result = tree(f"{http_server.url}v3.zarr")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == V3_TREE
    assert [r.path for r in http_server.gets()] == ["/v3.zarr/zarr.json"]


def test_over_http_without_consolidated_metadata_only_the_root(http_server: HttpServer) -> None:
    make_v3(http_server.root / "v3.zarr")
    result = tree(f"{http_server.url}v3.zarr")
    assert result.returncode == 0
    assert result.stdout.splitlines() == ["/"]
    assert "cannot be listed and holds no consolidated metadata" in result.stderr


def test_a_root_array_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "root.zarr"
    zarr.create_array(
        str(path),
        shape=(4,),
        chunks=(2,),
        dtype=">i2",
        zarr_format=2,
        compressors=None,
        filters=[numcodecs.Delta(dtype=">i2")],
    )
    result = tree(str(path))
    assert result.returncode == 0
    assert result.stdout.splitlines() == [
        "/ (4,) >i2 chunks=(2,) codecs=[delta(dtype=>i2, astype=>i2)]"
    ]


def test_unreadable_metadata_is_drawn_and_named(tmp_path: Path, example_store: Path) -> None:
    store = tmp_path / "example.zarr"
    shutil.copytree(example_store, store)
    (store / "weather/mask/.zarray").write_text('{"zarr_format": 2, "shape": [10]}')
    result = tree(str(store))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines == [
        line if "mask" not in line else "    ├── mask (metadata unreadable)"
        for line in EXAMPLE_TREE
    ]
    assert result.stderr.splitlines() == [
        "zarrfs: metadata unreadable: /weather/mask: weather/mask/.zarray: missing key 'chunks'"
    ]


def test_no_zarr_store_is_one_error_line(tmp_path: Path) -> None:
    result = tree(str(tmp_path))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("zarrfs: error: ") and len(result.stderr.splitlines()) == 1


CODECS: list[tuple[Any, str]] = [
    ({"id": "zlib", "level": 1}, "zlib(level=1)"),
    (
        {"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 2, "blocksize": 0},
        "blosc(cname=zstd, clevel=3, shuffle=2, blocksize=0)",
    ),
    ({"name": "crc32c"}, "crc32c"),
    ({"name": "bytes", "configuration": {}}, "bytes"),
    ({"name": "bytes", "configuration": {"endian": "big"}}, "bytes(endian=big)"),
    ({"name": "transpose", "configuration": {"order": [1, 0]}}, "transpose(order=[1, 0])"),
    (
        {"name": "numcodecs.fixedscaleoffset", "configuration": {"scale": 10, "dtype": "<f8"}},
        "numcodecs.fixedscaleoffset(scale=10, dtype=<f8)",
    ),
    (
        {"id": "x", "flag": True, "none": None, "nan": float("nan")},
        "x(flag=true, none=null, nan=NaN)",
    ),
    (
        {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": [2],
                "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                "index_location": "start",
            },
        },
        "sharding_indexed(codecs=[bytes(endian=little)], "
        "index_codecs=[bytes(endian=little)], index_location=start)",
    ),
]


@pytest.mark.parametrize(("codec", "text"), CODECS)
def test_codec_text(codec: Any, text: str) -> None:
    assert codec_text(codec) == text


def test_a_hierarchy_deeper_than_the_recursion_limit(tmp_path: Path) -> None:
    """Consolidated metadata may nest groups as deep as it likes: walked and drawn
    with stacks, never recursion."""
    depth = 1500
    root = tmp_path / "deep.zarr"
    root.mkdir()
    group = {"zarr_format": 2}
    metadata = {
        ".zgroup": group,
        **{"/".join(["a"] * n) + "/.zgroup": group for n in range(1, depth + 1)},
    }
    deepest = "/".join(["a"] * depth)
    metadata[f"{deepest}/x/.zarray"] = v2_zarray([2], [2], "<i2")
    (root / ".zgroup").write_text(json.dumps(group))
    (root / ".zmetadata").write_text(
        json.dumps({"zarr_consolidated_format": 1, "metadata": metadata})
    )
    result = tree(str(root))
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert len(lines) == depth + 2
    assert lines[-2] == " " * 4 * (depth - 1) + "└── a"
    assert lines[-1] == " " * 4 * depth + "└── x (2,) <i2 chunks=(2,) codecs=[]"
    checked = subprocess.run(
        zarrfs_command("check", str(root)), capture_output=True, text=True, timeout=120
    )
    assert checked.returncode == 0, checked.stderr[-2000:]
    assert checked.stdout.splitlines()[-1] == (
        "ok: 1 arrays: 0 chunks present, 1 missing, 0 corrupt, 0 metadata problems"
    )
