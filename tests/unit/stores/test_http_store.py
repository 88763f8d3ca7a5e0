"""HttpStore (zarrfs/stores/http.py) against a local HTTP server with Range support
(tests/support/http_server.py), directly and through a fault proxy
(tests/support/fault_proxy.py)."""

from __future__ import annotations

import errno
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import zarr

from tests.support.fault_proxy import FaultProxy
from tests.support.http_server import HttpServer, serve
from tests.support.store_contract import RANGES, VALUES, MakeStore, StoreContract
from zarrfs.errors import InvalidValueError, ReadOnlyError, StoreError
from zarrfs.stores.base import Listing, resolve_range
from zarrfs.stores.http import HttpStore

Proxy = Callable[..., FaultProxy]


def write_tree(root: Path, values: dict[str, bytes]) -> None:
    for key, value in values.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(value)


def fast(url: str, made: list[HttpStore], retry_budget: float = 1.0) -> HttpStore:
    """A store that gives up within about a second (tests of failures)."""
    store = HttpStore(url, tries=4, retry_budget=retry_budget, timeout=(1.0, 2.0))
    made.append(store)
    return store


class TestHttpStore(StoreContract):
    WRITABLE = False

    @pytest.fixture
    def make_store(self, http_server: HttpServer, http_stores: list[HttpStore]) -> MakeStore:
        def make(values: dict[str, bytes]) -> HttpStore:
            write_tree(http_server.root, values)
            http_stores.append(HttpStore(http_server.url))
            return http_stores[-1]

        return make

    # HTTP cannot list: an empty listing everywhere, and listable says so.
    def test_list_dir(self, make_store: MakeStore) -> None:
        store = make_store(VALUES)
        assert not store.listable and store.read_only and store.remote
        for prefix in ("", "a", "a/b/c", "nothing"):
            assert store.list_dir(prefix) == Listing((), ())

    def test_scan(self, make_store: MakeStore) -> None:
        store = make_store(VALUES)
        assert list(store.scan("")) == [] and list(store.scan("a")) == []


def test_zarr_store_read_back(http_server: HttpServer, http_stores: list[HttpStore]) -> None:
    """A hierarchy zarr-python 3 wrote, served as it lies on disk, key by key."""
    root = http_server.root / "data.zarr"
    group = zarr.open_group(str(root), mode="w")
    plain = group.create_array("plain", shape=(40, 30), chunks=(16, 16), dtype="<i4")
    plain[...] = np.arange(1200, dtype="<i4").reshape(40, 30)
    sharded = group.create_array(
        "sharded", shape=(64,), chunks=(8,), shards=(32,), dtype="<f8", fill_value=0.5
    )
    sharded[:40] = np.arange(40.0)
    zarr.consolidate_metadata(str(root))
    store = HttpStore(http_server.url + "data.zarr")
    http_stores.append(store)
    files = [p for p in root.rglob("*") if p.is_file()]
    assert len(files) > 10
    for path in files:
        key = path.relative_to(root).as_posix()
        data = path.read_bytes()
        assert store.get(key) == data, key
        assert store.size(key) == len(data) and store.contains(key), key
        assert store.mtime(key) == int(path.stat().st_mtime), key
        assert store.get_range(key, -4, 4) == data[-4:], key
    assert store.get("plain") is None and not store.contains("plain")  # a prefix


def test_ranged_reads_fetch_only_their_ranges(
    http_server: HttpServer, http_stores: list[HttpStore]
) -> None:
    data = os.urandom(1 << 20)
    (http_server.root / "v").write_bytes(data)
    store = HttpStore(http_server.url)
    http_stores.append(store)
    cases = [
        ([(1000, 5000)], 5000),
        ([(-4096, 4096)], 4096),  # a shard index at the end: one suffix request
        ([(0, 10), (500_000, 20), (-8, 8)], 38),
        ([(-10_000, 100)], 100),  # a window short of the end: HEAD, then the range
        ([(len(data) - 50, 100)], 50),
    ]
    for ranges, served in cases:
        http_server.reset()
        got = store.get_ranges("v", ranges)
        assert got == [data[slice(*_span(s, n, len(data)))] for s, n in ranges]
        assert sum(r.body_bytes for r in http_server.settled()) == served, ranges
    http_server.reset()
    assert store.get_range("v", len(data) + 10, 5) == b""  # 416: exists, past the end
    assert store.get_range("v", 10, 0) == b"" and store.get_range("nope", 10, 0) is None
    assert sum(r.body_bytes for r in http_server.settled()) == 0


def _span(start: int, length: int, size: int) -> tuple[int, int]:
    offset, count = resolve_range(start, length, size)
    return offset, offset + count


def test_limit_refused_without_reading_it_all(
    http_server: HttpServer, http_stores: list[HttpStore]
) -> None:
    big = 64 << 20
    with open(http_server.root / "big", "wb") as f:
        f.truncate(big)
    store = HttpStore(http_server.url)
    http_stores.append(store)
    for send_length in (True, False):  # refused by Content-Length, or by a bounded read
        http_server.send_length = send_length
        http_server.reset()
        with pytest.raises(InvalidValueError):
            store.get("big", limit=1 << 20)
        (request,) = http_server.settled(10)
        assert request.body_bytes < big // 2, send_length
        whole = store.get("big", limit=big)
        assert whole is not None and len(whole) == big and whole[-5:] == b"\0" * 5


@pytest.mark.parametrize("send_length", [True, False])
def test_server_ignoring_range(tmp_path: Path, send_length: bool) -> None:
    """200 and the whole value to every Range: still the right bytes, with or
    without a Content-Length."""
    data = os.urandom(3 << 20)
    write_tree(tmp_path, {"z.json": VALUES["z.json"], "v": data})
    with serve(tmp_path, ignore_range=True) as server:
        server.send_length = send_length
        store = HttpStore(server.url)
        for window, expected in RANGES:
            assert store.get_range("z.json", *window) == expected, window
        windows = [(0, 10), (5 << 20, 10), ((1 << 20) + 7, 2 << 20), (-1000, 1000)]
        windows += [(-(2 << 20), 300), (-(8 << 20), 5), ((3 << 20) - 3, 10)]
        for start, length in windows:
            assert (
                store.get_range("v", start, length) == data[slice(*_span(start, length, len(data)))]
            )
        assert all(r.status == 200 for r in server.gets())
        store.close()


def test_statuses(http_server: HttpServer, http_stores: list[HttpStore]) -> None:
    write_tree(http_server.root, {"x": b"x"})
    store = fast(http_server.url, http_stores)
    for status, err in ((401, errno.EACCES), (403, errno.EACCES), (500, errno.EIO)):
        http_server.statuses["/x"] = status
        for call in (
            lambda: store.get("x"),
            lambda: store.get_range("x", 0, 1),
            lambda: store.size("x"),
        ):
            with pytest.raises(StoreError) as caught:
                call()
            assert caught.value.errno == err and str(status) in str(caught.value)
    http_server.statuses["/x"] = 410
    assert store.get("x") is None and not store.contains("x") and store.mtime("x") is None
    http_server.statuses["/x"] = 400  # not passing: no retry
    http_server.reset()
    with pytest.raises(StoreError) as caught:
        store.get("x")
    assert caught.value.errno == errno.EIO and len(http_server.requests) == 1


def test_keys_and_urls(http_server: HttpServer, http_stores: list[HttpStore]) -> None:
    odd = "a b/c?d#e%20"
    write_tree(http_server.root / "root dir", {odd: b"odd", "k": b"k"})
    for url in (http_server.url + "root%20dir", http_server.url + "root%20dir/"):
        store = HttpStore(url)
        http_stores.append(store)
        assert store.get(odd) == b"odd" and store.get("k") == b"k"
        assert store.get("") is None and store.describe() == url
    for bad in ("../x", "a/./b", "a/../k", "k\0"):
        with pytest.raises(StoreError) as caught:
            store.get(bad)
        assert caught.value.errno == errno.EINVAL
    for url in ("ftp://host/x", "http://", "http://host:99999/x", "/local/path"):
        with pytest.raises(StoreError):
            HttpStore(url)
    with pytest.raises(ReadOnlyError):
        store.stage("k", [b"a", b"b"])


def test_concurrent_reads(http_server: HttpServer, http_stores: list[HttpStore]) -> None:
    data = os.urandom(4 << 20)
    (http_server.root / "v").write_bytes(data)
    store = HttpStore(http_server.url)
    http_stores.append(store)
    errors: list[BaseException] = []

    def reader(seed: int) -> None:
        try:
            for i in range(8):
                start = (seed * 8 + i) * 65_536
                assert store.get_range("v", start, 65_536) == data[start : start + 65_536]
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors


# -- faults ---------------------------------------------------------------------------


def test_cut_mid_read_is_retried(
    http_server: HttpServer, fault_proxy: Proxy, http_stores: list[HttpStore]
) -> None:
    data = os.urandom(1 << 20)
    (http_server.root / "v").write_bytes(data)
    proxy = fault_proxy(("127.0.0.1", http_server.port))
    store = fast(proxy.url, http_stores)
    for read, expected in (
        (lambda: store.get("v"), data),
        (lambda: store.get_range("v", 1000, 500_000), data[1000:501_000]),
        (lambda: store.get_range("v", -300_000, 300_000), data[-300_000:]),
    ):
        http_server.reset()
        proxy.cut(after=100_000, times=1)
        assert read() == expected
        assert proxy.cuts > 0 and len(http_server.gets()) == 2


def test_cut_on_every_try_fails_in_bounded_time(
    http_server: HttpServer, fault_proxy: Proxy, http_stores: list[HttpStore]
) -> None:
    (http_server.root / "v").write_bytes(os.urandom(1 << 20))
    proxy = fault_proxy(("127.0.0.1", http_server.port))
    store = fast(proxy.url, http_stores)
    proxy.cut(after=10_000, times=None)
    for read in (lambda: store.get("v"), lambda: store.get_range("v", 0, 500_000)):
        began = time.monotonic()
        with pytest.raises(StoreError) as caught:
            read()
        assert time.monotonic() - began < 3.0
        assert caught.value.errno == errno.EIO and "tries" in str(caught.value)
    proxy.passthrough()
    assert store.size("v") == 1 << 20


def test_503_burst_is_retried(
    http_server: HttpServer, fault_proxy: Proxy, http_stores: list[HttpStore]
) -> None:
    write_tree(http_server.root, {"k": b"value"})
    proxy = fault_proxy(("127.0.0.1", http_server.port), http=True)
    store = fast(proxy.url, http_stores, retry_budget=5.0)
    proxy.fail(3)
    assert store.get("k") == b"value" and proxy.failures == 3
    proxy.fail(2, status=502)
    assert store.get_range("k", -2, 2) == b"ue" and proxy.failures == 5
    proxy.fail(1000)
    with pytest.raises(StoreError) as caught:
        store.get("k")
    assert caught.value.errno == errno.EIO and "503" in str(caught.value)


def test_delay(http_server: HttpServer, fault_proxy: Proxy, http_stores: list[HttpStore]) -> None:
    write_tree(http_server.root, {f"k{n}": bytes([n]) * 100 for n in range(10)})
    for http in (False, True):
        proxy = fault_proxy(("127.0.0.1", http_server.port), http=http)
        proxy.delay = 0.02
        store = HttpStore(proxy.url)
        http_stores.append(store)
        began = time.monotonic()
        for n in range(10):
            assert store.get(f"k{n}") == bytes([n]) * 100
            assert store.get_range(f"k{n}", 10, 5) == bytes([n]) * 5
        assert time.monotonic() - began >= 20 * 0.02


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_check(http_server: HttpServer, http_stores: list[HttpStore]) -> None:
    HttpStore(http_server.url + "nothing/here").check()  # any answer will do, even 404
    url = f"http://127.0.0.1:{_free_port()}/x.zarr"
    store = fast(url, http_stores)
    began = time.monotonic()
    with pytest.raises(StoreError) as caught:
        store.check()
    message = str(caught.value)
    assert "\n" not in message and url in message and "refused" in message, message
    with pytest.raises(StoreError) as caught:
        store.get("zarr.json")
    assert caught.value.errno == errno.EIO and "refused" in str(caught.value)
    assert time.monotonic() - began < 3.0


def test_token_never_in_messages(
    http_server: HttpServer, fault_proxy: Proxy, http_stores: list[HttpStore]
) -> None:
    secret = "s3cr3t-t0k3n"
    write_tree(http_server.root, {"k": b"value", "v": os.urandom(1 << 20)})
    proxy = fault_proxy(("127.0.0.1", http_server.port), http=True)
    url = f"http://user:{secret}@127.0.0.1:{proxy.port}/?token={secret}&x=1"
    store = fast(url, http_stores)
    assert store.get("k") == b"value"
    assert all(r.path.endswith(f"?token={secret}&x=1") for r in http_server.requests)
    failures: list[BaseException] = []

    def failing(call: Callable[[], object]) -> None:
        with pytest.raises(StoreError) as caught:
            call()
        failures.append(caught.value)

    http_server.statuses["/k"] = 403
    failing(lambda: store.get("k"))
    http_server.statuses.clear()
    proxy.fail(1000)
    failing(lambda: store.get("k"))
    proxy.passthrough()
    proxy.cut(after=1000, times=None)
    failing(lambda: store.get_range("v", 0, 100_000))
    proxy.passthrough()
    failing(lambda: store.get("../k"))
    dead = fast(f"http://127.0.0.1:{_free_port()}/x?token={secret}", http_stores)
    failing(dead.check)
    failing(lambda: dead.get("k"))
    for e in failures:
        text = "".join(traceback.format_exception(e))
        assert secret not in text and "token" not in str(e), text
    assert secret not in store.describe() and secret not in dead.describe()


def test_fault_proxy_passes_request_bodies(http_server: HttpServer, fault_proxy: Proxy) -> None:
    """Bodies reach the server whole, kept-alive requests after them are found, a
    client waiting for "100 Continue" gets it, and an injected 503 drops a body."""
    proxy = fault_proxy(("127.0.0.1", http_server.port), http=True)
    body = os.urandom(300_000)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as sock:
        reader = sock.makefile("rb")

        def exchange(head: str, payload: bytes, *, expect: bool = False) -> bytes:
            sock.sendall(head.encode() + (b"" if expect else payload))
            if expect:
                assert reader.readline().startswith(b"HTTP/1.1 100")
                assert reader.readline() == b"\r\n"
                sock.sendall(payload)
            status = reader.readline()
            length = 0
            while (line := reader.readline()) != b"\r\n":
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            reader.read(length)
            return status

        put = f"PUT /up HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
        assert b"201" in exchange(put + "\r\n", body)
        assert b"201" in exchange(put + "Expect: 100-continue\r\n\r\n", body[::-1], expect=True)
        assert b"200" in exchange("GET /up HTTP/1.1\r\nHost: x\r\n\r\n", b"")
    assert (http_server.root / "up").read_bytes() == body[::-1]
    assert proxy.requests == 3 and proxy.connections == 1
    proxy.fail(1)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as sock:
        sock.sendall(put.encode() + b"\r\n" + b"x" * len(body))
        assert sock.makefile("rb").readline().startswith(b"HTTP/1.1 503")
    assert (http_server.root / "up").read_bytes() == body[::-1]
