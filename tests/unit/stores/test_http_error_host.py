"""An HTTP store's failure to connect names the host and port it could not reach: the
root's, or after a redirect the target's (a CDN, a signed URL's host), never the user
info or query string of either."""

from __future__ import annotations

import pytest

from tests.support.http_server import HttpServer
from tests.support.servers import free_port
from zarrfs.errors import StoreError
from zarrfs.stores.http import HttpStore


def test_a_refused_connection_names_the_root_host() -> None:
    port = free_port()
    store = HttpStore(f"http://u:pw@127.0.0.1:{port}/s.zarr?token=t0k", retry_budget=2)
    for call in (store.check, lambda: store.get("zarr.json")):
        with pytest.raises(StoreError) as caught:
            call()
        message = str(caught.value)
        assert f"cannot connect to 127.0.0.1:{port}: connection refused" in message, message
        assert "pw" not in message and "t0k" not in message


def test_after_a_redirect_the_target_host_is_named(http_server: HttpServer) -> None:
    dead = free_port()
    http_server.redirects["/s.zarr/zarr.json"] = f"http://127.0.0.1:{dead}/x?sig=s1gn"
    store = HttpStore(f"{http_server.url}s.zarr", retry_budget=2)
    with pytest.raises(StoreError) as caught:
        store.get("zarr.json")
    message = str(caught.value)
    assert f"cannot connect to 127.0.0.1:{dead}" in message, message
    assert "s1gn" not in message
