"""An S3 mount against a server that fails (scripts/s3_server.py --faults on
loopback): PUTs throttled at fsync, the server killed while data is dirty, reads
that stall, trickle, come back cut short or corrupted, and error pages quoting the
request. Every failure is EIO (never wrong bytes where a checksum can tell), in a
bounded time, with nothing written lost; the mount recovers when the server does."""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, GzipCodec

from tests.support.cli import assert_one_error_line, run_cli
from tests.support.mounting import mounted
from tests.support.servers import LoopbackS3
from zarrfs.errors import StoreError
from zarrfs.stores.s3 import S3Store

PLAIN = np.arange(64 * 40, dtype="<f4").reshape(64, 40)
CHUNK = "plain/c/0/0"


def make_store(server: LoopbackS3, compressors: object = "auto") -> str:
    group = zarr.open_group(str(server.root / "s.zarr"), mode="w")
    array = group.create_array(
        "plain", shape=PLAIN.shape, chunks=(16, 40), dtype="<f4", compressors=compressors
    )
    array[...] = PLAIN
    return server.url("s.zarr")


def stored(server: LoopbackS3) -> np.ndarray:
    return np.asarray(zarr.open_array(str(server.root / "s.zarr" / "plain"), mode="r")[...])


def read_raw(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_slowdown_on_every_put_then_healed(loopback_s3: LoopbackS3) -> None:
    url = make_store(loopback_s3)
    new = PLAIN + 1
    with mounted(url, "--flush-interval", "3600") as m:
        fd = os.open(m.path / "plain" / "array.raw", os.O_RDWR)
        try:
            loopback_s3.faults(put_error={"status": 503, "code": "SlowDown", "match": "plain/"})
            os.pwrite(fd, new.tobytes(), 0)
            started = time.monotonic()
            with pytest.raises(OSError) as info:
                os.fsync(fd)
            assert info.value.errno == errno.EIO
            assert time.monotonic() - started < 30  # retries are bounded
            np.testing.assert_array_equal(stored(loopback_s3), PLAIN)
            loopback_s3.faults(drop=["put_error"])
            os.fsync(fd)  # the same bytes, stored now
            np.testing.assert_array_equal(stored(loopback_s3), new)
        finally:
            os.close(fd)
    assert "SlowDown" in m.log()


def test_the_server_killed_while_data_is_dirty(loopback_s3: LoopbackS3) -> None:
    url = make_store(loopback_s3)
    new = PLAIN * 2
    with mounted(url, "--flush-interval", "3600") as m:
        fd = os.open(m.path / "plain" / "array.raw", os.O_RDWR)
        os.pwrite(fd, new.tobytes(), 0)
        loopback_s3.kill()
        started = time.monotonic()
        with pytest.raises(OSError) as info:
            os.close(fd)  # close flushes: EIO, the chunks kept
        assert info.value.errno == errno.EIO
        assert time.monotonic() - started < 30
        np.testing.assert_array_equal(stored(loopback_s3), PLAIN)
        loopback_s3.start()  # on the same port
        (m.path / ".zarrfs" / "flush").write_text("1")
        np.testing.assert_array_equal(stored(loopback_s3), new)
    assert m.process.returncode == 0


def test_unmount_stores_what_the_killed_server_could_not(loopback_s3: LoopbackS3) -> None:
    url = make_store(loopback_s3)
    new = PLAIN * 3
    with mounted(url, "--flush-interval", "3600") as m:
        fd = os.open(m.path / "plain" / "array.raw", os.O_RDWR)
        os.pwrite(fd, new.tobytes(), 0)
        loopback_s3.kill()
        with pytest.raises(OSError):
            os.close(fd)
        loopback_s3.start()
    assert m.process.returncode == 0  # the final flush stored it
    np.testing.assert_array_equal(stored(loopback_s3), new)


@pytest.mark.parametrize("fault", ["get_stall", "get_trickle"])
def test_a_read_from_a_stalled_or_trickling_server_ends_in_eio(
    loopback_s3: LoopbackS3, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    """Bounded by the read timeout (a stall) or the request timeout (a trickle):
    30 s and 5 minutes by default, shortened here."""
    monkeypatch.setenv("ZARRFS_S3_READ_TIMEOUT", "1")
    monkeypatch.setenv("ZARRFS_S3_REQUEST_TIMEOUT", "2")
    url = make_store(loopback_s3)
    with mounted(url, "--read-only") as m:
        raw = m.path / "plain" / "array.raw"
        assert os.path.getsize(raw) == PLAIN.nbytes
        loopback_s3.faults(**{fault: {"match": CHUNK, "rate": 100}})
        started = time.monotonic()
        with pytest.raises(OSError) as info:
            read_raw(raw)
        assert info.value.errno == errno.EIO
        assert time.monotonic() - started < 30
        loopback_s3.faults(clear=True)
        assert read_raw(raw) == PLAIN.tobytes()  # the next read tries again


def blocked_read(server: LoopbackS3, raw: Path) -> tuple[threading.Thread, list[object]]:
    """A reader of ``raw`` waiting on a GET the server does not answer."""
    assert os.path.getsize(raw) == PLAIN.nbytes
    server.faults(get_stall={"match": CHUNK})
    outcome: list[object] = []
    reader = threading.Thread(target=lambda: outcome.append(_read_or_error(raw)))
    reader.start()
    server.wait_for("stalled", 1)
    return reader, outcome


def test_umount_while_a_read_is_blocked(
    loopback_s3: LoopbackS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``zarrfs umount`` is refused at once while the reader holds the file (as
    umount(8) is); the read ends in EIO after the read timeout (30 s by default,
    shortened here), and then the mount unmounts."""
    monkeypatch.setenv("ZARRFS_S3_READ_TIMEOUT", "2")
    url = make_store(loopback_s3)
    with mounted(url, "--read-only") as m:
        reader, outcome = blocked_read(loopback_s3, m.path / "plain" / "array.raw")
        started = time.monotonic()
        result = run_cli("umount", str(m.path), timeout=60)
        assert time.monotonic() - started < 5
        assert_one_error_line(result, "cannot unmount", "busy")
        reader.join(timeout=60)
        assert not reader.is_alive() and outcome == [errno.EIO]
        assert time.monotonic() - started < 40
        result = run_cli("umount", str(m.path), timeout=60)
        assert result.returncode == 0, result.stderr
    assert m.process.returncode == 0


def test_sigterm_while_a_read_is_blocked(
    loopback_s3: LoopbackS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon ends within the read timeout (the read in flight fails first)."""
    monkeypatch.setenv("ZARRFS_S3_READ_TIMEOUT", "2")
    url = make_store(loopback_s3)
    with mounted(url, "--read-only") as m:
        reader, outcome = blocked_read(loopback_s3, m.path / "plain" / "array.raw")
        started = time.monotonic()
        m.process.terminate()  # the daemon this test started
        m.process.wait(timeout=60)
        reader.join(timeout=60)
        assert time.monotonic() - started < 30
        assert not reader.is_alive() and outcome and outcome[0] != PLAIN.tobytes()
    assert m.process.returncode == 0


def _read_or_error(path: Path) -> object:
    try:
        return read_raw(path)
    except OSError as e:
        return e.errno


def test_a_body_cut_short_is_eio(loopback_s3: LoopbackS3) -> None:
    url = make_store(loopback_s3, compressors=None)
    with mounted(url, "--read-only") as m:
        raw = m.path / "plain" / "array.raw"
        loopback_s3.faults(get_truncate={"match": CHUNK, "after": 100})
        with pytest.raises(OSError) as info:
            read_raw(raw)
        assert info.value.errno == errno.EIO
        loopback_s3.faults(clear=True)
        assert read_raw(raw) == PLAIN.tobytes()


def test_obstore_checks_the_content_length(loopback_s3: LoopbackS3) -> None:
    """A body cut short is never taken for fewer bytes: a whole value is an error
    of the request (retried, then a StoreError); a range is resumed by obstore, a
    request for the rest, and comes back whole."""
    value = bytes(range(256)) * 40
    (loopback_s3.root / "p").mkdir()
    (loopback_s3.root / "p" / "k").write_bytes(value)
    store = S3Store(loopback_s3.url("p"))
    loopback_s3.faults(get_truncate={"match": "p/k", "after": 1000})
    for call in (lambda: store.get("k"), lambda: store.get_ranges("k", [(0, 10), (9000, 10)])):
        with pytest.raises(StoreError) as caught:
            call()
        assert caught.value.errno == errno.EIO
    assert store.get_range("k", 100, 5000) == value[100:5100]
    assert store.get_range("k", -5000, 5000) == value[-5000:]
    loopback_s3.faults(clear=True)
    assert store.get("k") == value


def test_a_corrupted_chunk_with_a_checksum_is_eio(loopback_s3: LoopbackS3) -> None:
    """gzip carries a CRC-32 (so do zstd with checksum=True and Zarr v3's crc32c
    codec): a byte flipped on the way is a decode error, never wrong bytes."""
    url = make_store(loopback_s3, compressors=GzipCodec())
    with mounted(url, "--read-only") as m:
        raw = m.path / "plain" / "array.raw"
        loopback_s3.faults(get_corrupt={"match": CHUNK})
        with pytest.raises(OSError) as info:
            read_raw(raw)
        assert info.value.errno == errno.EIO
        loopback_s3.faults(clear=True)
    assert "plain" in m.log()


def test_a_corrupted_chunk_without_a_checksum_cannot_be_told(loopback_s3: LoopbackS3) -> None:
    """The known limit (docs/semantics.md, S3): uncompressed bytes, or a codec with
    no checksum (zstd as zarr-python writes it, blosc, lz4), decode whatever
    arrives. Over https TLS refuses a changed byte; over http nothing can."""
    assert numcodecs.Zstd().checksum is False
    url = make_store(loopback_s3, compressors=None)
    with mounted(url, "--read-only") as m:
        raw = m.path / "plain" / "array.raw"
        loopback_s3.faults(get_corrupt={"match": CHUNK, "count": 1})
        assert read_raw(raw) != PLAIN.tobytes()
    assert BytesCodec  # the array's only codec
