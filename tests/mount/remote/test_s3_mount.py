"""An S3 bucket (moto on loopback, tests/support/servers.py) mounted for real: read-write,
listed from consolidated metadata or lazily, writes stored as one PUT per chunk
or shard and checked with zarr-python 3 and tensorstore; a PUT failing at fsync
returns the error, keeps the data, and a later fsync stores it; a missing bucket
is refused in one line."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from tests.support.cli import assert_one_error_line, run_cli
from tests.support.fault_proxy import FaultProxy
from tests.support.mounting import mounted
from tests.support.oracles import assert_store_holds
from tests.support.servers import Bucket

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

PLAIN = np.arange(60 * 40, dtype="<f4").reshape(60, 40)
SHARDED = np.arange(64 * 48, dtype="<i4").reshape(64, 48)


def upload(bucket: Bucket, local: Path, prefix: str) -> None:
    for path in sorted(local.rglob("*")):
        if path.is_file():
            bucket.put(f"{prefix}/{path.relative_to(local)}", path.read_bytes())


def download(bucket: Bucket, prefix: str, local: Path) -> Path:
    for key in bucket.keys(prefix + "/"):
        target = local / key[len(prefix) + 1 :]
        target.parent.mkdir(parents=True, exist_ok=True)
        body = bucket.client.get_object(Bucket=bucket.name, Key=key)["Body"].read()
        target.write_bytes(body)
    return local


def make_store(root: Path, *, consolidate: bool) -> None:
    group = zarr.open_group(str(root), mode="w")
    group.create_array("plain", shape=PLAIN.shape, chunks=(16, 40), dtype="<f4")[...] = PLAIN
    group.create_array(
        "sharded", shape=SHARDED.shape, chunks=(8, 12), shards=(32, 24), dtype="<i4", fill_value=-1
    )[...] = SHARDED
    if consolidate:
        zarr.consolidate_metadata(str(root))


@pytest.mark.parametrize("consolidate", [True, False], ids=["consolidated", "listed"])
def test_read_and_write_a_bucket(s3_bucket: Bucket, tmp_path: Path, consolidate: bool) -> None:
    make_store(tmp_path / "local", consolidate=consolidate)
    upload(s3_bucket, tmp_path / "local", "s.zarr")
    plain, sharded = PLAIN.copy(), SHARDED.copy()
    with mounted(f"s3://{s3_bucket.name}/s.zarr") as m:
        names = [".zarrfs", "group.nc", "plain", "sharded", "zarr.json"]
        assert sorted(os.listdir(m.path)) == names
        assert (m.path / "plain" / "array.raw").read_bytes() == PLAIN.tobytes()
        assert (m.path / "sharded" / "array.raw").read_bytes() == SHARDED.tobytes()
        fd = os.open(m.path / "sharded" / "array.raw", os.O_RDWR)
        try:
            sharded[0:8, :] = -1  # inner chunk row 0 becomes fill: left out of its shards
            sharded[40, 5] = 7
            os.pwrite(fd, sharded[0:8].tobytes(), 0)
            os.pwrite(fd, np.int32(7).tobytes(), (40 * 48 + 5) * 4)
            os.fsync(fd)
        finally:
            os.close(fd)
        plain[:] = 2.5
        (m.path / "plain" / "array.raw").write_bytes(plain.tobytes())
    stored = download(s3_bucket, "s.zarr", tmp_path / "back")
    assert_store_holds(stored / "plain", plain)
    assert_store_holds(stored / "sharded", sharded)


def test_a_put_failing_at_fsync_keeps_the_data(s3_bucket: Bucket, tmp_path: Path) -> None:
    make_store(tmp_path / "local", consolidate=True)
    upload(s3_bucket, tmp_path / "local", "s.zarr")
    host, port = s3_bucket.endpoint.removeprefix("http://").split(":")
    new = PLAIN + 1
    with FaultProxy((host, int(port.rstrip("/"))), http=True) as proxy:
        os.environ["AWS_ENDPOINT_URL"] = proxy.url  # the daemon inherits it
        with mounted(f"s3://{s3_bucket.name}/s.zarr") as m:
            fd = os.open(m.path / "plain" / "array.raw", os.O_RDWR)
            try:
                os.pwrite(fd, new.tobytes(), 0)
                proxy.fail(1000)  # every request: more than the retries
                with pytest.raises(OSError) as info:
                    os.fsync(fd)
                assert info.value.errno == errno.EIO
                proxy.passthrough()
                os.fsync(fd)  # the same bytes, stored now
            finally:
                os.close(fd)
    stored = download(s3_bucket, "s.zarr", tmp_path / "back")
    assert_store_holds(stored / "plain", new)


def test_a_missing_bucket_is_refused_in_one_line(s3_bucket: Bucket, tmp_path: Path) -> None:
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    for detach in ([], ["-f"]):
        result = run_cli("mount", *detach, "s3://no-such-bucket-here/x.zarr", str(mountpoint))
        assert_one_error_line(result, "no-such-bucket-here")
        assert not os.path.ismount(mountpoint)


def _write_and_append(writer: Path, more: np.ndarray) -> None:
    raw = writer / "plain" / "array.raw"
    with open(raw, "r+b") as f:
        f.write(np.zeros(40, "<f4").tobytes())  # row 0 of chunk 0
        f.seek(0, os.SEEK_END)
        f.write(more.tobytes())  # 4 more rows: a new shape
        os.fsync(f.fileno())


def test_within_the_ttl_another_mount_serves_what_it_has_seen(
    s3_bucket: Bucket, tmp_path: Path
) -> None:
    """Two mounts of one bucket stand for two machines: the reader keeps what it has
    seen for --metadata-ttl; a mount made after the change sees it at once."""
    make_store(tmp_path / "local", consolidate=False)
    upload(s3_bucket, tmp_path / "local", "s.zarr")
    url = f"s3://{s3_bucket.name}/s.zarr"
    more = np.full((4, 40), 9, dtype="<f4")
    with mounted(url, "--read-only", "--metadata-ttl", "600") as other:
        seen = other.path / "plain" / "array.raw"
        assert seen.read_bytes() == PLAIN.tobytes()
        with mounted(url) as writer:
            _write_and_append(writer.path, more)
        assert os.path.getsize(seen) == PLAIN.nbytes  # the shape it has seen
        assert seen.read_bytes() == PLAIN.tobytes()  # chunk 0 as first read
    with mounted(url, "--read-only") as again:
        new = np.concatenate([PLAIN, more])
        new[0] = 0
        assert (again.path / "plain" / "array.raw").read_bytes() == new.tobytes()


def test_another_machines_writes_are_seen_after_the_ttl(s3_bucket: Bucket, tmp_path: Path) -> None:
    """Close-to-open across machines: a reader mounted while another mount writes
    sees the new shape and the new chunks at its next open after the TTL, and at
    once after .zarrfs/refresh."""
    make_store(tmp_path / "local", consolidate=False)
    upload(s3_bucket, tmp_path / "local", "s.zarr")
    url = f"s3://{s3_bucket.name}/s.zarr"
    more = np.full((4, 40), 9, dtype="<f4")
    new = np.concatenate([PLAIN, more])
    new[0] = 0
    with mounted(url, "--read-only", "--metadata-ttl", "0.5") as reader:
        seen = reader.path / "plain" / "array.raw"
        assert seen.read_bytes() == PLAIN.tobytes()
        with mounted(url) as writer:
            _write_and_append(writer.path, more)
            time.sleep(0.8)
            assert os.path.getsize(seen) == new.nbytes
            assert seen.read_bytes() == new.tobytes()
    with mounted(url, "--read-only", "--metadata-ttl", "600") as reader:
        seen = reader.path / "plain" / "array.raw"
        assert seen.read_bytes() == new.tobytes()
        with mounted(url) as writer, open(writer.path / "plain" / "array.raw", "r+b") as f:
            f.write(np.full(40, 5, "<f4").tobytes())
            os.fsync(f.fileno())
        assert seen.read_bytes() == new.tobytes()  # within the TTL
        assert (reader.path / ".zarrfs" / "refresh").read_bytes() == b""
        new[0] = 5
        assert seen.read_bytes() == new.tobytes()
