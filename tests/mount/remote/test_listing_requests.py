"""A consolidated store over the network is listed in at most 2 requests after the root
probe: mount and ``ls -R`` of 1 000 arrays send the probe of the root ``zarr.json``
(for a v2 store) and one GET of the document that lists the hierarchy, and nothing
else — no HEAD for its time, no document of any array. Counted on S3 (moto behind a
proxy that logs requests) and on HTTP (the test server's own log)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.consolidated import hierarchy_entries, write_store, write_v2_hierarchy
from tests.support.fault_proxy import FaultProxy
from tests.support.http_server import HttpServer
from tests.support.mounting import mounted
from tests.support.servers import Bucket

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

ARRAYS = 1000


def _consolidated(root: Path, zarr_format: int) -> list[str]:
    """A 1 000-array consolidated store; the keys a consolidated reader needs."""
    if zarr_format == 2:
        write_v2_hierarchy(root, groups=10, arrays=ARRAYS // 10)
        return [".zmetadata"]
    write_store(root, hierarchy_entries(groups=10, arrays=ARRAYS // 10))
    return ["zarr.json"]


def _ls_r(path: Path) -> str:
    listed = subprocess.run(["ls", "-R", str(path)], capture_output=True, text=True, check=True)
    return listed.stdout


def _count_arrays(listing: str) -> int:
    return listing.count("array.raw")


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_s3_a_consolidated_bucket_is_listed_in_two_requests(
    s3_bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zarr_format: int
) -> None:
    local = tmp_path / "local"
    needed = _consolidated(local, zarr_format)
    for key in needed:  # a consolidated reader reads these alone
        s3_bucket.put(f"s.zarr/{key}", (local / key).read_bytes())
    host, port = s3_bucket.endpoint.removeprefix("http://").split(":")
    with FaultProxy((host, int(port)), http=True) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url.rstrip("/"))
        url = f"s3://{s3_bucket.name}/s.zarr"
        with mounted(url, "--read-only", "--metadata-ttl", "600") as m:
            mounting = list(proxy.request_lines)
            proxy.request_lines.clear()
            assert _count_arrays(_ls_r(m.path)) == ARRAYS
            assert proxy.request_lines == [], proxy.request_lines  # ls -R: none at all
    # Mounting: the check that the bucket answers (one listing of the prefix), the
    # probe of zarr.json (v2 only), one GET of the listing document: 3 at most.
    probe = [] if zarr_format == 3 else ["GET zarr.json"]
    expected = ["LIST", *probe, *(f"GET {key}" for key in needed)]
    assert [_request(line) for line in mounting] == expected, mounting
    assert len(mounting) <= 3


def _request(line: str) -> str:
    """"GET /bucket/s.zarr/zarr.json HTTP/1.1" as "GET zarr.json"; a listing as LIST."""
    method, target, _ = line.split(" ", 2)
    if "list-type=" in target:
        return "LIST"
    return f"{method} {target.split('/s.zarr/', 1)[-1]}"


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_http_a_consolidated_store_is_listed_in_two_requests(
    http_server: HttpServer, zarr_format: int
) -> None:
    needed = _consolidated(http_server.root / "s.zarr", zarr_format)
    url = f"{http_server.url}s.zarr"
    http_server.reset()
    with mounted(url, "--read-only", "--metadata-ttl", "600") as m:
        assert _count_arrays(_ls_r(m.path)) == ARRAYS
    sent = [(r.method, r.path.split("/s.zarr/")[-1]) for r in http_server.settled()]
    probe = [] if zarr_format == 3 else [("GET", "zarr.json")]
    assert [s for s in sent if s[1]] == probe + [("GET", key) for key in needed], sent
    assert json.loads((http_server.root / "s.zarr" / needed[0]).read_text())
