"""One read-write mount of an S3 bucket prefix at a time (zarrfs/stores/s3_lease.py):
a lock of this machine and the lease object ``<prefix>/.zarrfs-lease`` for the
others; taken over once expired (at once when its daemon on this machine is gone),
renewed while mounted, released at umount; a mount that loses it stops writing.
Against scripts/s3_server.py on loopback."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from tests.support.cli import assert_one_error_line, run_cli
from tests.support.mounting import mounted
from tests.support.paths import REPO
from tests.support.servers import Bucket, LoopbackS3, put_file
from zarrfs.stores import s3_lease

DOCS = REPO / "docs" / "semantics.md"
PLAIN = np.arange(8 * 4, dtype="<f4").reshape(8, 4)


def make_store(server: LoopbackS3) -> str:
    group = zarr.open_group(str(server.root / "s.zarr"), mode="w")
    group.create_array("plain", shape=PLAIN.shape, chunks=(4, 4), dtype="<f4")[...] = PLAIN
    return server.url("s.zarr")


def lease_of(server: LoopbackS3) -> Path:
    return server.root / "s.zarr" / s3_lease.LEASE_KEY


def foreign_lease(server: LoopbackS3, ttl: float) -> None:
    """The lease another machine's mount left (its daemon gone, or still running)."""
    owner = {"host": "elsewhere", "boot": "x", "pidns": 1, "uid": 0, "pid": 4242, "ttl": ttl}
    put_file(server.root, f"s.zarr/{s3_lease.LEASE_KEY}", json.dumps(owner).encode())


def test_a_second_read_write_mount_is_refused(loopback_s3: LoopbackS3, tmp_path: Path) -> None:
    url = make_store(loopback_s3)
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    with mounted(url) as m:
        owner = json.loads(lease_of(loopback_s3).read_bytes())
        assert owner["pid"] == m.process.pid and owner["ttl"] == s3_lease.TTL
        assert ".zarrfs-lease" not in os.listdir(m.path)
        for detach in ([], ["-f"]):
            result = run_cli("mount", *detach, "--rw", url, str(mountpoint))
            message = f"store '{url}' is already mounted read-write by process {m.process.pid}"
            assert_one_error_line(result, message)
            assert not os.path.ismount(mountpoint)
        with mounted(url, "--read-only") as other:  # readers need no lease
            assert (other.path / "plain" / "array.raw").read_bytes() == PLAIN.tobytes()
        # zarr-python reads the store with the lease in it, and ignores it.
        group = zarr.open_group(str(loopback_s3.root / "s.zarr"), mode="r")
        assert [name for name, _ in group.members()] == ["plain"]
    assert not lease_of(loopback_s3).exists()  # released at umount
    with mounted(url):  # and taken again
        assert lease_of(loopback_s3).exists()


def test_a_read_only_mount_takes_no_lease(loopback_s3: LoopbackS3) -> None:
    url = make_store(loopback_s3)
    with mounted(url, "--read-only") as m:
        assert (m.path / "plain" / "array.raw").read_bytes() == PLAIN.tobytes()
        assert not lease_of(loopback_s3).exists()
    foreign_lease(loopback_s3, ttl=600)
    with mounted(url, "--read-only") as m:
        assert (m.path / "plain" / "array.raw").read_bytes() == PLAIN.tobytes()


def test_a_mount_that_may_not_write_reads_and_refuses_writes(
    s3_bucket: Bucket, tmp_path: Path
) -> None:
    """Credentials that may read but not write (here a bucket policy; a public
    bucket read with --anonymous alike): the lease cannot be written, the mount
    comes up saying so in one line, and every write fails with EACCES."""
    local = tmp_path / "local"
    zarr.open_group(str(local), mode="w").create_array("plain", data=PLAIN, chunks=(4, 4))
    for path in sorted(local.rglob("*")):
        if path.is_file():
            s3_bucket.put(f"s.zarr/{path.relative_to(local)}", path.read_bytes())
    deny = {
        "Effect": "Deny",
        "Principal": "*",
        "Action": "s3:PutObject",
        "Resource": f"arn:aws:s3:::{s3_bucket.name}/s.zarr/*",
    }
    policy = json.dumps({"Version": "2012-10-17", "Statement": [deny]})
    s3_bucket.client.put_bucket_policy(Bucket=s3_bucket.name, Policy=policy)
    with mounted(f"s3://{s3_bucket.name}/s.zarr") as m:
        raw = m.path / "plain" / "array.raw"
        assert raw.read_bytes() == PLAIN.tobytes()
        fd = os.open(raw, os.O_RDWR)
        try:
            os.pwrite(fd, np.zeros(4, "<f4").tobytes(), 0)
            with pytest.raises(OSError) as info:
                os.fsync(fd)
            assert info.value.errno == errno.EACCES
        finally:
            with pytest.raises(OSError):
                os.close(fd)
    assert "this mount cannot write" in m.log() and "access denied" in m.log()


def test_a_lease_of_another_machine_is_taken_over_once_expired(
    loopback_s3: LoopbackS3, tmp_path: Path
) -> None:
    url = make_store(loopback_s3)
    foreign_lease(loopback_s3, ttl=3)
    written = time.time()
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    result = run_cli("mount", "-f", "--rw", url, str(mountpoint))
    line = assert_one_error_line(result, "mounted read-write by process 4242 on 'elsewhere'")
    assert f"its lease {url}/.zarrfs-lease expires" in line
    # Last-Modified counts whole seconds: 3 s of TTL are surely past after 4.5.
    time.sleep(max(0.0, written + 4.5 - time.time()))
    with mounted(url) as m:
        assert json.loads(lease_of(loopback_s3).read_bytes())["pid"] == m.process.pid
    assert "took over the writer lease" in m.log() and "its TTL is 3 s" in m.log()


def test_the_lease_of_a_killed_daemon_on_this_machine_is_taken_over_at_once(
    loopback_s3: LoopbackS3,
) -> None:
    url = make_store(loopback_s3)
    with mounted(url) as m:
        os.kill(m.process.pid, signal.SIGKILL)  # the daemon this test started
        m.process.wait(timeout=30)
        subprocess.run(["fusermount3", "-u", "-z", str(m.path)], capture_output=True, check=False)
    assert json.loads(lease_of(loopback_s3).read_bytes())["pid"] == m.process.pid  # left
    started = time.monotonic()
    with mounted(url) as again:
        assert time.monotonic() - started < s3_lease.TTL / 2  # not a TTL's wait
        assert json.loads(lease_of(loopback_s3).read_bytes())["pid"] == again.process.pid
    assert "its process on this machine is gone" in again.log()
    assert not lease_of(loopback_s3).exists()


def test_the_lease_is_renewed_while_mounted(
    loopback_s3: LoopbackS3, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ZARRFS_S3_LEASE_TTL", "3")  # renewed every second
    url = make_store(loopback_s3)
    with mounted(url):
        first = lease_of(loopback_s3).stat()
        time.sleep(2.5)
        renewed = lease_of(loopback_s3).stat()
        assert renewed.st_ino != first.st_ino and renewed.st_mtime > first.st_mtime
        time.sleep(2.5)  # past its TTL since the first: another mount is still refused
        (tmp_path / "mnt").mkdir()
        result = run_cli("mount", "-f", "--rw", url, str(tmp_path / "mnt"))
        assert_one_error_line(result, "already mounted read-write")


def test_a_mount_that_lost_its_lease_stops_writing(
    loopback_s3: LoopbackS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZARRFS_S3_LEASE_TTL", "3")  # renewed every second
    url = make_store(loopback_s3)
    chunk = loopback_s3.root / "s.zarr" / "plain" / "c" / "0" / "0"
    stored = chunk.read_bytes()
    with mounted(url, "--flush-interval", "3600") as m:
        foreign_lease(loopback_s3, ttl=600)  # another mount took it over
        time.sleep(2.5)
        fd = os.open(m.path / "plain" / "array.raw", os.O_RDWR)
        try:
            os.pwrite(fd, np.zeros(4, "<f4").tobytes(), 0)
            for _ in range(2):
                with pytest.raises(OSError) as info:
                    os.fsync(fd)
                assert info.value.errno == errno.EIO
        finally:
            with pytest.raises(OSError):
                os.close(fd)  # close flushes too
        lines = m.log().splitlines()
        lost = [line for line in lines if "s3_lease: the writer lease" in line]
        assert len(lost) == 1 and "ERROR" in lost[0] and "taken over by another mount" in lost[0]
        assert not any("cannot renew" in line for line in lines)
    assert chunk.read_bytes() == stored
    assert json.loads(lease_of(loopback_s3).read_bytes())["host"] == "elsewhere"  # left alone


def test_the_lease_timing_is_documented() -> None:
    assert (s3_lease.TTL, s3_lease.RENEWALS, s3_lease.SAFE) == (60.0, 3, 5 / 6)
    text = DOCS.read_text()
    section = text[text.index("### Many machines, one bucket") :]
    section = section[: section.index("\n## ")]
    for claim in ("60 s", "every 20 s", "50 s", ".zarrfs-lease", "If-None-Match"):
        assert claim in section, claim
    for name in (
        "test_a_second_read_write_mount_is_refused",
        "test_a_lease_of_another_machine_is_taken_over_once_expired",
        "test_the_lease_of_a_killed_daemon_on_this_machine_is_taken_over_at_once",
        "test_a_mount_that_lost_its_lease_stops_writing",
        "test_a_read_only_mount_takes_no_lease",
    ):
        assert f"test_s3_lease.py::{name}" in section, name
