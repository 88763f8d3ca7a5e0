"""A store backed by an Azure Blob Storage container, through obstore.

Configured as Azure's own tools are (the az CLI's names and adlfs's alike):

- AZURE_STORAGE_CONNECTION_STRING: AccountName, AccountKey or
  SharedAccessSignature, BlobEndpoint (or DefaultEndpointsProtocol and
  EndpointSuffix), UseDevelopmentStorage=true (Azurite on its default port); what
  it sets comes before the variables below;
- AZURE_STORAGE_ACCOUNT_NAME (or AZURE_STORAGE_ACCOUNT), AZURE_STORAGE_ACCOUNT_KEY
  (or AZURE_STORAGE_KEY), AZURE_STORAGE_SAS_TOKEN, AZURE_STORAGE_ENDPOINT; without
  a key or a SAS, obstore's chain (service principal, workload identity, the
  managed identity of an Azure machine);
- ``anonymous``: unsigned requests, for containers of public access.

URLs: az://container/prefix and abfs[s]://container/prefix, as adlfs and obstore
write them; abfs[s]://container@account.dfs.core.windows.net/prefix names the
account too. An object's version is its ETag (If-Match, If-None-Match: * for PUTs;
If-None-Match on it for a GET, answered 304). Azure has no suffix ranges: the last
n bytes of a blob are read after a HEAD. Values carry their CRC-32C as
x-ms-meta-zarrfs_crc32c (metadata names are C# identifiers: no "-").
"""

from __future__ import annotations

import errno
import os
import re
from typing import Any

from obstore.store import AzureStore as _Bucket

from zarrfs.errors import StoreError
from zarrfs.stores import checksums, cloud_config
from zarrfs.stores.objstore import ObjectStore
from zarrfs.stores.s3_errors import Dialect

SCHEMES = ("az", "abfs", "abfss")
_SECRETS = ("AZURE_",)
_ACCOUNT_HOST = re.compile(r"([a-z0-9]{3,24})\.(?:dfs|blob)\.core\.windows\.net")

AZURE = Dialect(
    "Azure",
    "az",
    "container",
    frozenset({"ContainerNotFound", "ContainerBeingDeleted"}),
    re.compile(
        "AuthenticationFailed|AuthorizationFailure|AuthorizationPermissionMismatch"
        "|AuthorizationSourceIPMismatch|AuthorizationProtocolMismatch|AccountIsDisabled"
        "|InsufficientAccountPermissions|NoAuthenticationInformation|PublicAccessNotPermitted"
    ),
    re.compile(r"169\.254\.169\.254|/metadata/identity/oauth2"),
    "no Azure credentials found (set AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_SAS_TOKEN or "
    "AZURE_STORAGE_CONNECTION_STRING, or read a public container anonymously)",
)


def parse_connection_string(text: str) -> dict[str, str]:
    """ "Key=Value;..." with keys in lower case (values may hold "=")."""
    fields = {}
    for part in text.split(";"):
        name, sep, value = part.partition("=")
        if sep and name.strip():
            fields[name.strip().lower()] = value.strip()
    return fields


def _env(*names: str) -> str:
    return next((os.environ[n] for n in names if os.environ.get(n)), "")


class AzureStore(ObjectStore):
    dialect = AZURE
    suffix_ranges = False
    checksum_metadata = checksums.AZURE_METADATA
    checksum_header = checksums.AZURE_HEADER

    def __init__(self, url: str, *, anonymous: bool = False) -> None:
        """``url`` is "az://container[/prefix]" (or abfs[s]://); ``anonymous`` sends
        unsigned requests (public containers) and reads no credentials at all.

        Nothing is fetched here (``check`` asks the container); a bad URL, endpoint
        or connection string raises StoreError with errno EINVAL."""
        form = "az://container[/prefix]"
        _, container, self.prefix = cloud_config.parse_url(url, SCHEMES, form)
        self.bucket, _, host = container.partition("@")
        self._url = f"az://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")
        settings, secrets = self._settings(host, anonymous)
        account = settings.get("account_name") or os.environ.get("AZURE_STORAGE_ACCOUNT_NAME")
        if not account and not settings.get("use_emulator"):
            raise StoreError(
                f"{self._url}: no storage account named (set AZURE_STORAGE_ACCOUNT_NAME or "
                "AZURE_STORAGE_CONNECTION_STRING)",
                errno.EINVAL,
            )
        named = settings.get("endpoint") or _env("AZURE_STORAGE_ENDPOINT", "AZURE_ENDPOINT")
        endpoint, scheme = cloud_config.checked_endpoint(named, self._url, "the Azure endpoint")
        if settings.get("use_emulator") and not endpoint:
            endpoint, scheme = "http://127.0.0.1:10000/devstoreaccount1", "http"
        self._endpoint = endpoint or f"https://{account}.blob.core.windows.net"
        self._connect(_Bucket, settings, scheme, lambda e: cloud_config.scrub(e, _SECRETS, secrets))

    def _listed_tag(self, meta: Any) -> str:
        """A listing names the ETag without the quotes a GET's header has."""
        tag = self._version(meta).tag
        return tag if tag.startswith('"') else f'"{tag}"'

    def _settings(self, host: str, anonymous: bool) -> tuple[dict[str, Any], tuple[str, ...]]:
        """obstore's configuration from the URL's host, the connection string and
        the variables obstore does not read itself; and the secrets among them."""
        settings: dict[str, Any] = {}
        if host:
            found = _ACCOUNT_HOST.fullmatch(host.lower())
            if not found:
                raise StoreError(
                    f"{self._url}: {host!r} is no <account>.dfs.core.windows.net", errno.EINVAL
                )
            settings["account_name"] = found.group(1)
        connection = os.environ.get("AZURE_STORAGE_CONNECTION_STRING", "")
        fields = parse_connection_string(connection)
        if fields.get("usedevelopmentstorage", "").lower() == "true":
            settings["use_emulator"] = True
        if "accountname" in fields:
            settings.setdefault("account_name", fields["accountname"])
        if "blobendpoint" in fields:
            settings["endpoint"] = fields["blobendpoint"]
        elif "endpointsuffix" in fields and "account_name" in settings:
            protocol = fields.get("defaultendpointsprotocol", "https")
            account, suffix = settings["account_name"], fields["endpointsuffix"]
            settings["endpoint"] = f"{protocol}://{account}.blob.{suffix}"
        if account := _env("AZURE_STORAGE_ACCOUNT"):
            settings.setdefault("account_name", account)
        secret_fields = ("accountkey", "sharedaccesssignature")
        secrets = tuple(v for k, v in fields.items() if k in secret_fields)
        if anonymous:
            settings["skip_signature"] = True
            return settings, secrets
        if "accountkey" in fields:
            settings["account_key"] = fields["accountkey"]
        elif "sharedaccesssignature" in fields:
            settings["sas_key"] = fields["sharedaccesssignature"].lstrip("?")
        elif key := _env("AZURE_STORAGE_KEY"):
            if not _env("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_ACCESS_KEY"):
                settings["account_key"] = key
        elif sas := _env("AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_SAS_KEY"):
            settings["sas_key"] = sas.lstrip("?")  # the portal's form has a leading "?"
        return settings, secrets
