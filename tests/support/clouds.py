"""Google Cloud Storage and Azure for the tests, on 127.0.0.1: the GCS fake
(tests/support/gcs_server.py) and Azurite (Microsoft's emulator, installed from npm
into <repo>/.node by scripts/install.sh), each started and stopped by the tests; the
environment of a test pointed at them and at nothing of the user's."""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import os
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import obstore
import pytest
from obstore.store import AzureStore as _Container

from tests.support.gcs_server import GcsServer
from tests.support.paths import REPO
from tests.support.servers import STARTUP, _stop, free_port

AZURITE = REPO / ".node" / "node_modules" / "azurite" / "dist" / "src" / "blob" / "main.js"
# Azurite's well-known development account (public: it is in Microsoft's docs).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# obstore's names of the attributes that are no user metadata.
_STANDARD = frozenset(
    {"Content-Type", "Content-Disposition", "Content-Encoding", "Content-Language", "Cache-Control"}
)


class Cloud(Protocol):
    """A bucket or a container, as a test writes and reads it behind a store's back."""

    name: str

    def url(self, prefix: str = "") -> str: ...
    def put(self, key: str, value: bytes, metadata: dict[str, str] | None = None) -> None: ...
    def get(self, key: str) -> bytes | None: ...
    def metadata(self, key: str) -> dict[str, str]: ...
    def delete(self, key: str) -> None: ...
    def keys(self, prefix: str = "") -> list[str]: ...


@pytest.fixture(params=["gs", "az"])
def cloud(request: pytest.FixtureRequest) -> Cloud:
    """A new bucket of the GCS fake, then a new container of Azurite."""
    fixture = "gcs_bucket" if request.param == "gs" else "az_container"
    return request.getfixturevalue(fixture)  # type: ignore[no-any-return]


def isolate_clouds(monkeypatch: pytest.MonkeyPatch) -> None:
    """No Google or Azure configuration of the user's reaches a test (or its daemon)."""
    for name in list(os.environ):
        if name.startswith(("GOOGLE_", "AZURE_")) or name == "STORAGE_EMULATOR_HOST":
            monkeypatch.delenv(name)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.setenv("no_proxy", "127.0.0.1")


@dataclass
class GcsBucket:
    name: str
    server: GcsServer

    def url(self, prefix: str = "") -> str:
        return f"gs://{self.name}/{prefix}" if prefix else f"gs://{self.name}"

    def put(self, key: str, value: bytes, metadata: dict[str, str] | None = None) -> None:
        self.server.put(self.name, key, value, metadata)

    def get(self, key: str) -> bytes | None:
        return self.server.get(self.name, key)

    def metadata(self, key: str) -> dict[str, str]:
        return self.server.metadata(self.name, key)

    def delete(self, key: str) -> None:
        self.server.delete(self.name, key)

    def keys(self, prefix: str = "") -> list[str]:
        return self.server.keys(self.name, prefix)


@pytest.fixture
def gcs_bucket(gcs_server: GcsServer, monkeypatch: pytest.MonkeyPatch) -> GcsBucket:
    """A new, empty bucket of the fake, and STORAGE_EMULATOR_HOST pointed at it."""
    isolate_clouds(monkeypatch)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server.endpoint)
    name = f"zarrfs-{uuid.uuid4().hex[:16]}"
    gcs_server.create_bucket(name)
    return GcsBucket(name, gcs_server)


def _port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Azurite's blob service on a free port of 127.0.0.1; its account's endpoint URL
    ("http://127.0.0.1:PORT/devstoreaccount1")."""
    if not AZURITE.is_file():
        pytest.fail(f"Azurite is not installed ({AZURITE} is missing): run scripts/install.sh")
    root = tmp_path_factory.mktemp("azurite")
    for _ in range(3):
        port = free_port()
        with (root / "azurite.log").open("ab") as log:
            process = subprocess.Popen(
                ["node", str(AZURITE), "--blobHost", "127.0.0.1", "--blobPort", str(port),
                 "--location", str(root), "--silent", "--disableTelemetry", "--loose",
                 "--skipApiVersionCheck"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
        deadline = time.monotonic() + STARTUP
        while process.poll() is None and time.monotonic() < deadline:
            if _port_open(port):
                try:
                    yield f"http://127.0.0.1:{port}/{ACCOUNT}"
                finally:
                    _stop(process)
                return
            time.sleep(0.1)
        _stop(process)
    tail = (root / "azurite.log").read_text(errors="replace")[-2000:]
    pytest.fail(f"Azurite did not come up on 127.0.0.1; its log ends:\n{tail}")


def _shared_key_request(
    endpoint: str, method: str, resource: str, query: dict[str, str], **ms: str
) -> Any:
    """One request signed with the account's key (Shared Key): what obstore cannot
    do, creating a container and setting its access; ``ms``: x-ms-* headers
    ("blob_public_access" for x-ms-blob-public-access)."""
    headers = {f"x-ms-{k.replace('_', '-')}": v for k, v in ms.items()}
    headers["x-ms-date"] = email.utils.formatdate(usegmt=True)
    headers["x-ms-version"] = "2021-08-06"
    canonical_headers = "\n".join(f"{k}:{v}" for k, v in sorted(headers.items()))
    canonical = "".join(f"\n{k}:{v}" for k, v in sorted(query.items()))
    # The verb, eleven standard headers (all empty here), then the x-ms-* headers.
    signed = "\n".join([method, *[""] * 11, canonical_headers, f"/{ACCOUNT}/{ACCOUNT}/{resource}"])
    digest = hmac.new(base64.b64decode(ACCOUNT_KEY), (signed + canonical).encode(), hashlib.sha256)
    headers["Authorization"] = f"SharedKey {ACCOUNT}:{base64.b64encode(digest.digest()).decode()}"
    headers["Content-Length"] = "0"
    url = f"{endpoint}/{resource}?" + "&".join(f"{k}={v}" for k, v in query.items())
    request = urllib.request.Request(url, method=method, headers=headers)
    with _DIRECT.open(request, timeout=10) as response:
        return response.status


def connection_string(endpoint: str) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
        f"BlobEndpoint={endpoint};"
    )


@dataclass
class AzContainer:
    name: str
    endpoint: str
    client: Any  # obstore's AzureStore of the container: another writer

    def url(self, prefix: str = "") -> str:
        return f"az://{self.name}/{prefix}" if prefix else f"az://{self.name}"

    def put(self, key: str, value: bytes, metadata: dict[str, str] | None = None) -> None:
        attributes: Any = metadata or {}
        obstore.put(self.client, key, value, attributes=attributes, use_multipart=False)

    def get(self, key: str) -> bytes | None:
        try:
            return bytes(obstore.get(self.client, key).bytes())
        except FileNotFoundError:
            return None

    def metadata(self, key: str) -> dict[str, str]:
        """The blob's user metadata (obstore's attributes less the standard ones)."""
        attributes = obstore.get(self.client, key).attributes
        return {k: v for k, v in attributes.items() if k not in _STANDARD}

    def delete(self, key: str) -> None:
        obstore.delete(self.client, key)

    def keys(self, prefix: str = "") -> list[str]:
        found = obstore.list(self.client, prefix or None)
        return sorted(meta["path"] for chunk in found for meta in chunk)


@pytest.fixture
def az_container(azurite: str, monkeypatch: pytest.MonkeyPatch) -> AzContainer:
    """A new, empty container of Azurite, and AZURE_STORAGE_CONNECTION_STRING set to it."""
    isolate_clouds(monkeypatch)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", connection_string(azurite))
    name = f"zarrfs-{uuid.uuid4().hex[:16]}"
    _shared_key_request(azurite, "PUT", name, {"restype": "container"})
    client = _Container(
        name,
        config={"account_name": ACCOUNT, "account_key": ACCOUNT_KEY, "endpoint": azurite},
        client_options={"allow_http": True},
    )
    return AzContainer(name, azurite, client)


def public_container(container: AzContainer) -> None:
    """Blobs of the container readable without credentials (public access "blob")."""
    query = {"restype": "container", "comp": "acl"}
    _shared_key_request(container.endpoint, "PUT", container.name, query, blob_public_access="blob")
