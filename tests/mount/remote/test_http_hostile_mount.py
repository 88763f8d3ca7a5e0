"""Hostile HTTP servers (tests/support/http_server.py's MODES) through the real commands: a
mount, ``zarrfs check`` and ``zarrfs tree`` end in bounded time and memory, each bad
read one EIO (or one line), the mount survives and heals, and SIGTERM or an umount
ends the daemon even while a read waits on the server. The daemons run with a short
retry budget (ZARRFS_HTTP_RETRY_BUDGET) except in the test of the default one."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.support.cli import assert_one_error_line, run_cli
from tests.support.http_server import HttpServer
from tests.support.mounting import mounted, peak_rss, zarrfs_command
from tests.support.stores import PLAIN_BYTES, plain_and_sharded
from zarrfs.stores.http import BUDGET_VARIABLE, RETRY_BUDGET

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

BUDGET = 1.5  # seconds, the daemons' retry budget here
MEMORY_LIMIT = 2 << 30
PLAIN = np.arange(60 * 40, dtype="<f4").tobytes()
SHARDED = np.arange(64 * 48, dtype="<i4").tobytes()


@pytest.fixture
def store_url(http_server: HttpServer, monkeypatch: pytest.MonkeyPatch) -> str:
    plain_and_sharded(http_server.root / "s.zarr", consolidate=True)
    monkeypatch.setenv(BUDGET_VARIABLE, str(BUDGET))
    return f"{http_server.url}s.zarr"


def run(
    command: str, url: str, timeout: float = 60
) -> tuple[subprocess.CompletedProcess[str], float]:
    began = time.monotonic()
    result = subprocess.run(
        zarrfs_command(command, url),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return result, time.monotonic() - began


class Reader:
    """A read of a whole file in a thread of its own: it may wait on a hostile
    server, and the test must not wait with it."""

    def __init__(self, path: Path) -> None:
        self.outcome: bytes | OSError | None = None
        self.thread = threading.Thread(target=self._read, args=(path,), daemon=True)
        self.thread.start()

    def _read(self, path: Path) -> None:
        try:
            self.outcome = path.read_bytes()
        except OSError as e:
            self.outcome = e

    def result(self, seconds: float) -> bytes | OSError:
        self.thread.join(seconds)
        assert self.outcome is not None, f"the read still waits after {seconds} s"
        return self.outcome


def assert_eio(outcome: bytes | OSError) -> None:
    assert isinstance(outcome, OSError) and outcome.errno == errno.EIO, outcome


# -- slow servers ------------------------------------------------------------------------


def test_check_ends_within_the_default_budget(
    http_server: HttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real default: a chunk whose body comes a byte a second (each byte well
    within the read timeout of 15 s) is given up after 10 s, not after hours."""
    plain_and_sharded(http_server.root / "s.zarr", consolidate=True)
    monkeypatch.delenv(BUDGET_VARIABLE, raising=False)
    http_server.hostile["/s.zarr/plain/c/1/0"] = "trickle"
    http_server.trickle = 1.0
    result, took = run("check", f"{http_server.url}s.zarr", timeout=45)
    assert result.returncode == 1, result.stdout + result.stderr
    (line,) = [line for line in result.stdout.splitlines() if "plain/c/1/0" in line]
    assert f"timed out: no whole answer within {RETRY_BUDGET:g} s" in line, line
    assert RETRY_BUDGET - 0.5 < took < RETRY_BUDGET + 10, took
    assert "/plain: 4 chunks: 4 present, 0 missing, 1 corrupt" in result.stdout


def test_tree_and_mount_end_when_metadata_trickles(
    http_server: HttpServer, store_url: str, tmp_path: Path
) -> None:
    http_server.hostile["/s.zarr/zarr.json"] = "trickle"
    result, took = run("tree", store_url, timeout=30)
    assert_one_error_line(result, "timed out")
    assert took < 20
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    began = time.monotonic()
    result = run_cli("mount", store_url, str(mountpoint), timeout=30)
    assert not os.path.ismount(mountpoint)
    assert result.returncode != 0 and "timed out" in result.stderr, result.stderr
    assert time.monotonic() - began < 20


def test_a_trickling_chunk_is_eio_in_bounded_time_then_heals(
    http_server: HttpServer, store_url: str
) -> None:
    with mounted(store_url, "--read-only", memory_limit=MEMORY_LIMIT) as m:
        raw = m.path / "plain" / "array.raw"
        assert os.path.getsize(raw) == PLAIN_BYTES
        http_server.hostile["/s.zarr/plain/c/"] = "trickle"
        assert_eio(Reader(raw).result(BUDGET * 2 + 10))
        http_server.hostile.clear()
        assert raw.read_bytes() == PLAIN


# -- a server ignoring Range with an endless body ----------------------------------------


def test_check_ends_when_shards_are_endless(http_server: HttpServer, store_url: str) -> None:
    http_server.hostile["/s.zarr/sharded/c/"] = "endless"
    result, took = run("check", store_url, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "/sharded: 32 chunks: 32 present, 0 missing, 32 corrupt" in result.stdout
    assert "/plain: 4 chunks: 4 present, 0 missing, 0 corrupt" in result.stdout
    assert took < 60


@pytest.mark.parametrize("ending", ["SIGTERM", "umount"])
def test_the_daemon_ends_while_a_read_waits_on_an_endless_body(
    http_server: HttpServer, store_url: str, ending: str
) -> None:
    http_server.hostile["/s.zarr/sharded/c/"] = "endless"
    http_server.trickle = 0.5  # (for the plain chunks below)
    http_server.hostile["/s.zarr/plain/c/"] = "trickle"
    with mounted(store_url, "--read-only", memory_limit=MEMORY_LIMIT) as m:
        readers = [Reader(m.path / "sharded" / "array.raw"), Reader(m.path / "plain" / "array.raw")]
        time.sleep(0.5)  # both reads wait on the server now
        began = time.monotonic()
        if ending == "SIGTERM":
            m.process.send_signal(signal.SIGTERM)
        else:  # the open files keep the mount busy: detached now, ended when they close
            subprocess.run(["fusermount3", "-u", "-z", str(m.path)], check=True)
        try:
            m.process.wait(timeout=BUDGET * 4 + 20)
        except subprocess.TimeoutExpired:
            # Ended here (by its PID): the cleanup's look at the mount point would
            # wait on the daemon forever.
            m.process.kill()
            m.process.wait()
            pytest.fail(f"the daemon still runs {time.monotonic() - began:.0f} s after {ending}")
        took = time.monotonic() - began
        for reader in readers:
            assert isinstance(reader.result(10), OSError)
    assert took < BUDGET * 4 + 20


# -- a lying Content-Length is a store error, not a corrupt chunk ------------------------


def test_a_short_content_length_is_eio_and_the_next_read_succeeds(
    http_server: HttpServer, store_url: str
) -> None:
    """Not remembered as a corrupt chunk for 30 s: once the server is right again,
    so is the next read."""
    with mounted(store_url, "--read-only", memory_limit=MEMORY_LIMIT) as m:
        raw = m.path / "plain" / "array.raw"
        sharded = m.path / "sharded" / "array.raw"
        http_server.hostile["/s.zarr/plain/c/0/0"] = "short_length"
        http_server.hostile["/s.zarr/sharded/c/0/0"] = "short_length"
        http_server.ignore_range = True  # the shard's 200 answers lie as well
        for path in (raw, sharded):
            assert_eio(Reader(path).result(BUDGET * 2 + 10))
        http_server.hostile.clear()
        http_server.ignore_range = False
        assert raw.read_bytes() == PLAIN
        assert sharded.read_bytes() == SHARDED


# -- redirects ---------------------------------------------------------------------------


def test_a_store_redirected_to_another_server_mounts(
    http_server: HttpServer, other_server: HttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain_and_sharded(other_server.root / "s.zarr", consolidate=True)
    for path in (other_server.root / "s.zarr").rglob("*"):
        if path.is_file():
            key = path.relative_to(other_server.root).as_posix()
            http_server.redirects[f"/old/{key}"] = f"{other_server.url}{key}"
    monkeypatch.setenv(BUDGET_VARIABLE, str(BUDGET))
    with mounted(f"{http_server.url}old/s.zarr", "--read-only") as m:
        assert (m.path / "plain" / "array.raw").read_bytes() == PLAIN
        assert (m.path / "sharded" / "array.raw").read_bytes() == SHARDED
    shard_gets = [
        r for r in other_server.settled() if "/sharded/c/" in r.path and r.method == "GET"
    ]
    assert shard_gets and all(r.range for r in shard_gets)  # ranges survive the redirect


def test_a_redirect_out_of_http_fails_the_mount_in_one_line(
    http_server: HttpServer, store_url: str, tmp_path: Path
) -> None:
    http_server.redirects["/s.zarr/zarr.json"] = "file:///etc/passwd"
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    result = run_cli("mount", store_url, str(mountpoint))
    assert_one_error_line(result, "redirect to file:///etc/passwd refused")
    assert not os.path.ismount(mountpoint)


# -- a gzip bomb -------------------------------------------------------------------------


def test_gzip_bombs_are_eio_in_little_memory(http_server: HttpServer, store_url: str) -> None:
    http_server.hostile["/s.zarr/plain/c/"] = "gzip_bomb"
    http_server.hostile["/s.zarr/sharded/c/"] = "gzip_bomb"
    http_server.ignore_range = True  # the shard's 200 answers are bombs too
    with mounted(store_url, "--read-only", memory_limit=MEMORY_LIMIT) as m:
        for name in ("plain", "sharded"):
            assert_eio(Reader(m.path / name / "array.raw").result(BUDGET * 2 + 10))
        assert peak_rss(m.process) < 300 << 20
        http_server.hostile.clear()
        assert (m.path / "plain" / "array.raw").read_bytes() == PLAIN
    assert "Content-Encoding gzip" in m.log()
