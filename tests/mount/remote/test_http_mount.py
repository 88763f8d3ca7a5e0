"""A store served over HTTP (tests/support/http_server.py, loopback), mounted for real:
read-only without being told, listed from its consolidated metadata, sharded
arrays read by ranges; without consolidated metadata only the node at the URL is
shown, with a log line saying how to consolidate; nothing listening is refused
in one line."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

import numpy as np
import pytest

from tests.support.cli import assert_one_error_line, run_cli
from tests.support.fault_proxy import FaultProxy
from tests.support.http_server import HttpServer
from tests.support.mounting import mounted
from tests.support.stores import PLAIN_BYTES, plain_and_sharded


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_consolidated_store_over_http(http_server: HttpServer) -> None:
    arrays = plain_and_sharded(http_server.root / "s.zarr", consolidate=True)
    with mounted(f"{http_server.url}/s.zarr") as m:
        names = [".zarrfs", "group.nc", "plain", "sharded", "zarr.json"]
        assert sorted(os.listdir(m.path)) == names
        for name, data in arrays.items():
            assert (m.path / name / "array.raw").read_bytes() == data.tobytes()
        with pytest.raises(OSError):
            (m.path / "plain" / "array.raw").write_bytes(b"x")
    log = m.log()
    assert "read-only" in log
    # a shard is never fetched whole: every GET of one carries a Range
    shard_gets = [r for r in http_server.settled() if "/sharded/c/" in r.path and r.method == "GET"]
    assert shard_gets and all(r.range for r in shard_gets), shard_gets


def test_without_consolidated_metadata_only_the_root_node_is_shown(
    http_server: HttpServer,
) -> None:
    plain_and_sharded(http_server.root / "s.zarr", consolidate=False)
    with mounted(f"{http_server.url}/s.zarr") as m:
        assert os.listdir(m.path) == [".zarrfs", "zarr.json"]
    assert "consolidate" in m.log()
    with mounted(f"{http_server.url}/s.zarr/plain") as m:
        data = np.arange(60 * 40, dtype="<f4")
        assert (m.path / "array.raw").read_bytes() == data.tobytes()


def test_nothing_listening_is_refused_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    for detach in ([], ["-f"]):
        result = run_cli("mount", *detach, f"http://127.0.0.1:{port}/x.zarr", str(mountpoint))
        assert_one_error_line(result, "127.0.0.1")
        assert not os.path.ismount(mountpoint)


def test_a_server_cutting_every_connection_is_eio_then_recovers(http_server: HttpServer) -> None:
    plain_and_sharded(http_server.root / "s.zarr", consolidate=True)
    with (
        FaultProxy(("127.0.0.1", http_server.port), http=True) as proxy,
        mounted(f"{proxy.url}s.zarr") as m,
    ):
        raw = m.path / "plain" / "array.raw"
        assert os.path.getsize(raw) == PLAIN_BYTES
        proxy.cut(after=10, times=None)  # every response, past every retry
        with pytest.raises(OSError) as info, open(raw, "rb") as f:
            f.read()
        assert info.value.errno == errno.EIO
        proxy.passthrough()
        assert raw.read_bytes() == np.arange(60 * 40, dtype="<f4").tobytes()
