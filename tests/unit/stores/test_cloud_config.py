"""How the Google Cloud Storage and Azure stores are configured (zarrfs/stores/gcs.py,
azure.py, cloud_config.py): URL forms, each service's own variables, anonymous
reads, and errors in one line without secrets."""

from __future__ import annotations

import base64
import errno
import hashlib
import hmac
import json
from pathlib import Path

import pytest

from tests.support.clouds import (
    ACCOUNT,
    ACCOUNT_KEY,
    AzContainer,
    Cloud,
    GcsBucket,
    isolate_clouds,
    public_container,
)
from zarrfs.errors import StoreError
from zarrfs.stores.azure import AzureStore, parse_connection_string
from zarrfs.stores.gcs import GcsStore
from zarrfs.stores.location import StoreOpenError, StoreOptions, is_remote, kind, open_store


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("gs://b/p", "gs"),
        ("GCS://b", "gs"),
        ("az://c/p", "az"),
        ("abfs://c/p", "az"),
        ("abfss://c@acct.dfs.core.windows.net/p", "az"),
    ],
)
def test_location_kinds(url: str, expected: str) -> None:
    assert kind(url) == expected and is_remote(url)


@pytest.mark.parametrize(
    "url", ["gs://", "gs://b/../x", "gs:/b", "az://x", "az://c@example.com/p", "az://c/./p"]
)
def test_bad_urls_are_refused(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate_clouds(monkeypatch)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "acct")
    make = GcsStore if url.startswith("gs") else AzureStore
    with pytest.raises(StoreError) as caught:
        make(url)
    assert caught.value.errno == errno.EINVAL


def test_an_abfs_url_names_the_account(monkeypatch: pytest.MonkeyPatch) -> None:
    isolate_clouds(monkeypatch)
    store = AzureStore("abfss://cont@myacct.dfs.core.windows.net/a/b", anonymous=True)
    assert (store.bucket, store.prefix) == ("cont", "a/b")
    assert store.describe() == "az://cont/a/b"
    assert store._endpoint == "https://myacct.blob.core.windows.net"


def test_azure_needs_an_account(monkeypatch: pytest.MonkeyPatch) -> None:
    isolate_clouds(monkeypatch)
    with pytest.raises(StoreOpenError, match="no storage account named"):
        open_store("az://cont/p")


def test_connection_strings_are_parsed() -> None:
    text = "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=k==;EndpointSuffix=x.net"
    assert parse_connection_string(text) == {
        "defaultendpointsprotocol": "https",
        "accountname": "a",
        "accountkey": "k==",
        "endpointsuffix": "x.net",
    }


def test_the_az_cli_variables(az_container: AzContainer, monkeypatch: pytest.MonkeyPatch) -> None:
    """AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY, the az CLI's names."""
    az_container.put("p/k", b"1")
    isolate_clouds(monkeypatch)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT", ACCOUNT)
    monkeypatch.setenv("AZURE_STORAGE_KEY", ACCOUNT_KEY)
    monkeypatch.setenv("AZURE_STORAGE_ENDPOINT", az_container.endpoint)
    store = open_store(az_container.url("p"))
    assert store.get("k") == b"1"
    store.set("k", b"2")
    assert az_container.get("p/k") == b"2"


def _account_sas(permissions: str) -> str:
    """An account SAS of Azurite's account (signed version 2019-12-12)."""
    fields = [ACCOUNT, permissions, "b", "sco", "", "2099-01-01T00:00:00Z", "", "", "2019-12-12"]
    signed = "\n".join(fields) + "\n"
    key = base64.b64decode(ACCOUNT_KEY)
    digest = base64.b64encode(hmac.new(key, signed.encode(), hashlib.sha256).digest()).decode()
    signature = digest.replace("+", "%2B").replace("/", "%2F").replace("=", "%3D")
    query = f"sv=2019-12-12&ss=b&srt=sco&sp={permissions}&se=2099-01-01T00:00:00Z&spr="
    return f"?{query.removesuffix('&spr=')}&sig={signature}"


def test_a_sas_token(az_container: AzContainer, monkeypatch: pytest.MonkeyPatch) -> None:
    """AZURE_STORAGE_SAS_TOKEN as the portal gives it (with its "?"); a SAS that may
    only read refuses writes with EACCES, and no message quotes the signature."""
    az_container.put("p/k", b"1")
    isolate_clouds(monkeypatch)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", ACCOUNT)
    monkeypatch.setenv("AZURE_STORAGE_ENDPOINT", az_container.endpoint)
    monkeypatch.setenv("AZURE_STORAGE_SAS_TOKEN", _account_sas("rwdlc"))
    store = open_store(az_container.url("p"))
    assert store.get("k") == b"1"
    store.set("k", b"2")
    assert az_container.get("p/k") == b"2"
    reading = _account_sas("rl")
    monkeypatch.setenv("AZURE_STORAGE_SAS_TOKEN", reading)
    store = open_store(az_container.url("p"))
    assert store.get("k") == b"2"
    with pytest.raises(StoreError) as caught:
        store.set("k", b"3")
    assert caught.value.errno == errno.EACCES
    assert str(caught.value).startswith(
        f"writing {az_container.url('p')}/k: access denied (HTTP 403"
    )
    assert "sig=" not in str(caught.value) and reading.rpartition("sig=")[2] not in str(
        caught.value
    )


def test_a_wrong_key_is_access_denied(
    az_container: AzContainer, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = base64.b64encode(b"w" * 64).decode()
    conn = f"AccountName={ACCOUNT};AccountKey={wrong};BlobEndpoint={az_container.endpoint}"
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", conn)
    with pytest.raises(StoreOpenError) as caught:
        open_store(az_container.url("p"))
    assert str(caught.value) == (
        f"checking {az_container.url('p')}: access denied (HTTP 403 AuthorizationFailure)"
    )


def test_an_anonymous_read_of_a_public_container(
    az_container: AzContainer, monkeypatch: pytest.MonkeyPatch
) -> None:
    az_container.put("p/k", b"public")
    public_container(az_container)
    isolate_clouds(monkeypatch)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", ACCOUNT)
    monkeypatch.setenv("AZURE_STORAGE_ENDPOINT", az_container.endpoint)
    store = AzureStore(az_container.url("p"), anonymous=True)
    assert store.get("k") == b"public"
    assert store.get_range("k", -2, 2) == b"ic"  # a HEAD, then a range: no suffix ranges


def test_a_missing_bucket_or_container(cloud: Cloud) -> None:
    scheme, word = ("gs", "bucket") if cloud.url().startswith("gs") else ("az", "container")
    with pytest.raises(StoreOpenError) as caught:
        open_store(f"{scheme}://no-such-{word}-here/p")
    assert str(caught.value) == f"{scheme}://no-such-{word}-here: {word} does not exist"


def test_a_service_account_file(
    gcs_bucket: GcsBucket, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """GOOGLE_APPLICATION_CREDENTIALS naming a service account's JSON key; the
    emulator settings object_store reads in it ("gcs_base_url", "disable_oauth")."""
    account = {
        "type": "service_account",
        "client_email": "zarrfs@example.iam.gserviceaccount.com",
        "private_key": "",
        "private_key_id": "",
        "gcs_base_url": gcs_bucket.server.endpoint,
        "disable_oauth": True,
    }
    path = tmp_path / "account.json"
    path.write_text(json.dumps(account))
    monkeypatch.delenv("STORAGE_EMULATOR_HOST")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
    store = open_store(gcs_bucket.url("p"))
    store.set("k", b"1")
    assert gcs_bucket.get("p/k") == b"1" and store.get("k") == b"1"
    path.write_text("{not json")
    with pytest.raises(StoreOpenError) as caught:
        open_store(gcs_bucket.url("p"))
    assert str(caught.value) == (
        f"gs://{gcs_bucket.name}/p: GOOGLE_APPLICATION_CREDENTIALS: {str(path)!r} is no JSON "
        "credentials file"
    )


def test_anonymous_gcs_requests_are_unsigned(gcs_bucket: GcsBucket) -> None:
    gcs_bucket.put("p/k", b"public")
    del gcs_bucket.server.authorized[:]
    store = open_store(gcs_bucket.url("p"), StoreOptions(anonymous=True))
    assert store.get("k") == b"public" and store.list_dir("").keys == ("k",)
    assert gcs_bucket.server.authorized and not any(gcs_bucket.server.authorized)
