"""A Google Cloud Storage bucket (the fake of tests/support/gcs_server.py) and an
Azure container (Azurite) mounted for real: values read equal zarr-python's, writes
through the mount are read back by zarr-python 3 and tensorstore, and by the mount
once mounted again, each value carrying its CRC-32C; the writer lease is held while
mounted read-write; a disk cache serves a second mount and revalidates its entries."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import google_crc32c
import numpy as np
import pytest
import zarr

from tests.support.cli import assert_one_error_line, run_cli
from tests.support.clouds import Cloud
from tests.support.mounting import mounted
from tests.support.oracles import assert_store_holds
from tests.support.stores import plain_and_sharded
from zarrfs.stores.s3_lease import LEASE_KEY

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

PLAIN = np.arange(60 * 40, dtype="<f4").reshape(60, 40)
SHARDED = np.arange(64 * 48, dtype="<i4").reshape(64, 48)


def upload(cloud: Cloud, local: Path, prefix: str) -> None:
    for path in sorted(local.rglob("*")):
        if path.is_file():
            cloud.put(f"{prefix}/{path.relative_to(local)}", path.read_bytes())


def download(cloud: Cloud, prefix: str, local: Path) -> Path:
    for key in cloud.keys(prefix + "/"):
        target = local / key[len(prefix) + 1 :]
        target.parent.mkdir(parents=True, exist_ok=True)
        value = cloud.get(key)
        assert value is not None
        target.write_bytes(value)
    return local


def test_mount_read_write_and_read_back(cloud: Cloud, tmp_path: Path) -> None:
    local = tmp_path / "local"
    group = zarr.open_group(str(local), mode="w")
    group.create_array("plain", shape=PLAIN.shape, chunks=(16, 40), dtype="<f4")[...] = PLAIN
    group.create_array(
        "sharded", shape=SHARDED.shape, chunks=(8, 12), shards=(32, 24), dtype="<i4", fill_value=-1
    )[...] = SHARDED
    upload(cloud, local, "s.zarr")
    url = cloud.url("s.zarr")
    by_zarr = zarr.open_group(str(local), mode="r")
    plain, sharded = PLAIN + 0.5, SHARDED.copy()
    sharded[40, 5] = 7
    with mounted(url) as m:
        names = [".zarrfs", "group.nc", "plain", "sharded", "zarr.json"]
        assert sorted(os.listdir(m.path)) == names
        assert cloud.get(f"s.zarr/{LEASE_KEY}") is not None  # held while mounted read-write
        assert (m.path / "plain" / "array.raw").read_bytes() == by_zarr["plain"][...].tobytes()
        assert (m.path / "sharded" / "array.raw").read_bytes() == SHARDED.tobytes()
        (m.path / "plain" / "array.raw").write_bytes(plain.tobytes())
        fd = os.open(m.path / "sharded" / "array.raw", os.O_RDWR)
        try:
            os.pwrite(fd, np.int32(7).tobytes(), (40 * 48 + 5) * 4)
            os.fsync(fd)
        finally:
            os.close(fd)
    assert cloud.get(f"s.zarr/{LEASE_KEY}") is None  # released at umount
    chunk = cloud.get("s.zarr/plain/c/0/0")
    assert chunk is not None
    crc = base64.b64encode(google_crc32c.value(chunk).to_bytes(4, "big")).decode()
    name = "zarrfs_crc32c" if url.startswith("az://") else "zarrfs-crc32c"
    assert cloud.metadata("s.zarr/plain/c/0/0") == {name: crc}
    stored = download(cloud, "s.zarr", tmp_path / "back")
    assert_store_holds(stored / "plain", plain)
    assert_store_holds(stored / "sharded", sharded)
    with mounted(url, "--read-only") as again:
        assert (again.path / "plain" / "array.raw").read_bytes() == plain.tobytes()
        assert (again.path / "sharded" / "array.raw").read_bytes() == sharded.tobytes()


def test_a_missing_bucket_is_refused_in_one_line(cloud: Cloud, tmp_path: Path) -> None:
    """Detached too: the daemon opens the store after its fork and reports the
    failure to the command over its pipe."""
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    scheme, word = ("gs", "bucket") if cloud.url().startswith("gs") else ("az", "container")
    url = f"{scheme}://no-such-{word}-here/x.zarr"
    for detach in ([], ["-f"]):
        result = run_cli("mount", *detach, url, str(mountpoint))
        assert_one_error_line(result, f"{scheme}://no-such-{word}-here: {word} does not exist")
        assert not os.path.ismount(mountpoint)


def test_a_disk_cache_serves_a_second_mount_and_revalidates(cloud: Cloud, tmp_path: Path) -> None:
    """The second mount reads every value from the cache (no miss); entries older
    than the TTL are revalidated (GCS: the generation compared, Azure: a 304), and
    found unchanged."""
    local = tmp_path / "local"
    expected = plain_and_sharded(local, consolidate=True)
    upload(cloud, local, "s.zarr")
    cache = tmp_path / "cache"
    options = ("--read-only", "--disk-cache", str(cache))

    def read_all(mount: Path) -> dict:
        for name, data in expected.items():
            assert (mount / name / "array.raw").read_bytes() == data.tobytes()
        return dict(json.loads((mount / ".zarrfs" / "stats").read_text()))["disk_cache"]

    with mounted(cloud.url("s.zarr"), *options) as m:
        assert read_all(m.path)["misses"] > 0
    with mounted(cloud.url("s.zarr"), *options) as m:
        stats = read_all(m.path)
    assert stats["hits"] > 0 and stats["misses"] == 0
    for path in (cache / "objects").rglob("*"):
        if path.is_file():  # validated longer ago than the TTL
            st = path.stat()
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 120 * 10**9))
    with mounted(cloud.url("s.zarr"), *options) as m:
        stats = read_all(m.path)
    assert stats["unchanged"] > 0
