"""An S3 mount (moto on loopback) behind a proxy that adds 0.3 s to every request:
a flush of N chunks sends their PUTs at once, so it takes about max(N / 32, 1)
round trips, not N; a PUT failing among them fails the fsync with EIO and the
next fsync stores the same bytes."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from tests.support.fault_proxy import FaultProxy
from tests.support.mounting import mounted
from tests.support.servers import Bucket

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

CHUNKS, CHUNK_ROWS, COLUMNS = 24, 4, 64
LATENCY = 0.3  # seconds the proxy adds to every request


def upload_empty_array(bucket: Bucket, local: Path) -> None:
    """A v3 array of CHUNKS chunks, none stored (all fill value), into the bucket."""
    rows = CHUNKS * CHUNK_ROWS
    zarr.create_array(str(local), shape=(rows, COLUMNS), chunks=(CHUNK_ROWS, COLUMNS), dtype="<f4")
    for path in sorted(local.rglob("*")):
        if path.is_file():
            bucket.put(f"a.zarr/{path.relative_to(local)}", path.read_bytes())


def stored(bucket: Bucket, local: Path) -> np.ndarray:
    """The array as zarr-python reads it from the bucket's objects."""
    for key in bucket.keys("a.zarr/"):
        target = local / key.removeprefix("a.zarr/")
        target.parent.mkdir(parents=True, exist_ok=True)
        body = bucket.client.get_object(Bucket=bucket.name, Key=key)["Body"].read()
        target.write_bytes(body)
    return np.asarray(zarr.open_array(str(local), mode="r")[...])


def write_backwards(fd: int, values: np.ndarray) -> None:
    """A pwrite per chunk, the last first: none continues the one before, so nothing
    is stored behind the writer and every chunk waits for the fsync."""
    raw = values.tobytes()
    size = CHUNK_ROWS * COLUMNS * 4
    for offset in range((CHUNKS - 1) * size, -1, -size):
        os.pwrite(fd, raw[offset : offset + size], offset)


def timed_fsync(fd: int) -> float:
    started = time.monotonic()
    os.fsync(fd)
    return time.monotonic() - started


def test_a_flush_of_n_chunks_takes_a_few_round_trips_not_n(
    s3_bucket: Bucket, tmp_path: Path
) -> None:
    upload_empty_array(s3_bucket, tmp_path / "local")
    host, port = s3_bucket.endpoint.removeprefix("http://").rstrip("/").split(":")
    first = np.arange(CHUNKS * CHUNK_ROWS * COLUMNS, dtype="<f4").reshape(-1, COLUMNS) + 1
    second = first * 3
    sequential = CHUNKS * LATENCY
    with FaultProxy((host, int(port)), http=True) as proxy:
        os.environ["AWS_ENDPOINT_URL"] = proxy.url  # the daemon inherits it
        with mounted("s3://" + s3_bucket.name + "/a.zarr", "--flush-interval", "3600") as m:
            fd = os.open(m.path / "array.raw", os.O_RDWR)
            try:
                proxy.delay = LATENCY
                write_backwards(fd, first)
                created = timed_fsync(fd)  # CHUNKS new objects: one PUT each
                write_backwards(fd, second)
                replaced = timed_fsync(fd)  # each conditional on the ETag its PUT answered
                proxy.delay = 0.0
            finally:
                os.close(fd)
    for elapsed in (created, replaced):
        assert elapsed < sequential / 2, f"{elapsed:.2f} s for {CHUNKS} PUTs of {LATENCY} s"
    np.testing.assert_array_equal(stored(s3_bucket, tmp_path / "back"), second)


def test_a_put_failing_among_many_fails_the_fsync_and_loses_nothing(
    s3_bucket: Bucket, tmp_path: Path
) -> None:
    upload_empty_array(s3_bucket, tmp_path / "local")
    host, port = s3_bucket.endpoint.removeprefix("http://").rstrip("/").split(":")
    new = np.full((CHUNKS * CHUNK_ROWS, COLUMNS), 2.5, dtype="<f4")
    with FaultProxy((host, int(port)), http=True) as proxy:
        os.environ["AWS_ENDPOINT_URL"] = proxy.url
        with mounted("s3://" + s3_bucket.name + "/a.zarr", "--flush-interval", "3600") as m:
            fd = os.open(m.path / "array.raw", os.O_RDWR)
            try:
                proxy.delay = LATENCY
                write_backwards(fd, new)
                proxy.fail(1000)  # more than every PUT's retries
                with pytest.raises(OSError) as info:
                    os.fsync(fd)
                assert info.value.errno == errno.EIO
                proxy.passthrough()
                proxy.delay = LATENCY
                assert os.pread(fd, new.nbytes, 0) == new.tobytes(), "nothing lost"
                assert timed_fsync(fd) < CHUNKS * LATENCY / 2  # the same bytes, stored now
                proxy.delay = 0.0
            finally:
                os.close(fd)
    np.testing.assert_array_equal(stored(s3_bucket, tmp_path / "back"), new)
