"""HttpStore (zarrfs/stores/http.py) against hostile servers (tests/support/http_server.py's
MODES): each read ends in bounded time and memory with the right bytes or one
StoreError in one line, never with wrong bytes. Bounds are shortened here (a
budget of about a second); tests/mount/remote/test_http_hostile_mount.py proves the
default one."""

from __future__ import annotations

import errno
import functools
import os
import re
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import pytest

from tests.support.http_server import HttpServer
from tests.support.mounting import memory_cap
from zarrfs.errors import InvalidValueError, StoreError
from zarrfs.stores import http, httpwire
from zarrfs.stores.http import HttpStore

T = TypeVar("T")
BOUND = 8.0  # seconds any read here may take, hostile server or not


def within(call: Callable[[], T], seconds: float = BOUND) -> T:
    """``call()`` in a thread of its own, which must end within ``seconds``: a read
    that would hang fails the test instead of hanging it."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(("value", call()))
        except BaseException as e:
            outcome.append(("error", e))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"still running after {seconds} s"
    kind, value = outcome[0]  # type: ignore[misc]
    if kind == "error":
        raise value  # type: ignore[misc]
    return value  # type: ignore[return-value]


def failure(call: Callable[[], object], seconds: float = BOUND) -> StoreError:
    """The one-line EIO that ``call`` fails with, within ``seconds``."""
    with pytest.raises(StoreError) as caught:
        within(call, seconds)
    error = caught.value
    assert error.errno == errno.EIO and "\n" not in str(error), error
    return error


def fast(url: str, made: list[HttpStore], budget: float = 1.0) -> HttpStore:
    store = HttpStore(url, tries=5, retry_budget=budget, timeout=(1.0, 2.0))
    made.append(store)
    return store


@pytest.fixture
def value(http_server: HttpServer) -> bytes:
    data = os.urandom(4000)
    (http_server.root / "v").write_bytes(data)
    return data


# -- time: every request ends within its budget ------------------------------------------


@pytest.mark.parametrize("ignore_range", [False, True])
def test_a_trickled_body_fails_within_the_budget(
    http_server: HttpServer, value: bytes, http_stores: list[HttpStore], ignore_range: bool
) -> None:
    """A byte every 0.2 s, each well within the read timeout of 2 s: the reads fail
    once the budget of 1 s (plus the second a late try gets) is spent."""
    http_server.hostile["/v"] = "trickle"
    http_server.ignore_range = ignore_range
    store = fast(http_server.url, http_stores)
    for read in (
        lambda: store.get("v"),
        lambda: store.get_range("v", 100, 1000),
        lambda: store.get_range("v", -500, 500),
    ):
        began = time.monotonic()
        error = failure(read)
        assert "timed out" in str(error) and "within 1 s" in str(error), error
        assert time.monotonic() - began < 3.5
    http_server.hostile.clear()
    assert store.get_range("v", -500, 500) == value[-500:]  # the store is not broken


def test_trickled_headers_fail_within_the_budget(
    http_server: HttpServer, http_stores: list[HttpStore]
) -> None:
    http_server.hostile["/"] = "trickle_headers"
    store = fast(http_server.url, http_stores)
    began = time.monotonic()
    assert "timed out" in str(failure(lambda: store.get("k")))
    assert "timed out" in str(failure(lambda: store.size("k")))
    with pytest.raises(StoreError) as caught:
        within(store.check)
    assert "cannot reach" in str(caught.value) and "timed out" in str(caught.value)
    assert time.monotonic() - began < 3 * 3.5


def test_a_steady_body_may_outlast_the_budget(
    http_server: HttpServer,
    value: bytes,
    http_stores: list[HttpStore],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The deadline moves back with each piece received at MIN_RATE or faster: a
    body taking longer than the budget, but arriving steadily, is read whole."""
    monkeypatch.setattr(httpwire, "PIECE", 4)
    monkeypatch.setattr(httpwire, "MIN_RATE", 10)  # 4 bytes (0.2 s here) buy 0.4 s
    (http_server.root / "slow").write_bytes(value[:40])
    http_server.hostile["/slow"] = "trickle"
    http_server.trickle = 0.05  # 40 bytes: 2 s, twice the budget
    store = fast(http_server.url, http_stores, budget=1.0)
    began = time.monotonic()
    assert within(lambda: store.get("slow")) == value[:40]
    assert time.monotonic() - began > 1.5


# -- a server that ignores Range, with an endless body -----------------------------------


def test_an_endless_answer_to_a_range_request_is_bounded(
    http_server: HttpServer, http_stores: list[HttpStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http, "SKIP_LIMIT", 4 << 20)
    http_server.hostile["/v"] = "endless"
    store = fast(http_server.url, http_stores, budget=30.0)  # the bound in bytes comes first
    for read in (lambda: store.get_range("v", -100, 100), lambda: store.size("v")):
        http_server.reset()
        error = failure(read)
        assert "Range ignored" in str(error) and "unknown length" in str(error), error
        assert len(http_server.gets()) == 1  # not tried again
    # A window at the start needs only the start of the body.
    assert within(lambda: store.get_range("v", 10, 100)) == bytes(100)
    # A window past the bound is refused before any of it is read.
    http_server.reset()
    assert "up to byte" in str(failure(lambda: store.get_range("v", 5 << 20, 10)))
    with pytest.raises(InvalidValueError):
        within(lambda: store.get("v", limit=1 << 20))
    assert all(r.body_bytes < 64 << 20 for r in http_server.settled(10))


# -- Content-Length lies, bodies cut: store errors, tried again --------------------------


@pytest.mark.parametrize("ignore_range", [False, True])
def test_a_content_length_shorter_than_the_body_is_a_store_error(
    http_server: HttpServer, value: bytes, http_stores: list[HttpStore], ignore_range: bool
) -> None:
    """Not a shorter value (which a decoder would call a corrupt chunk, remembered
    as such): a failed try, tried again, then EIO; the next read tries again."""
    http_server.hostile["/v"] = "short_length"
    http_server.ignore_range = ignore_range
    store = fast(http_server.url, http_stores)
    reads: list[Callable[[], object]] = [lambda: store.get("v")]
    if ignore_range:  # (a 206's Content-Length is checked against its Content-Range)
        reads += [lambda: store.get_range("v", -100, 100), lambda: store.get_range("v", 0, 4000)]
    for read in reads:
        http_server.reset()
        error = failure(read)
        assert type(error) is StoreError, error  # not InvalidValueError: not remembered
        assert "longer than its Content-Length" in str(error), error
        assert len(http_server.gets()) > 1  # tried again
    http_server.hostile.clear()
    assert store.get("v") == value and store.get_range("v", -100, 100) == value[-100:]


@pytest.mark.parametrize("mode", ["long_length", "long_length_stall"])
def test_a_content_length_longer_than_the_body_is_a_store_error(
    http_server: HttpServer, value: bytes, http_stores: list[HttpStore], mode: str
) -> None:
    http_server.hostile["/v"] = mode
    store = fast(http_server.url, http_stores)
    for ignore_range in (False, True):
        http_server.ignore_range = ignore_range
        for read in (lambda: store.get("v"), lambda: store.get_range("v", -100, 100)):
            error = failure(read)
            assert type(error) is StoreError and re.search(r"\(\d+ tr(y|ies)\)$", str(error))
    http_server.hostile.clear()
    assert store.get("v") == value


# -- encodings and headers ---------------------------------------------------------------


def test_a_gzip_bomb_is_refused_undecoded(
    http_server: HttpServer, http_stores: list[HttpStore]
) -> None:
    """4 MiB that inflate to 4 GiB: refused, never inflated, in little memory (a
    decoder would have given wrong bytes even where it was bounded)."""
    http_server.hostile["/v"] = "gzip_bomb"
    store = fast(http_server.url, http_stores)
    with memory_cap(512 << 20):
        for read in (
            lambda: store.get("v"),
            lambda: store.get("v", limit=1 << 20),
            lambda: store.get_range("v", 0, 100),
            lambda: store.get_range("v", -100, 100),
            lambda: store.size("v"),
        ):
            http_server.reset()
            error = failure(read)
            assert "Content-Encoding gzip" in str(error), error
            assert len(http_server.gets()) == 1  # refused, not tried again


@pytest.mark.parametrize(
    ("mode", "said"),
    [("huge_headers", "got more than 100 headers"), ("huge_header_line", "a header line too long")],
)
def test_huge_headers_are_refused(
    http_server: HttpServer, value: bytes, http_stores: list[HttpStore], mode: str, said: str
) -> None:
    http_server.hostile["/v"] = mode
    store = fast(http_server.url, http_stores)
    for read in (lambda: store.get("v"), lambda: store.size("v")):
        error = failure(read)
        assert f"malformed answer: {said}" in str(error), error


# -- redirects ---------------------------------------------------------------------------


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_redirects_are_followed(
    http_server: HttpServer,
    other_server: HttpServer,
    value: bytes,
    http_stores: list[HttpStore],
    status: int,
) -> None:
    (other_server.root / "w").write_bytes(value)
    http_server.redirect_status = status
    http_server.redirects["/to-port"] = f"{other_server.url}w?sig=1"  # another port
    http_server.redirects["/relative"] = "/v"
    http_server.redirects["/chain"] = "/to-port"
    store = fast(http_server.url, http_stores)
    for key in ("to-port", "relative", "chain"):
        assert store.get(key) == value, key
        assert store.get_range(key, -10, 10) == value[-10:], key
        assert store.size(key) == len(value) and store.contains(key), key
    assert {r.path for r in other_server.requests} == {"/w?sig=1"}
    assert {r.range for r in other_server.gets()} == {None, "bytes=-10"}


def test_credentials_stay_with_their_origin(
    http_server: HttpServer, other_server: HttpServer, value: bytes, http_stores: list[HttpStore]
) -> None:
    """Basic credentials of the root URL go to its scheme, host and port alone:
    not to another port, nor to the same server under another host name; its
    query string (a token) goes to its own keys alone."""
    (other_server.root / "w").write_bytes(value)
    http_server.redirects["/to-port"] = f"{other_server.url}w"
    http_server.redirects["/to-host"] = f"http://localhost:{http_server.port}/v"
    http_server.redirects["/home"] = "/v"
    store = fast(f"http://user:secret@127.0.0.1:{http_server.port}/?token=t0k3n", http_stores)
    for key in ("to-port", "to-host", "home"):
        assert store.get(key) == value, key
    sent = {r.path: r.authorization for r in http_server.requests}
    auth = sent["/to-port?token=t0k3n"]
    assert auth and sent["/to-host?token=t0k3n"] == sent["/home?token=t0k3n"] == auth
    assert [(r.path, r.authorization) for r in other_server.requests] == [("/w", None)]
    # /v was asked for twice: through "home" with them, through "localhost" without
    assert sorted(str(r.authorization) for r in http_server.requests if r.path == "/v") == sorted(
        [auth, "None"]
    )


def test_redirects_refused_in_one_line(
    http_server: HttpServer, value: bytes, http_stores: list[HttpStore]
) -> None:
    redirects = {
        "/file": ("file:///etc/passwd?sig=secret", "redirect to file:///etc/passwd refused"),
        "/ftp": ("ftp://127.0.0.1/v", "only http and https"),
        "/loop-a": ("/loop-b", "redirect loop"),
        "/loop-b": ("/loop-a?x=secret", "redirect loop"),
        "/self": ("/self", "redirect loop"),
        "/nowhere": ("", "without a Location"),
        "/hop0": ("/hop1", "more than 5 redirects"),
    }
    for n in range(1, 6):
        http_server.redirects[f"/hop{n}"] = f"/hop{n + 1}"
    http_server.redirects["/hop6"] = "/v"
    http_server.redirects.update({path: location for path, (location, _) in redirects.items()})
    store = fast(http_server.url, http_stores)
    for path, (_, said) in redirects.items():
        http_server.reset()
        error = failure(functools.partial(store.get, path[1:]))
        assert said in str(error) and "secret" not in str(error), error
        assert len(http_server.requests) <= 7, path  # not tried again
    assert store.get("hop2") == value  # five redirects are followed (hop2 to hop6)


def test_redirect_policy_of_schemes() -> None:
    target = httpwire.redirect_target("https://example.invalid/root/k", 302, "/x")
    assert target == "https://example.invalid/x"
    with pytest.raises(httpwire.Refused, match="from https down to http"):
        httpwire.redirect_target("https://a.invalid/k", 302, "http://a.invalid/k")
    # Up to https is fine; user info in a Location is never sent.
    up = httpwire.redirect_target("http://a.invalid/k", 301, "https://u:p@b.invalid/k?s=1#f")
    assert up == "https://b.invalid/k?s=1"
    for location in ("data:,x", "javascript:alert(1)", "http://h:99999/x", " "):
        with pytest.raises(httpwire.Refused):
            httpwire.redirect_target("http://a.invalid/k", 302, location)
