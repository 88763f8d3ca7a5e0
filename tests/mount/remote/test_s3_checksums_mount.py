"""End-to-end integrity on S3: chunks a mount stored carry their CRC-32C, so a
byte changed between the server and the daemon (a proxy flipping bytes of
uncompressed chunks, tests/support/fault_proxy.py) is EIO through a mount and a
corrupt chunk for ``zarrfs check``, never wrong elements; chunks another tool
wrote carry none, and read as they arrive (docs/semantics.md, "Integrity")."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zarr

from tests.support.cli import run_cli
from tests.support.fault_proxy import FaultProxy
from tests.support.mounting import mounted, read_range
from tests.support.servers import Bucket

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

PLAIN = np.arange(64 * 40, dtype="<f4").reshape(64, 40)
PAGE = 4096  # the kernel reads whole pages: the first holds chunk 0 (2560 bytes)
KEY = "plain/c/0/0"


def upload(bucket: Bucket, local: Path, prefix: str) -> None:
    for path in sorted(local.rglob("*")):
        if path.is_file():
            bucket.put(f"{prefix}/{path.relative_to(local)}", path.read_bytes())


@pytest.fixture
def store(
    s3_bucket: Bucket,
    tmp_path: Path,
    fault_proxy: type[FaultProxy],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[str, FaultProxy]]:
    """Uncompressed arrays uploaded by boto3; then ``plain`` and ``sharded`` written
    again through a read-write mount (their objects now carry the CRC-32C), ``other``
    not. Every request after that goes through the proxy."""
    local = tmp_path / "local"
    group = zarr.open_group(str(local), mode="w")
    for name in ("plain", "other", "sharded"):
        shards = (32, 40) if name == "sharded" else None  # 2 inner chunks, a 36-byte index
        array = group.create_array(
            name,
            shape=PLAIN.shape,
            chunks=(16, 40),
            shards=shards,
            dtype="<f4",
            compressors=None,
        )
        array[...] = PLAIN - 1
    upload(s3_bucket, local, "s.zarr")
    host, port = s3_bucket.endpoint.removeprefix("http://").rstrip("/").split(":")
    proxy = fault_proxy((host, int(port)), http=True)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url.rstrip("/"))  # the daemons inherit it
    url = f"s3://{s3_bucket.name}/s.zarr"
    with mounted(url) as m:
        (m.path / "plain" / "array.raw").write_bytes(PLAIN.tobytes())
        (m.path / "sharded" / "array.raw").write_bytes(PLAIN.tobytes())
    yield url, proxy


def test_a_changed_byte_is_eio_through_a_mount(store: tuple[str, FaultProxy]) -> None:
    url, proxy = store
    proxy.flip(KEY, times=None, at=100)
    with mounted(url, "--read-only") as m:
        raw = m.path / "plain" / "array.raw"
        with pytest.raises(OSError) as info:
            raw.read_bytes()
        assert info.value.errno == errno.EIO
        # the other chunks read, and right (from the first page without chunk 0)
        rest = read_range(raw, PAGE, PLAIN.nbytes - PAGE)
        assert rest == PLAIN.tobytes()[PAGE:]
        proxy.passthrough()
        assert raw.read_bytes() == PLAIN.tobytes()  # nothing remembered
    lines = [line for line in m.log().splitlines() if "checksum" in line]
    assert lines and all(f"s.zarr/{KEY}: the bytes received do not match" in x for x in lines)


def test_check_names_the_chunk(store: tuple[str, FaultProxy]) -> None:
    url, proxy = store
    result = run_cli("check", url, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    proxy.flip(KEY, times=None, at=100)
    result = run_cli("check", url, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    corrupt = [line for line in result.stdout.splitlines() if line.startswith("corrupt: ")]
    assert len(corrupt) == 1
    assert corrupt[0].startswith(f"corrupt: {KEY}: reading {url}/{KEY}: the bytes received")
    assert "(crc32c, x-amz-meta-zarrfs-crc32c) (2 tries)" in corrupt[0]
    assert result.stdout.splitlines()[-1].startswith("FAILED:")


def test_chunks_another_tool_wrote_are_not_checked(store: tuple[str, FaultProxy]) -> None:
    """The known limit: no checksum travels with them, and an uncompressed chunk
    decodes whatever arrives; ``zarrfs check`` cannot tell either."""
    url, proxy = store
    proxy.flip("other/c/0/0", times=None, at=3)  # the high byte of element 0
    with mounted(url, "--read-only") as m:
        read = np.frombuffer((m.path / "other" / "array.raw").read_bytes(), dtype="<f4")
        assert read[0] != PLAIN[0, 0] - 1
        np.testing.assert_array_equal(read[1:], (PLAIN - 1).ravel()[1:])
    result = run_cli("check", url, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert os.environ["AWS_ENDPOINT_URL"] == proxy.url.rstrip("/")


def test_a_shard_is_read_by_ranges_its_index_checked_by_its_own_crc32c(
    store: tuple[str, FaultProxy],
) -> None:
    """The CRC-32C of a shard object cannot check the ranges read of it: a changed
    byte of its index is caught by the index's ``crc32c`` codec (zarr-python's
    default), one of an uncompressed inner chunk by nothing."""
    url, proxy = store
    proxy.flip("sharded/c/0/0", times=None, at=0)  # the index's first byte too
    with mounted(url, "--read-only") as m:
        with pytest.raises(OSError) as info:
            (m.path / "sharded" / "array.raw").read_bytes()
        assert info.value.errno == errno.EIO
    assert "shard index" in run_cli("check", url, timeout=120).stdout
    proxy.flip("sharded/c/0/0", times=None, at=100)  # inner chunks only (the index is 36 bytes)
    with mounted(url, "--read-only") as m:
        read = np.frombuffer((m.path / "sharded" / "array.raw").read_bytes(), dtype="<f4")
        assert not np.array_equal(read, PLAIN.ravel())
    assert run_cli("check", url, timeout=120).returncode == 0
