"""Servers that tests start on 127.0.0.1 themselves: moto's standalone S3 server.

The fixtures are registered for every test (tests/conftest.py's ``pytest_plugins``).
``s3_server`` (one per session) yields the endpoint URL; ``s3_bucket`` makes a
fresh bucket for one test and points the AWS environment variables at the server
(AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID=testing, ...), so an S3Store built in the test
finds it by the AWS conventions alone. ``s3_auth_server`` is a second server that
checks signatures and IAM policies (moto checks nothing by default), for tests of
refused credentials. ``flaky_s3`` is an S3 look-alike in a thread that fails as
told (503 SlowDown) and counts requests and bytes sent. ``loopback_s3`` is the
project's own server (scripts/s3_server.py) over a directory of the test, with its
faults (scripts/s3_faults.py): held PUTs, stalled, trickled, cut or corrupted
GETs; it can be killed and started again on its port. moto missing is a failure,
never a skip: the S3 store would go untested.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import REPO

REGION = "us-east-1"
S3_SERVER = REPO / "scripts" / "s3_server.py"
STARTUP = 30.0  # seconds moto may take to answer (it imports every service's models)
# urllib must not send requests for 127.0.0.1 through a proxy from the environment.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(endpoint: str) -> bool:
    try:
        with _DIRECT.open(endpoint + "/", timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def _start_moto(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A moto server on a free port of 127.0.0.1, answering; the port can be taken
    between our probe and moto's bind, so a server that dies at once is retried."""
    try:
        import moto.server  # noqa: F401
    except ImportError as e:
        pytest.fail(f"moto[server] is not installed ({e}): pip install -e '.[test]'")
    # Signatures are checked only where a fixture turns it on (s3_auth_server).
    env = {k: v for k, v in os.environ.items() if k != "INITIAL_NO_AUTH_ACTION_COUNT"}
    for _ in range(3):
        endpoint = f"http://127.0.0.1:{free_port()}"
        port = endpoint.rsplit(":", 1)[1]
        with log.open("ab") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", port],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        deadline = time.monotonic() + STARTUP
        while process.poll() is None and time.monotonic() < deadline:
            if _answers(endpoint):
                return process, endpoint
            time.sleep(0.1)
        _stop(process)
    tail = log.read_text(errors="replace")[-2000:]
    pytest.fail(f"moto server did not come up on 127.0.0.1; its log ends:\n{tail}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Ends the one process we started, by its PID."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The endpoint URL ("http://127.0.0.1:PORT") of a moto S3 server."""
    process, endpoint = _start_moto(tmp_path_factory.mktemp("moto") / "server.log")
    try:
        yield endpoint
    finally:
        _stop(process)


def isolate_aws(monkeypatch: pytest.MonkeyPatch, tmp: Path, endpoint: str) -> None:
    """The AWS environment of a test: the local server and nothing of the user's
    (profiles, tokens, endpoints and config files would change what is sent)."""
    for name in (
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "AWS_ENDPOINT_URL_S3",
        "AWS_ENDPOINT",
        "AWS_SKIP_SIGNATURE",
        "AWS_BUCKET",
        "AWS_BUCKET_NAME",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp / "no-aws-credentials"))
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)  # what boto3 reads
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.setenv("no_proxy", "127.0.0.1")


def client(endpoint: str, **credentials: str) -> Any:
    """A boto3 S3 client of the server (``credentials``: aws_access_key_id, ...)."""
    import boto3

    credentials.setdefault("aws_access_key_id", "testing")
    credentials.setdefault("aws_secret_access_key", "testing")
    return boto3.client("s3", endpoint_url=endpoint, region_name=REGION, **credentials)


@dataclass
class Bucket:
    name: str
    endpoint: str
    client: Any  # boto3's S3 client

    def put(self, key: str, value: bytes, **extra: Any) -> None:
        self.client.put_object(Bucket=self.name, Key=key, Body=value, **extra)

    def keys(self, prefix: str = "") -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.name, Prefix=prefix
        )
        return [item["Key"] for page in pages for item in page.get("Contents", [])]


@pytest.fixture
def s3_bucket(s3_server: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Bucket:
    """A new, empty bucket on the session's server, and the AWS environment set to it."""
    isolate_aws(monkeypatch, tmp_path, s3_server)
    name = f"zarrfs-{uuid.uuid4().hex[:16]}"
    s3 = client(s3_server)
    s3.create_bucket(Bucket=name)
    return Bucket(name, s3_server, s3)


@dataclass
class AuthServer:
    """A moto server that checks signatures: ``access_key_id`` and ``secret`` are
    an IAM user's that may do anything in S3; ``bucket`` exists, made by that user."""

    endpoint: str
    access_key_id: str
    secret: str
    bucket: str

    def client(self) -> Any:
        """A boto3 S3 client signing with the user's key."""
        return client(
            self.endpoint, aws_access_key_id=self.access_key_id, aws_secret_access_key=self.secret
        )

    def isolate(self, monkeypatch: pytest.MonkeyPatch, tmp: Path) -> None:
        isolate_aws(monkeypatch, tmp, self.endpoint)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", self.access_key_id)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", self.secret)


@pytest.fixture(scope="session")
def s3_auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthServer]:
    import boto3

    process, endpoint = _start_moto(tmp_path_factory.mktemp("moto-auth") / "server.log")
    try:
        iam = boto3.client(
            "iam",
            endpoint_url=endpoint,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        iam.create_user(UserName="zarrfs")
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
        }
        iam.put_user_policy(UserName="zarrfs", PolicyName="s3", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName="zarrfs")["AccessKey"]
        # From now on every request must be signed by a known key (moto's switch).
        request = urllib.request.Request(
            endpoint + "/moto-api/reset-auth",
            data=b"0",
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        _DIRECT.open(request, timeout=10).read()
        server = AuthServer(endpoint, key["AccessKeyId"], key["SecretAccessKey"], "zarrfs-auth")
        server.client().create_bucket(Bucket=server.bucket)
        yield server
    finally:
        _stop(process)


class FlakyServer(ThreadingHTTPServer):
    daemon_threads = True
    failures = 0  # requests still to fail with 503 SlowDown
    requests = 0
    body = b""
    sent = 0  # bytes of bodies written to clients

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        # Released as each 200 answer ends (body sent or the client gone).
        self.answered = threading.Semaphore(0)


class _FlakyHandler(BaseHTTPRequestHandler):
    server: FlakyServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _answer(self, send_body: bool) -> None:
        self.server.requests += 1
        if self.server.failures > 0:
            self.server.failures -= 1
            error = b"<Error><Code>SlowDown</Code><Message>Please reduce</Message></Error>"
            self.send_response(503)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(error)))
            self.end_headers()
            self.wfile.write(error if send_body else b"")
            return
        body = memoryview(self.server.body)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", '"0123456789abcdef"')
        self.send_header("Last-Modified", "Mon, 02 Jan 2023 03:04:05 GMT")
        self.end_headers()
        try:
            while send_body and body:
                self.wfile.write(body[: 1 << 16])
                self.server.sent += len(body[: 1 << 16])
                body = body[1 << 16 :]
        except OSError:  # the client hung up
            self.close_connection = True
        finally:
            self.server.answered.release()

    def do_GET(self) -> None:
        self._answer(True)

    def do_HEAD(self) -> None:
        self._answer(False)


@pytest.fixture
def flaky_s3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FlakyServer]:
    """An S3 look-alike on 127.0.0.1 (a thread, not a process) that answers every
    GET and HEAD with ``body`` once its first ``failures`` requests have failed
    with 503 SlowDown; ``requests`` counts them. The AWS environment points at it."""
    server = FlakyServer(("127.0.0.1", 0), _FlakyHandler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    isolate_aws(monkeypatch, tmp_path, f"http://127.0.0.1:{server.server_address[1]}")
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class LoopbackS3:
    """scripts/s3_server.py --faults serving ``root`` as bucket ``bucket``."""

    def __init__(self, root: Path, bucket: str, log: Path) -> None:
        self.root = root
        self.bucket = bucket
        self.log = log
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix}"

    def start(self) -> None:
        """Started (again, on the same port once it has one)."""
        for _ in range(50):  # the port of a killed server may take a moment to free
            command = [sys.executable, str(S3_SERVER), str(self.root), "--faults"]
            with self.log.open("ab") as log:
                process = subprocess.Popen(
                    [*command, "--bucket", self.bucket, "--port", str(self.port)],
                    stdout=subprocess.PIPE,
                    stderr=log,
                    stdin=subprocess.DEVNULL,
                )
            assert process.stdout is not None
            ready, _, _ = select.select([process.stdout], [], [], STARTUP)
            line = process.stdout.readline().decode().strip() if ready else ""
            if line.startswith("http://"):
                self.port = int(line.rsplit(":", 1)[1])
                self.process = process
                return
            _stop(process)
            time.sleep(0.1)
        pytest.fail(f"scripts/s3_server.py did not start: {self.log.read_text()[-2000:]}")

    def kill(self) -> None:
        """SIGKILL, as a crash (its worker dies with it: PR_SET_PDEATHSIG)."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            assert self.process.stdout is not None
            self.process.stdout.close()
            self.process = None

    def faults(self, **faults: Any) -> dict[str, Any]:
        """Sets faults (scripts/s3_faults.py); the server's counters."""
        request = urllib.request.Request(
            self.endpoint + "/_faults", data=json.dumps(faults).encode(), method="POST"
        )
        with _DIRECT.open(request, timeout=10) as response:
            return dict(json.loads(response.read()))

    def counters(self) -> dict[str, Any]:
        return self.faults()

    def wait_for(self, name: str, count: int, timeout: float = 30.0) -> dict[str, Any]:
        """The counters once ``name`` has reached ``count`` (entries, for a list)."""
        deadline = time.monotonic() + timeout
        while True:
            counters = self.counters()
            value = counters[name]
            if (len(value) if isinstance(value, list) else value) >= count:
                return counters
            assert time.monotonic() < deadline, f"{name} stayed at {value}: {counters}"
            time.sleep(0.05)


@pytest.fixture
def loopback_s3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[LoopbackS3]:
    """The loopback server on a fresh directory (``root``: the bucket's files), and
    the AWS environment pointed at it."""
    root = tmp_path / "bucket"
    root.mkdir()
    server = LoopbackS3(root, "loopback", tmp_path / "s3_server.log")
    server.start()
    isolate_aws(monkeypatch, tmp_path, server.endpoint)
    try:
        yield server
    finally:
        if server.process is not None:
            with contextlib.suppress(OSError, urllib.error.URLError):
                server.faults(clear=True)  # held requests end, their threads with them
            _stop(server.process)
            assert server.process.stdout is not None
            server.process.stdout.close()


def put_file(root: Path, key: str, value: bytes) -> None:
    """Another writer: the object replaced behind the store's back (a new inode, so
    a new ETag)."""
    path = root / key
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(path.name + ".new")
    temp.write_bytes(value)
    os.replace(temp, path)


@pytest.fixture
def short_s3_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A held PUT times out in a second, not 30 (the daemon inherits it too)."""
    monkeypatch.setenv("ZARRFS_S3_READ_TIMEOUT", "1")
