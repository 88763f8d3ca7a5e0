"""``--disk-cache`` on real mounts of S3 (moto behind a proxy that logs requests)
and HTTP: a second mount reads the same data with no chunk GET at all, and equal
values (zarr-python's); a cache file damaged on disk is never served; the cache
directory and its files are private."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest
import zarr

from tests.support.fault_proxy import FaultProxy
from tests.support.http_server import HttpServer
from tests.support.mounting import mounted
from tests.support.servers import Bucket
from tests.support.stores import plain_and_sharded

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

ARRAYS = ("plain", "sharded")


def oracle(local: Path) -> dict[str, np.ndarray]:
    return {name: zarr.open_array(str(local / name), mode="r")[...] for name in ARRAYS}


def read_all(mount: Path, expected: dict[str, np.ndarray]) -> dict:
    for name, data in expected.items():
        raw = (mount / name / "array.raw").read_bytes()
        np.testing.assert_array_equal(
            np.frombuffer(raw, dtype=data.dtype).reshape(data.shape), data
        )
    return dict(json.loads((mount / ".zarrfs" / "stats").read_text()))


def damage_every_file(cache: Path) -> int:
    files = [p for p in (cache / "objects").rglob("*") if p.is_file()]
    for n, path in enumerate(files):
        data = bytearray(path.read_bytes())
        if n % 2:
            data[len(data) // 2] ^= 0xFF
            path.write_bytes(bytes(data))
        else:
            path.write_bytes(bytes(data[: len(data) // 2]))
    return len(files)


def upload(bucket: Bucket, local: Path, prefix: str) -> None:
    for path in sorted(local.rglob("*")):
        if path.is_file():
            bucket.put(f"{prefix}/{path.relative_to(local)}", path.read_bytes())


def chunk_gets(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("GET ") and "/c/" in line]


def test_s3_a_second_mount_sends_no_chunk_get(
    s3_bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = tmp_path / "local"
    plain_and_sharded(local, consolidate=True)
    upload(s3_bucket, local, "s.zarr")
    expected = oracle(local)
    cache = tmp_path / "cache"
    host, port = s3_bucket.endpoint.removeprefix("http://").split(":")
    with FaultProxy((host, int(port)), http=True) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url.rstrip("/"))
        url = f"s3://{s3_bucket.name}/s.zarr"
        options = ("--read-only", "--disk-cache", str(cache), "-o", "disk_cache_size=64M")
        with mounted(url, *options) as m:
            read_all(m.path, expected)
        assert chunk_gets(proxy.request_lines)
        proxy.request_lines.clear()
        with mounted(url, *options) as m:
            stats = read_all(m.path, expected)
        assert chunk_gets(proxy.request_lines) == []
        assert stats["disk_cache"]["hits"] > 0 and stats["disk_cache"]["misses"] == 0
        # every file damaged (cut or flipped): read again from S3, never served
        assert damage_every_file(cache) > 0
        proxy.request_lines.clear()
        with mounted(url, *options) as m:
            stats = read_all(m.path, expected)
        assert chunk_gets(proxy.request_lines)
        assert stats["disk_cache"]["dropped"] > 0
    assert "dropped the entry" in m.log()


def test_http_a_second_mount_sends_no_chunk_get(http_server: HttpServer, tmp_path: Path) -> None:
    local = http_server.root / "s.zarr"
    plain_and_sharded(local, consolidate=True)
    expected = oracle(local)
    cache = tmp_path / "cache"
    with mounted(f"{http_server.url}s.zarr", "-o", f"disk_cache={cache},disk_cache_size=1G") as m:
        read_all(m.path, expected)
    assert [r for r in http_server.gets() if "/c/" in r.path]
    http_server.reset()
    with mounted(f"{http_server.url}s.zarr", "--disk-cache", str(cache)) as m:
        read_all(m.path, expected)
    assert [r for r in http_server.gets() if "/c/" in r.path] == []
    assert damage_every_file(cache) > 0
    with mounted(f"{http_server.url}s.zarr", "--disk-cache", str(cache)) as m:
        read_all(m.path, expected)
    for path in [cache, *cache.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))


def test_http_changed_values_are_revalidated_after_the_ttl(
    http_server: HttpServer, tmp_path: Path
) -> None:
    """Entries validated longer ago than the TTL are revalidated: a 304 where nothing
    changed, and no chunk's bytes are sent again."""
    local = http_server.root / "s.zarr"
    plain_and_sharded(local, consolidate=True)
    expected = oracle(local)
    cache = tmp_path / "cache"
    with mounted(f"{http_server.url}s.zarr", "--disk-cache", str(cache)) as m:
        read_all(m.path, expected)
    http_server.reset()
    # entries older than the TTL (60 s): their validation stamps moved back
    for path in (cache / "objects").rglob("*"):
        if path.is_file():
            st = path.stat()
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 120 * 10**9))
    with mounted(f"{http_server.url}s.zarr", "--disk-cache", str(cache)) as m:
        stats = read_all(m.path, expected)
    # versions by HEAD (no body), values by conditional GETs: no chunk's bytes sent again
    requests = [r for r in http_server.settled() if "/c/" in r.path]
    assert {r.status for r in requests if r.method == "GET"} == {304}
    assert {r.method for r in requests if r.status != 304} <= {"HEAD"}
    assert stats["disk_cache"]["unchanged"] > 0
