"""The S3 store (zarrfs/stores/s3.py) against moto's S3 server on 127.0.0.1: the
Store contract, a store written by zarr-python 3, anonymous access, refused and
missing credentials and buckets, retries, and what never leaves the prefix."""

from __future__ import annotations

import errno
import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import trio
import zarr

from tests.support.servers import AuthServer, Bucket, FlakyServer, free_port, isolate_aws
from tests.support.store_contract import MakeStore, StoreContract
from zarrfs.core.read.chunks import ChunkCache
from zarrfs.errors import InvalidValueError, StoreError
from zarrfs.namespace.nodes import FileNode
from zarrfs.namespace.tree import Tree
from zarrfs.stores.s3 import S3Store

PREFIX = "data/root"


def fill(bucket: Bucket, values: dict[str, bytes], prefix: str = PREFIX) -> S3Store:
    for key, value in values.items():
        bucket.put(f"{prefix}/{key}", value)
    return S3Store(f"s3://{bucket.name}/{prefix}")


class TestS3Store(StoreContract):
    @pytest.fixture
    def make_store(self, s3_bucket: Bucket) -> MakeStore:
        return lambda values: fill(s3_bucket, values)


class TestS3StoreAtBucketRoot(StoreContract):
    @pytest.fixture
    def make_store(self, s3_bucket: Bucket) -> MakeStore:
        def make(values: dict[str, bytes]) -> S3Store:
            for key, value in values.items():
                s3_bucket.put(key, value)
            return S3Store(f"s3://{s3_bucket.name}")

        return make


def test_zarr_python_store_read_back(s3_bucket: Bucket, tmp_path: Path) -> None:
    """zarr-python 3 writes a hierarchy locally (v3 sharded, v3 and v2 arrays), the
    files go up with boto3, and every key reads back byte for byte."""
    local = tmp_path / "local.zarr"
    root = zarr.open_group(str(local), mode="w", zarr_format=3)
    data = np.arange(64 * 48, dtype="<i4").reshape(64, 48)
    root.create_array("sharded", data=data, chunks=(8, 8), shards=(32, 24))
    root.create_array("plain", data=data.astype("<f8"), chunks=(16, 16))
    zarr.create_array(str(local / "v2"), data=data[:10], chunks=(5, 48), zarr_format=2)
    files = {
        p.relative_to(local).as_posix(): p.read_bytes() for p in local.rglob("*") if p.is_file()
    }
    assert len(files) > 10
    store = fill(s3_bucket, files, "zarr/example.zarr")
    for key, value in files.items():
        assert store.get(key) == value, key
        assert store.size(key) == len(value), key
    assert dict(store.scan("")) == {key: len(value) for key, value in files.items()}
    top = store.list_dir("")
    assert top.keys == ("zarr.json",) and top.prefixes == ("plain", "sharded", "v2")
    # A shard's index is its last bytes: a suffix range, as the shard reader asks.
    shard = next(k for k in files if k.startswith("sharded/c/"))
    assert store.get_range(shard, -100, 100) == files[shard][-100:]
    assert store.get_ranges(shard, [(0, 10), (-16, 16)]) == [files[shard][:10], files[shard][-16:]]
    assert json.loads(store.get("sharded/zarr.json") or b"")["shape"] == [64, 48]
    # And zarrfs's namespace over it: each array.raw is the array's C-order bytes.
    tree = Tree(store, ChunkCache(store, 1 << 20))
    expected = {"sharded": data, "plain": data.astype("<f8"), "v2": data[:10]}
    for name, array in expected.items():
        node = tree.resolve(f"{name}/array.raw")
        assert isinstance(node, FileNode)
        assert trio.run(node.view.read, 0, node.view.size) == array.tobytes(), name


def test_prefix_is_a_boundary(s3_bucket: Bucket) -> None:
    """Keys beside the prefix are not the store's; "." and ".." are refused."""
    store = fill(s3_bucket, {"a/x": b"in"})
    s3_bucket.put("data/rootx/a/x", b"sibling")
    s3_bucket.put("data/root", b"the prefix itself")
    s3_bucket.put("data/secret", b"outside")
    assert store.list_dir("").prefixes == ("a",) and store.list_dir("").keys == ()
    assert dict(store.scan("")) == {"a/x": 2}
    assert store.get("") is None and store.size("") is None and not store.contains("")
    for key in ("../secret", "a/../../secret", "./a/x", "a/x\0"):
        for call in (store.get, store.size, store.delete):
            with pytest.raises(StoreError) as caught:
                call(key)
            assert caught.value.errno == errno.EINVAL
        with pytest.raises(StoreError):
            store.set(key, b"escape")
    with pytest.raises(StoreError):
        store.set("", b"onto the prefix")
    store.delete("a/x")
    assert s3_bucket.keys("data/") == ["data/root", "data/rootx/a/x", "data/secret"]
    assert store.get("a//x") is None  # empty components collapse, as in a directory


def test_directory_markers_are_not_keys(s3_bucket: Bucket) -> None:
    """Zero-byte "a/" objects (consoles make them) are neither keys nor values."""
    store = fill(s3_bucket, {"a/x": b"1", "a/": b"", "a/b/": b"", "a/b/y": b"22", "": b""})
    assert store.list_dir("").prefixes == ("a",) and store.list_dir("").keys == ()
    listing = store.list_dir("a")
    assert listing.keys == ("x",) and listing.prefixes == ("b",)
    assert store.list_dir("a/b").keys == ("y",)
    assert dict(store.scan("")) == {"a/x": 1, "a/b/y": 2}
    assert dict(store.scan("a")) == {"x": 1, "b/y": 2}
    assert store.get("a") is None and store.get("a/b") is None


def test_keys_obstore_cannot_name(s3_bucket: Bucket) -> None:
    """object_store refuses keys with an empty, "." or ".." component, and a whole
    listing that holds one: that listing fails with a clear EIO, the rest works."""
    store = fill(s3_bucket, {"x//y": b"1", "x/z": b"2", "ok/v": b"3"})
    assert store.list_dir("").prefixes == ("ok", "x")
    with pytest.raises(StoreError) as caught:
        store.list_dir("x")
    assert caught.value.errno == errno.EIO
    assert str(caught.value) == (
        f"listing s3://{s3_bucket.name}/{PREFIX}/x: a key below has an empty, '.' or '..' part"
    )
    assert store.get("x/z") == b"2" and store.list_dir("ok").keys == ("v",)


def test_scan_of_a_prefix_is_not_a_string_prefix(s3_bucket: Bucket) -> None:
    store = fill(s3_bucket, {"a/x": b"1", "ab/y": b"2", "a.json": b"3"})
    assert dict(store.scan("a")) == {"x": 1}
    assert store.list_dir("a").keys == ("x",)


def test_ranges_without_the_size(s3_bucket: Bucket) -> None:
    """Ranges past the end, on an empty value, and far-reaching suffixes."""
    store = fill(s3_bucket, {"z": b"0123456789", "empty": b""})
    assert store.get_range("empty", -4, 4) == b""
    assert store.get_range("empty", 0, 4) == b""
    assert store.get_ranges("empty", [(0, 4), (-4, 4)]) == [b"", b""]
    assert store.get_range("z", -(2**62), 4) == b""
    assert store.get_range("z", -1000, 996) == b"012345"
    assert store.get_range("z", 10, 1) == b""
    assert store.get_ranges("z", [(9, 5), (200, 5), (0, 0), (-3, 2)]) == [b"9", b"", b"", b"78"]
    assert store.get_ranges("z", []) == []
    assert store.get_ranges("missing", []) is None
    assert store.get("z", limit=10) == b"0123456789" and store.get("empty", limit=0) == b""
    with pytest.raises(InvalidValueError):
        store.get("z", limit=9)


def test_writes_are_single_puts(s3_bucket: Bucket) -> None:
    store = fill(s3_bucket, {})
    store.set("a/0", bytearray(b"ba"))
    store.set("a/1", memoryview(b"mv"))  # type: ignore[arg-type]
    staged = store.stage("c", [b"x" * 100, memoryview(b"y"), bytearray(b"z")])
    store.commit([staged])
    assert store.get("c") == b"x" * 100 + b"yz" and store.get("a/0") == b"ba"
    assert store.get("a/1") == b"mv"
    assert sorted(s3_bucket.keys()) == [f"{PREFIX}/a/0", f"{PREFIX}/a/1", f"{PREFIX}/c"]
    before = time.time()
    stamp = store.mtime("c")
    assert stamp is not None and abs(stamp - before) < 120


def test_commit_stops_at_the_first_failure(s3_bucket: Bucket) -> None:
    """A PUT refused by the bucket's policy: what came before it is written, what
    comes after is not, and the error says so."""
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:PutObject",
                "Resource": f"arn:aws:s3:::{s3_bucket.name}/{PREFIX}/deny/*",
            }
        ],
    }
    s3_bucket.client.put_bucket_policy(Bucket=s3_bucket.name, Policy=json.dumps(policy))
    store = fill(s3_bucket, {})
    staged = [store.stage(k, b"v") for k in ("first", "deny/second", "third")]
    with pytest.raises(StoreError) as caught:
        store.commit(staged)
    assert caught.value.errno == errno.EACCES
    assert "deny/second" in str(caught.value) and "1 of 3 values written" in str(caught.value)
    assert s3_bucket.keys() == [f"{PREFIX}/first"]


def test_anonymous_reads_a_public_object(
    s3_bucket: Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3_bucket.put("pub/zarr.json", b"{}", ACL="public-read")
    s3_bucket.put("pub/private", b"no")
    # Anonymous requests carry no credentials, so none need be configured.
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    store = S3Store(f"s3://{s3_bucket.name}/pub", anonymous=True)
    assert store.get("zarr.json") == b"{}"
    assert store.list_dir("").keys == ("private", "zarr.json")
    with pytest.raises(StoreError) as caught:
        store.get("private")
    assert caught.value.errno == errno.EACCES and "access denied" in str(caught.value)


def test_credentials_never_in_errors(
    s3_auth_server: AuthServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    server = s3_auth_server
    server.isolate(monkeypatch, tmp_path)
    server.client().put_object(Bucket=server.bucket, Key="p/zarr.json", Body=b"{}")
    good = S3Store(f"s3://{server.bucket}/p")
    good.check()
    assert good.get("zarr.json") == b"{}"

    secret, token = "wRoNgSeCrEt0123456789abcdefghijklmnopqrs", "SeSsIoNtOkEn0123456789abcdef"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    for session_token in (None, token):
        if session_token:
            monkeypatch.setenv("AWS_SESSION_TOKEN", session_token)
        bad = S3Store(f"s3://{server.bucket}/p")
        failures = []
        for call in (
            bad.check,
            lambda: bad.get("zarr.json"),  # noqa: B023 - called at once
            lambda: bad.get_range("zarr.json", -1, 1),  # noqa: B023
            lambda: bad.list_dir(""),  # noqa: B023
            lambda: bad.set("x", b"1"),  # noqa: B023
        ):
            with pytest.raises(StoreError) as caught:
                call()
            failures.append(caught.value)
        for failure in failures:
            assert failure.errno == errno.EACCES, failure
            assert failure.__cause__ is None and failure.__suppress_context__
            text = f"{failure} {failure!r} {bad.describe()}"
            for credential in (secret, token, server.access_key_id, server.secret):
                assert credential not in text
            assert "\n" not in str(failure)
        assert str(failures[0]).startswith(f"checking s3://{server.bucket}/p: access denied")


def test_missing_bucket(s3_bucket: Bucket) -> None:
    store = S3Store("s3://zarrfs-no-such-bucket/prefix")
    assert store.describe() == "s3://zarrfs-no-such-bucket/prefix"
    for call in (store.check, lambda: store.list_dir(""), lambda: store.get("zarr.json")):
        with pytest.raises(StoreError) as caught:
            call()
        assert str(caught.value) == "s3://zarrfs-no-such-bucket: bucket does not exist"
    fill(s3_bucket, {}).check()  # an empty bucket is fine


def test_profile_credentials(
    s3_auth_server: AuthServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """AWS_PROFILE and the shared credentials file (read through boto3)."""
    server = s3_auth_server
    server.isolate(monkeypatch, tmp_path)
    server.client().put_object(Bucket=server.bucket, Key="profile/zarr.json", Body=b"{}")
    credentials = tmp_path / "credentials"
    credentials.write_text(
        f"[zarrfs-test]\naws_access_key_id = {server.access_key_id}\n"
        f"aws_secret_access_key = {server.secret}\n"
    )
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_PROFILE", "zarrfs-test")
    assert S3Store(f"s3://{server.bucket}/profile").get("zarr.json") == b"{}"
    monkeypatch.setenv("AWS_PROFILE", "nobody")
    with pytest.raises(StoreError) as caught:
        S3Store(f"s3://{server.bucket}/profile")
    assert caught.value.errno == errno.EINVAL and "'nobody' not found" in str(caught.value)


def test_transient_failures_are_retried(flaky_s3: FlakyServer) -> None:
    flaky_s3.body = b"payload"
    flaky_s3.failures = 3
    store = S3Store("s3://flaky/p")
    assert store.get("k") == b"payload"
    assert flaky_s3.requests == 4


def test_retries_are_bounded(flaky_s3: FlakyServer) -> None:
    flaky_s3.failures = 1000
    store = S3Store("s3://flaky/p")
    started = time.monotonic()
    with pytest.raises(StoreError) as caught:
        store.size("k")
    assert time.monotonic() - started < 15
    assert caught.value.errno == errno.EIO
    assert str(caught.value) == "reading s3://flaky/p/k: HTTP 503 after 5 retries"
    assert flaky_s3.requests == 6


def test_unreachable_endpoint(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate_aws(monkeypatch, tmp_path, f"http://127.0.0.1:{free_port()}")
    store = S3Store("s3://bucket")
    started = time.monotonic()
    with pytest.raises(StoreError) as caught:
        store.get("k")
    assert time.monotonic() - started < 15
    assert caught.value.errno == errno.EIO and "cannot connect" in str(caught.value)


@pytest.mark.parametrize(
    "url",
    ["bucket", "s3:/bucket", "http://bucket/x", "s3://", "s3://b", "s3://bad/../x", "s3://a b/c"],
)
def test_bad_urls(url: str) -> None:
    with pytest.raises(StoreError) as caught:
        S3Store(url)
    assert caught.value.errno == errno.EINVAL


@pytest.mark.parametrize("endpoint", ["::bad", "127.0.0.1:9000", "ftp://host", "http://"])
def test_bad_endpoints(endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Refused at construction: object_store would panic at every request."""
    isolate_aws(monkeypatch, tmp_path, endpoint)
    with pytest.raises(StoreError) as caught:
        S3Store("s3://bucket")
    assert caught.value.errno == errno.EINVAL and "endpoint" in str(caught.value)


def test_describe(s3_bucket: Bucket) -> None:
    assert S3Store(f"s3://{s3_bucket.name}").describe() == f"s3://{s3_bucket.name}"
    assert S3Store(f"s3://{s3_bucket.name}//a//b/").describe() == f"s3://{s3_bucket.name}/a/b"
    store = S3Store(f"s3://{s3_bucket.name}/a")
    assert store.read_only is False and store.remote and store.listable


def test_limit_reads_no_large_body(flaky_s3: FlakyServer) -> None:
    """A value over the limit is refused on its headers: the connection is dropped
    with the body unread (a hostile 64 MiB "metadata" key costs no 64 MiB)."""
    flaky_s3.body = bytes(64 << 20)
    store = S3Store("s3://flaky/p")
    with pytest.raises(InvalidValueError) as caught:
        store.get("zarr.json", limit=1 << 20)
    assert "more than the limit" in str(caught.value)
    assert flaky_s3.answered.acquire(timeout=10), "the server is still sending"
    assert flaky_s3.sent < 32 << 20


def test_threads_share_one_store(s3_bucket: Bucket) -> None:
    """The fetch pool calls one store from many threads at once."""
    values = {f"c/{i}": bytes([i]) * (1000 + i) for i in range(64)}
    store = fill(s3_bucket, values)
    with ThreadPoolExecutor(16) as pool:
        got = list(pool.map(lambda k: store.get_range(k, -10, 10), values))
    assert got == [value[-10:] for value in values.values()]


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_fork_after_use_fails_instead_of_hanging(s3_bucket: Bucket) -> None:
    """obstore's threads do not survive a fork: a child of a process that used S3
    gets a StoreError saying so, not a request that waits forever."""
    store = fill(s3_bucket, {"k": b"v"})
    assert store.get("k") == b"v"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report in one line, never return into pytest
        try:
            signal.alarm(10)
            try:
                outcome = f"read {store.get('k')!r}"
            except StoreError as e:
                outcome = f"StoreError: {e}"
            os.write(write, outcome.encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        outcome = pipe.read().decode()
    os.waitpid(pid, 0)
    assert outcome == (
        f"StoreError: reading s3://{s3_bucket.name}/{PREFIX}/k: S3 was used before this "
        "process forked (open S3 stores after the fork)"
    )


def test_a_shard_index_at_the_end_is_one_request(
    s3_bucket: Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tail of an object and its size come in one suffix-ranged GET: no HEAD."""
    from zarrfs.stores import objreads

    store = fill(s3_bucket, {"shard": bytes(range(256)) * 8})
    calls: list[str] = []
    real_get, real_head = objreads.obstore.get, objreads.obstore.head

    def counted_get(*args: object, **kw: object) -> object:
        calls.append("GET")
        return real_get(*args, **kw)  # type: ignore[arg-type]

    def counted_head(*args: object, **kw: object) -> object:
        calls.append("HEAD")
        return real_head(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(objreads.obstore, "get", counted_get)
    monkeypatch.setattr(objreads.obstore, "head", counted_head)
    assert store.get_tail("shard", 16) == (bytes(range(240, 256)), 2048)
    assert calls == ["GET"]
