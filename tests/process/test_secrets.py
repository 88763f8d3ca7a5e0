"""A store URL's secrets (``user:password@``, query tokens such as ``?X-Amz-Signature=``
or ``?token=``) stay out of what every local user can read: /proc/mounts (the mount's
source) and the command lines of the processes a mount leaves (``ps``). The mount
still uses them: every request the server sees carries the token.

Each test serves a store on 127.0.0.1 (tests/support/http_server.py) under a URL holding
fresh random secrets, mounts it in one of the three ways a user can, and unmounts it
in a ``finally``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests.support.cli import PID_XATTR, alive, run_cli
from tests.support.http_server import HttpServer
from tests.support.mountinfo import entries
from tests.support.mounting import mounted, unmount, zarrfs_command
from tests.support.stores import plain_and_sharded
from zarrfs.commands import mountopts
from zarrfs.commands.cli import cli
from zarrfs.daemon import runstate


@dataclass(frozen=True)
class Secret:
    password: str
    signature: str
    token: str

    def words(self) -> list[bytes]:
        return [w.encode() for w in (self.password, self.signature, self.token)]

    def url(self, server: HttpServer) -> str:
        return (
            f"http://alice:{self.password}@127.0.0.1:{server.port}/s.zarr"
            f"?X-Amz-Signature={self.signature}&token={self.token}"
        )


@pytest.fixture
def secret() -> Secret:
    return Secret(*(f"zs{secrets.token_hex(8)}" for _ in range(3)))


@pytest.fixture
def mnt(tmp_path: Path) -> Path:
    path = tmp_path / "mnt"
    path.mkdir()
    return path


def visible_to_everyone() -> dict[str, bytes]:
    """/proc/mounts and the command line of every process, as any user reads them."""
    seen = {"/proc/mounts": Path("/proc/mounts").read_bytes()}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):  # ended meanwhile
                seen[f"/proc/{entry}/cmdline"] = Path(f"/proc/{entry}/cmdline").read_bytes()
    return seen


def assert_nowhere(secret: Secret, daemon: int) -> None:
    for where, text in visible_to_everyone().items():
        for word in secret.words():
            assert word not in text, f"{word!r} is in {where}: {text!r}"
    # Its environment is the user's own to read, but it holds none either.
    environ = Path(f"/proc/{daemon}/environ").read_bytes()
    assert not any(word in environ for word in secret.words()), environ


def assert_reads_with_the_secret(m: Path, arrays: dict[str, np.ndarray], server: HttpServer,
                                 secret: Secret) -> None:  # fmt: skip
    for name, data in arrays.items():
        assert (m / name / "array.raw").read_bytes() == data.tobytes()
    gets = [r for r in server.settled() if r.method == "GET"]
    assert gets and all(f"token={secret.token}" in r.path for r in gets), gets


@pytest.fixture
def store(http_server: HttpServer) -> Iterator[dict[str, np.ndarray]]:
    yield plain_and_sharded(http_server.root / "s.zarr", consolidate=True)


def end(pid: int | None, mountpoint: Path) -> None:
    unmount(mountpoint)
    if pid is not None and alive(pid):
        os.kill(pid, signal.SIGKILL)  # the daemon this test started
    if pid is not None:
        runstate.collect(pid, os.getuid())
        (Path(runstate.run_dir()) / f"{pid}.log").unlink(missing_ok=True)  # without syslog


def test_a_detached_mount_shows_no_secret(
    http_server: HttpServer, store: dict[str, np.ndarray], secret: Secret, mnt: Path
) -> None:
    pid = None
    try:
        result = run_cli("mount", secret.url(http_server), str(mnt))
        assert result.returncode == 0, result.stderr
        pid = int(os.getxattr(mnt, PID_XATTR))
        assert_nowhere(secret, pid)
        assert_reads_with_the_secret(mnt, store, http_server, secret)
        done = run_cli("umount", str(mnt))
        assert done.returncode == 0, done.stderr
    finally:
        end(pid, mnt)


def test_a_foreground_mount_shows_no_secret(
    http_server: HttpServer, store: dict[str, np.ndarray], secret: Secret, tmp_path: Path
) -> None:
    with mounted(secret.url(http_server), log_dir=tmp_path) as m:
        assert_nowhere(secret, m.process.pid)
        assert_reads_with_the_secret(m.path, store, http_server, secret)
    assert not any(word in m.log().encode() for word in secret.words()), m.log()


def test_the_helper_form_shows_the_url_without_secrets_as_the_source(
    http_server: HttpServer, store: dict[str, np.ndarray], secret: Secret, mnt: Path
) -> None:
    """``zarrfs URL MNT -o ro``, as mount.fuse3 runs it for an fstab line."""
    pid = None
    try:
        result = subprocess.run(
            zarrfs_command(secret.url(http_server), str(mnt), "-o", "ro"),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        pid = int(os.getxattr(mnt, PID_XATTR))
        [entry] = entries(mnt)
        assert entry.source == f"http://127.0.0.1:{http_server.port}/s.zarr"
        assert_nowhere(secret, pid)
        assert_reads_with_the_secret(mnt, store, http_server, secret)
    finally:
        end(pid, mnt)


PUBLIC = [
    ("http://u:p@h:8080/a/b?X-Amz-Signature=s&X-Amz-Credential=c", "http://h:8080/a/b"),
    ("https://h/x.zarr?token=t#frag", "https://h/x.zarr"),
    ("https://user@h/x.zarr", "https://h/x.zarr"),
    ("HTTPS://u:p@h/x?sig=1", "HTTPS://h/x"),
    ("s3://bucket/prefix", "s3://bucket/prefix"),
    ("https://h/x.zarr", "https://h/x.zarr"),
    ("/data/a?b@c.zarr", "/data/a?b@c.zarr"),  # a path, not a URL
    ("./user:pw@x", "./user:pw@x"),
]


@pytest.mark.parametrize(("location", "shown"), PUBLIC)
def test_public_location(location: str, shown: str) -> None:
    assert mountopts.public_location(location) == shown


def test_the_fstab_form_names_the_url_without_secrets() -> None:
    args = mountopts.command_line(["https://u:pw@h/x?token=t", "/m", "-o", "ro"], cli)
    assert args == ["mount", "https://u:pw@h/x?token=t", "/m", "--read-only",
                    "-o", "fsname=https://h/x"]  # fmt: skip
