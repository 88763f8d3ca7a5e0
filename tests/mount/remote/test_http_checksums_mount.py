"""End-to-end integrity over HTTP: a server that sends Content-MD5 with each chunk,
a proxy that flips a byte of one uncompressed chunk on the way: EIO through a
mount and a corrupt chunk for ``zarrfs check``, never wrong elements."""

from __future__ import annotations

import base64
import errno
import hashlib

import numpy as np
import pytest
import zarr

from tests.support.cli import run_cli
from tests.support.fault_proxy import FaultProxy
from tests.support.http_server import HttpServer
from tests.support.mounting import mounted

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

PLAIN = np.arange(64 * 40, dtype="<f4").reshape(64, 40)
KEY = "plain/c/0/0"


def test_a_changed_byte_is_eio_and_corrupt_for_check(
    http_server: HttpServer, fault_proxy: type[FaultProxy], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZARRFS_HTTP_RETRY_BUDGET", "3")  # the daemons and check inherit it
    root = http_server.root / "s.zarr"
    group = zarr.open_group(str(root), mode="w")
    array = group.create_array(
        "plain", shape=PLAIN.shape, chunks=(16, 40), dtype="<f4", compressors=None
    )
    array[...] = PLAIN
    zarr.consolidate_metadata(str(root))
    for path in sorted((root / "plain" / "c").rglob("*")):
        if path.is_file():
            md5 = base64.b64encode(hashlib.md5(path.read_bytes()).digest()).decode()
            http_server.fields[f"/s.zarr/{path.relative_to(root)}"] = [("Content-MD5", md5)]
    proxy = fault_proxy(("127.0.0.1", http_server.port), http=True)
    url = f"{proxy.url}s.zarr"
    proxy.flip(f"/s.zarr/{KEY}", times=None, at=100)
    with mounted(url) as m:
        with pytest.raises(OSError) as info:
            (m.path / "plain" / "array.raw").read_bytes()
        assert info.value.errno == errno.EIO
        proxy.passthrough()
        assert (m.path / "plain" / "array.raw").read_bytes() == PLAIN.tobytes()
    assert "the bytes received do not match the value's checksum (md5, content-md5)" in m.log()
    proxy.flip(f"/s.zarr/{KEY}", times=None, at=100)
    result = run_cli("check", url, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    corrupt = [line for line in result.stdout.splitlines() if line.startswith("corrupt: ")]
    assert len(corrupt) == 1 and corrupt[0].startswith(f"corrupt: {KEY}: reading '{KEY}' at ")
    assert "(md5, content-md5)" in corrupt[0]
