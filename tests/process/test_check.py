"""``zarrfs check STORE``: every stored chunk read and decoded, on every kind of store.

Each test runs the real command in a subprocess and reads what a user reads: one line
per corrupt chunk (its store key and the reason), one summary line per array, a last
line, and the exit status (0: everything stored decodes, missing chunks included; 1:
something corrupt or metadata unreadable). The store is hashed before and after: a
check never changes it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zarr

from tests.support.http_server import HttpServer
from tests.support.mounting import zarrfs_command
from tests.support.servers import Bucket
from tests.support.zips import patch_central
from zarrfs.commands.check import check_store
from zarrfs.commands.walk import walk
from zarrfs.errors import ReadOnlyError, StoreError
from zarrfs.stores.directory import DirectoryStore
from zarrfs.stores.readonly import ReadOnlyStore

# The committed example store, as the check sums it up.
EXAMPLE_SUMMARY = [
    "/foo/bar: 8 chunks: 8 present, 0 missing, 0 corrupt; 21.2 KiB stored (21665 bytes)",
    "/weather/mask: 1 chunk: 1 present, 0 missing, 0 corrupt; 116 B stored (116 bytes)",
    "/weather/scalar: 1 chunk: 1 present, 0 missing, 0 corrupt; 24 B stored (24 bytes)",
    "/weather/station_names: 1 chunk: 1 present, 0 missing, 0 corrupt; 107 B stored (107 bytes)",
    "/weather/temperature: 12 chunks: 12 present, 0 missing, 0 corrupt; 3.1 KiB stored "
    "(3204 bytes)",
]


def check(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        zarrfs_command("check", *args),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def summaries(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """Array path → its summary line, up to the numbers of bytes."""
    found = {}
    for line in result.stdout.splitlines():
        if line.startswith("/"):
            found[line.split(":", 1)[0]] = line.split(";")[0]
    return found


def corrupt_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return sorted(line for line in result.stdout.splitlines() if line.startswith("corrupt: "))


def snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every path under ``root`` (and itself) with its mode, mtime and content hash."""
    paths = [root, *sorted(root.rglob("*"))] if root.is_dir() else [root]
    out = {}
    for path in paths:
        st = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        out[str(path.relative_to(root))] = (st.st_mode, st.st_mtime_ns, digest)
    return out


@pytest.fixture
def example(tmp_path: Path, example_store: Path) -> Path:
    copy = tmp_path / "example.zarr"
    shutil.copytree(example_store, copy)
    return copy


def make_v3(root: Path | zarr.storage.ZipStore) -> None:
    """plain: 4 chunks; sharded: 4 shards of 8 inner chunks; holes: one shard holding
    1 of its 8 inner chunks; sparse: 1 of 4 chunks stored (the others are fill);
    strings: variable-length."""
    group = zarr.open_group(str(root) if isinstance(root, Path) else root, mode="w", zarr_format=3)
    plain = np.arange(60 * 40, dtype="<f4").reshape(60, 40)
    group.create_array("plain", shape=(60, 40), chunks=(16, 40), dtype="<f4")[...] = plain
    sharded = group.create_array(
        "nested/sharded", shape=(64, 48), chunks=(8, 12), shards=(32, 24), dtype="<i4"
    )
    sharded[...] = np.arange(64 * 48, dtype="<i4").reshape(64, 48)
    holes = group.create_array(
        "holes", shape=(32, 24), chunks=(8, 12), shards=(32, 24), dtype="<u2"
    )
    holes[0:8, 0:12] = 7
    sparse = group.create_array("sparse", shape=(40,), chunks=(10,), dtype="<i8", fill_value=0)
    sparse[0:10] = np.arange(1, 11)
    group.create_array("strings", shape=(2,), chunks=(2,), dtype=str)[...] = ["a", "bc"]


V3_SUMMARY = {
    "/holes": "/holes: 8 chunks: 1 present, 7 missing, 0 corrupt",
    "/nested/sharded": "/nested/sharded: 32 chunks: 32 present, 0 missing, 0 corrupt",
    "/plain": "/plain: 4 chunks: 4 present, 0 missing, 0 corrupt",
    "/sparse": "/sparse: 4 chunks: 1 present, 3 missing, 0 corrupt",
    # no fixed-size elements: no flat file through a mount, nothing decoded here
    "/strings": "/strings: not checked: variable-length data type 'string' has no fixed "
    "element size",
}


def test_a_healthy_v2_store(example: Path) -> None:
    before = snapshot(example)
    result = check(str(example))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines == [*EXAMPLE_SUMMARY, lines[-1]]
    assert lines[-1] == "ok: 5 arrays: 23 chunks present, 0 missing, 0 corrupt, 0 metadata problems"
    assert snapshot(example) == before


def test_a_corrupt_chunk_is_named_by_its_key_with_the_reason(example: Path) -> None:
    (example / "foo/bar/0.1").write_bytes(b"not a blosc frame" * 8)
    (example / "weather/temperature/2.1.1").write_bytes(b"")
    before = snapshot(example)
    result = check(str(example))
    assert result.returncode == 1, result.stdout + result.stderr
    bad = corrupt_lines(result)
    assert [line.split(": ", 2)[1] for line in bad] == ["foo/bar/0.1", "weather/temperature/2.1.1"]
    assert all(len(line.split(": ", 2)[2]) > 5 for line in bad), bad  # a reason
    assert summaries(result)["/foo/bar"] == "/foo/bar: 8 chunks: 8 present, 0 missing, 1 corrupt"
    assert result.stdout.splitlines()[-1].startswith("FAILED: 5 arrays: ")
    assert "2 corrupt" in result.stdout.splitlines()[-1]
    assert snapshot(example) == before


def test_missing_chunks_are_no_error(example: Path) -> None:
    (example / "foo/bar/1.1").unlink()
    (example / "weather/scalar/0").unlink()
    result = check(str(example))
    assert result.returncode == 0, result.stdout
    assert summaries(result)["/foo/bar"] == "/foo/bar: 8 chunks: 7 present, 1 missing, 0 corrupt"
    assert summaries(result)["/weather/scalar"] == (
        "/weather/scalar: 1 chunk: 0 present, 1 missing, 0 corrupt"
    )


def test_unreadable_metadata_fails_the_check(example: Path) -> None:
    (example / "weather/mask/.zarray").write_text('{"zarr_format": 2, "shape": [10]}')
    (example / "foo/.zattrs").write_text("{not json")
    result = check(str(example))
    assert result.returncode == 1
    metadata = sorted(line for line in result.stdout.splitlines() if line.startswith("metadata:"))
    assert len(metadata) == 2, result.stdout
    assert metadata[0].startswith("metadata: /foo: foo/.zattrs is not valid JSON")
    assert metadata[1].startswith("metadata: /weather/mask: weather/mask/.zarray")
    assert "/weather/mask" not in summaries(result)
    assert "2 metadata problems" in result.stdout.splitlines()[-1]


def test_a_v3_store_with_shards_and_holes(tmp_path: Path) -> None:
    root = tmp_path / "v3.zarr"
    make_v3(root)
    before = snapshot(root)
    result = check(str(root))
    assert result.returncode == 0, result.stdout + result.stderr
    assert summaries(result) == V3_SUMMARY
    assert snapshot(root) == before


def inner_ranges(shard: bytes, n_inner: int) -> np.ndarray:
    """(offset, nbytes) of each inner chunk: the index at the end, then its crc32c."""
    index = shard[-(n_inner * 16 + 4) : -4]
    return np.frombuffer(index, dtype="<u8").reshape(n_inner, 2)


def test_a_corrupt_inner_chunk_and_a_truncated_shard(tmp_path: Path) -> None:
    root = tmp_path / "v3.zarr"
    make_v3(root)
    shard = root / "nested/sharded/c/0/0"
    data = bytearray(shard.read_bytes())
    offset, _ = inner_ranges(bytes(data), 8)[5]  # inner chunk (2, 1): 4 x 2 per shard
    data[offset : offset + 4] = b"\0\0\0\0"  # no zstd frame any more
    shard.write_bytes(bytes(data))
    cut = root / "nested/sharded/c/1/1"
    cut.write_bytes(cut.read_bytes()[:100])
    before = snapshot(root)
    for jobs in ("1", "4"):
        result = check("--jobs", jobs, str(root))
        assert result.returncode == 1, result.stdout + result.stderr
        bad = corrupt_lines(result)
        assert len(bad) == 2, result.stdout
        assert bad[0].startswith("corrupt: nested/sharded/c/0/0: inner chunk (2, 1): ")
        assert bad[1].startswith("corrupt: nested/sharded/c/1/1: shard index: ")
        # the truncated shard's 8 chunks all fail through a mount: counted corrupt
        assert summaries(result)["/nested/sharded"] == (
            "/nested/sharded: 32 chunks: 32 present, 0 missing, 9 corrupt"
        )
    assert snapshot(root) == before


def test_jobs_change_nothing_but_the_speed(tmp_path: Path, example: Path) -> None:
    (example / "foo/bar/0.0").write_bytes(b"\x02\x01!\x04" + b"\xff" * 40)
    outputs = []
    for jobs in ("1", "2", "8"):
        result = check("-j", jobs, str(example))
        assert result.returncode == 1
        outputs.append(sorted(result.stdout.splitlines()))
    assert outputs[0] == outputs[1] == outputs[2]


def test_a_zip_archive(tmp_path: Path) -> None:
    archive = tmp_path / "data.zip"
    store = zarr.storage.ZipStore(str(archive), mode="w")
    make_v3(store)
    store.close()
    before = snapshot(archive)
    result = check(str(archive))
    assert result.returncode == 0, result.stdout + result.stderr
    assert summaries(result) == V3_SUMMARY
    assert snapshot(archive) == before


def test_a_corrupt_member_of_a_zip_archive(tmp_path: Path, example: Path) -> None:
    archive = tmp_path / "data.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for path in sorted(example.rglob("*")):
            if path.is_file():
                data = path.read_bytes()
                z.writestr(str(path.relative_to(example)), data[:3] if path.name == "1.0" else data)
    result = check(str(archive))
    assert result.returncode == 1
    assert [line.split(": ", 2)[1] for line in corrupt_lines(result)] == ["foo/bar/1.0"]


def zip_of(directory: Path, archive: Path) -> Path:
    with zipfile.ZipFile(archive, "w") as z:
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                z.writestr(str(path.relative_to(directory)), path.read_bytes())
    return archive


def test_members_a_mount_cannot_read_are_errors(tmp_path: Path, example: Path) -> None:
    """An encrypted member and one of a method zarrfs lacks (zstd) are stored chunks a
    mount answers with EIO: errors naming the key and why, not missing chunks."""
    archive = zip_of(example, tmp_path / "data.zip")
    patch_central(archive, "foo/bar/1.0", 8, b"\x01\x00")  # flags: encrypted
    patch_central(archive, "weather/temperature/0.0.0", 10, b"\x5d\x00")  # method 93
    result = check(str(archive))
    assert result.returncode == 1, result.stdout + result.stderr
    assert corrupt_lines(result) == [
        "corrupt: foo/bar/1.0: reading 'foo/bar/1.0': encrypted member",
        "corrupt: weather/temperature/0.0.0: reading 'weather/temperature/0.0.0': "
        "compression method 93 (zstd) is not supported",
    ]
    assert summaries(result)["/foo/bar"] == "/foo/bar: 8 chunks: 8 present, 0 missing, 1 corrupt"
    assert result.stdout.splitlines()[-1].startswith("FAILED: ")


def test_directory_keys_a_mount_cannot_read_are_errors(tmp_path: Path, example: Path) -> None:
    """A chunk key that is a symlink (even to a good chunk inside the store) or a FIFO
    is a stored chunk a mount answers with EIO: an error naming the key, not a
    missing chunk, and the check does not block on the FIFO."""
    array = example / "foo" / "bar"
    (array / "1.0").unlink()
    (array / "1.0").symlink_to(array / "0.0")
    (array / "2.0").unlink()
    os.mkfifo(array / "2.0")
    result = check(str(example))
    assert result.returncode == 1, result.stdout + result.stderr
    keys = sorted(line.split(": ", 2)[1] for line in corrupt_lines(result))
    assert keys == ["foo/bar/1.0", "foo/bar/2.0"], result.stdout
    assert summaries(result)["/foo/bar"] == "/foo/bar: 8 chunks: 8 present, 0 missing, 2 corrupt"


@pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning")
def test_http_consolidated_every_grid_position_is_asked_for(http_server: HttpServer) -> None:
    root = http_server.root / "v3.zarr"
    make_v3(root)
    zarr.consolidate_metadata(str(root))
    (root / "plain/c/3/0").write_bytes(b"garbage")
    result = check(f"{http_server.url}v3.zarr")
    assert result.returncode == 1, result.stdout + result.stderr
    assert [line.split(": ", 2)[1] for line in corrupt_lines(result)] == ["plain/c/3/0"]
    assert summaries(result) == {
        **V3_SUMMARY,
        "/plain": "/plain: 4 chunks: 4 present, 0 missing, 1 corrupt",
    }
    # HTTP cannot list: each position of the grids was asked for, missing ones too
    asked = {r.path.split("?")[0] for r in http_server.gets()}
    assert {"/v3.zarr/sparse/c/1", "/v3.zarr/sparse/c/3"} <= asked


def test_http_without_consolidated_metadata_checks_the_node_at_the_url(
    http_server: HttpServer,
) -> None:
    root = http_server.root / "v3.zarr"
    make_v3(root)
    result = check(f"{http_server.url}v3.zarr/sparse")
    assert result.returncode == 0, result.stdout + result.stderr
    assert summaries(result) == {"/": "/: 4 chunks: 1 present, 3 missing, 0 corrupt"}
    # Its root is a group, and nothing lists what is below it: nothing was checked.
    whole = check(f"{http_server.url}v3.zarr")
    assert whole.returncode == 1, whole.stdout + whole.stderr
    assert whole.stdout == ""
    assert whole.stderr.splitlines() == [
        f"zarrfs: error: {http_server.url}v3.zarr: nothing to check: it cannot be listed "
        "and holds no consolidated metadata (zarr.consolidate_metadata writes it)"
    ]


def test_a_store_without_arrays_is_one_error_line(tmp_path: Path) -> None:
    group = tmp_path / "empty.zarr"
    zarr.open_group(str(group), mode="w", zarr_format=2).create_group("sub")
    result = check(str(group))
    assert result.returncode == 1, result.stdout + result.stderr
    assert (result.stdout, result.stderr.splitlines()) == (
        "",
        [f"zarrfs: error: {group}: nothing to check: no arrays found"],
    )
    # metadata problems alone are reported as such, not as nothing found
    (group / "sub/.zgroup").write_text("{broken")
    broken = check(str(group))
    assert broken.returncode == 1
    assert broken.stdout.splitlines()[0].startswith("metadata: /sub: ")
    assert broken.stdout.splitlines()[-1].startswith("FAILED: 0 arrays")


def upload(bucket: Bucket, local: Path, prefix: str) -> None:
    for path in sorted(local.rglob("*")):
        if path.is_file():
            bucket.put(f"{prefix}/{path.relative_to(local)}", path.read_bytes())


@pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning")
@pytest.mark.parametrize("consolidate", [True, False], ids=["consolidated", "listed"])
def test_s3(s3_bucket: Bucket, tmp_path: Path, consolidate: bool) -> None:
    root = tmp_path / "v3.zarr"
    make_v3(root)
    if consolidate:
        zarr.consolidate_metadata(str(root))
    (root / "sparse/c/0").write_bytes(b"\x28\xb5\x2f\xfd broken zstd")
    upload(s3_bucket, root, "v3.zarr")
    keys = sorted(s3_bucket.keys())
    result = check(f"s3://{s3_bucket.name}/v3.zarr")
    assert result.returncode == 1, result.stdout + result.stderr
    assert [line.split(": ", 2)[1] for line in corrupt_lines(result)] == ["sparse/c/0"]
    assert summaries(result) == {
        **V3_SUMMARY,
        "/sparse": "/sparse: 4 chunks: 1 present, 3 missing, 1 corrupt",
    }
    assert sorted(s3_bucket.keys()) == keys


def test_a_missing_store_is_one_error_line(tmp_path: Path) -> None:
    result = check(str(tmp_path / "nope.zarr"))
    assert result.returncode == 1
    missing = tmp_path / "nope.zarr"
    assert result.stderr.splitlines() == [f"zarrfs: error: store '{missing}' does not exist"]


def test_an_array_whose_chunks_cannot_be_listed_is_a_metadata_problem(example: Path) -> None:
    """A listing that fails (a network error after the retries, a key no file name
    can hold) is reported for its array; the others are checked."""

    class FailingScan(DirectoryStore):
        def scan(self, prefix: str) -> Iterator[tuple[str, int]]:
            if prefix == "foo/bar":
                raise StoreError("listing 'foo/bar/': connection reset")
            return super().scan(prefix)

    store = ReadOnlyStore(FailingScan(str(example)))
    printed: list[str] = []
    report = check_store(store, walk(store), 2, progress=False, out=printed.append)
    assert printed == [
        "metadata: /foo/bar: cannot list its chunks: listing 'foo/bar/': connection reset"
    ]
    assert not report.ok and report.metadata == [printed[0].removeprefix("metadata: ")]
    assert sum(a.present for a in report.arrays) == 15  # the other arrays' chunks


def test_the_progress_bar_counts_chunks(example: Path) -> None:
    result = check("--progress", str(example))
    assert result.returncode == 0
    assert "23/23" in result.stderr, result.stderr
    quiet = check(str(example))  # not a terminal: no bar
    assert quiet.stderr == ""


def test_the_check_opens_the_store_read_only(example: Path) -> None:
    store = ReadOnlyStore(DirectoryStore(str(example)))
    assert store.get("foo/bar/.zarray") == (example / "foo/bar/.zarray").read_bytes()
    for write in (
        lambda: store.set("foo/bar/0.0", b""),
        lambda: store.delete("foo/bar/0.0"),
        lambda: store.commit([]),
        lambda: store.cleanup(0.0),
    ):
        with pytest.raises(ReadOnlyError):
            write()
