"""The S3 servers the ``s3`` section starts on 127.0.0.1, and the environment that
points zarrfs, obstore and boto3 at them.

- moto's standalone server (``python -m moto.server``): a full S3 in Python, which
  answers one request at a time in its dispatcher (some 100-200 MiB/s here), and
  logs every request (method, path, status);
- scripts/s3_server.py: a read-only S3 look-alike serving a directory, a worker
  process per CPU, bodies by sendfile, fast enough not to bound either side.

Each runs in a process of ours and is ended by the PID we hold, errors or not.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.mounting import ROOT, wait_or_kill
from bench.results import BenchError

BUCKET = "zarrfs-bench"
REGION = "us-east-1"
UPLOADERS = 8
MOTO_STARTUP = 30.0  # seconds moto may take to answer (it imports every service's models)
FAST_SERVER = ROOT / "scripts" / "s3_server.py"
FAST_SERVER_STARTUP = 10.0  # seconds it may take to listen
# A request line of the werkzeug log moto writes: "GET /bucket/key?query HTTP/1.1" 200
# (other statuses than 200 in color: ANSI escapes, dropped first).
_MOTO_REQUEST = re.compile(r'"([A-Z]+) (\S+) HTTP/[\d.]+" (\d{3})')
_ANSI = re.compile(r"\x1b\[[\d;]*m")
_MOTO_LISTENING = re.compile(r"Running on (http://127\.0\.0\.1:\d+)")


def _apply(values: dict[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@contextmanager
def environment(changes: dict[str, str | None]) -> Iterator[None]:
    """This process's environment (so that of the daemons it starts) changed as told
    (None: removed), and restored at the end."""
    saved = {name: os.environ.get(name) for name in changes}
    try:
        _apply(changes)
        yield
    finally:
        _apply(saved)


def aws_environment(work: Path, endpoint: str) -> dict[str, str | None]:
    """The AWS settings of the section: the local server, the keys "testing", and
    nothing of the user's (every AWS_ variable of theirs removed: profiles, tokens,
    other endpoints and config files would change what is sent)."""
    changes: dict[str, str | None] = {k: None for k in os.environ if k.startswith("AWS_")}
    changes.update(
        AWS_CONFIG_FILE=str(work / "no-aws-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(work / "no-aws-credentials"),
        AWS_ENDPOINT_URL=endpoint,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_REGION=REGION,
        AWS_DEFAULT_REGION=REGION,  # what boto3 reads
        NO_PROXY="127.0.0.1",
        no_proxy="127.0.0.1",
    )
    return changes


@contextmanager
def endpoint_set(endpoint: str) -> Iterator[None]:
    """AWS_ENDPOINT_URL set to ``endpoint`` for what starts inside (a daemon)."""
    with environment({"AWS_ENDPOINT_URL": endpoint}):
        yield


def _end(process: subprocess.Popen[bytes]) -> None:
    """Ends the one process we started, by its PID."""
    if process.poll() is None:
        process.terminate()
        wait_or_kill(process, 10)


def _start_moto(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """moto on a port of 127.0.0.1 the system picks; its endpoint once it listens."""
    try:
        import moto.server  # noqa: F401
    except ImportError as e:
        raise BenchError(f"s3: moto[server] is not installed ({e}): scripts/install.sh") from e
    # moto checks signatures only when told to; nothing here may tell it.
    env = {k: v for k, v in os.environ.items() if k != "INITIAL_NO_AUTH_ACTION_COUNT"}
    with log.open("ab") as out:
        start = out.tell()
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", "0"],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    deadline = time.monotonic() + MOTO_STARTUP
    while process.poll() is None and time.monotonic() < deadline:
        with log.open("rb") as f:
            f.seek(start)
            # werkzeug says where it listens once it does.
            found = _MOTO_LISTENING.search(f.read().decode(errors="replace"))
        if found:
            return process, found.group(1)
        time.sleep(0.1)
    _end(process)
    tail = log.read_text(errors="replace")[-2000:]
    raise BenchError(f"s3: moto did not come up on 127.0.0.1; its log ends:\n{tail}")


@dataclass
class Moto:
    endpoint: str
    log: Path
    client: Any  # boto3's S3 client

    def upload(self, store: Path, prefix: str) -> int:
        """Every file under the local ``store`` as ``prefix/<relative path>``; bytes sent."""
        files = [p for p in store.rglob("*") if p.is_file()]

        def put(path: Path) -> int:
            body = path.read_bytes()
            key = f"{prefix}/{path.relative_to(store).as_posix()}"
            self.client.put_object(Bucket=BUCKET, Key=key, Body=body)
            return len(body)

        with ThreadPoolExecutor(UPLOADERS) as pool:
            return sum(pool.map(put, files))

    def requests_since(self, offset: int) -> list[tuple[str, str, str]]:
        """(method, path, status) of each request moto logged past byte ``offset``."""
        time.sleep(0.3)  # moto logs a request once it has answered it
        with self.log.open("rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
        return [m.groups() for m in _MOTO_REQUEST.finditer(_ANSI.sub("", text))]


@contextmanager
def moto(work: Path) -> Iterator[Moto]:
    """A moto server, a bucket, and the AWS environment of this process pointed at it
    (``aws_environment``); all undone at the end."""
    import boto3

    log = work / "moto.log"
    process, endpoint = _start_moto(log)
    try:
        with environment(aws_environment(work, endpoint)):
            client = boto3.client(
                "s3",
                endpoint_url=endpoint,
                region_name=REGION,
                aws_access_key_id="testing",
                aws_secret_access_key="testing",
            )
            client.create_bucket(Bucket=BUCKET)
            yield Moto(endpoint, log, client)
    finally:
        _end(process)


@contextmanager
def fast_server(root: Path, work: Path) -> Iterator[tuple[str, int]]:
    """scripts/s3_server.py serving the directory ``root`` as bucket BUCKET on a free
    port of 127.0.0.1: its endpoint URL, and its process group (for its CPU time).
    It runs in a process group of its own, ended at the end by the server's PID."""
    log = work / "s3_server.log"
    with log.open("ab") as err:
        process = subprocess.Popen(
            [sys.executable, str(FAST_SERVER), str(root), "--bucket", BUCKET],
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        assert process.stdout is not None
        # The server prints its URL once it listens, and nothing more.
        ready, _, _ = select.select([process.stdout], [], [], FAST_SERVER_STARTUP)
        endpoint = process.stdout.readline().decode().strip() if ready else ""
        if not endpoint.startswith("http://127.0.0.1:"):
            tail = log.read_text(errors="replace")[-2000:]
            raise BenchError(f"s3: {FAST_SERVER.name} did not come up; its log ends:\n{tail}")
        yield endpoint, process.pid
    finally:
        # The group is that of our child, which is not waited for yet: its PID (so
        # the group's id) cannot have been reused.
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(10)
        except ProcessLookupError:
            process.wait()
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
