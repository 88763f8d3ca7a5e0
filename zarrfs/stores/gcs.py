"""A store backed by a Google Cloud Storage bucket, through obstore.

Configured as Google's own tools are:

- GOOGLE_APPLICATION_CREDENTIALS: a service account's JSON key (or the authorized
  user file of ``gcloud auth application-default login``); without it, obstore's
  default chain (gcloud's application default credentials, then the metadata
  server of a Google Cloud machine);
- ``anonymous``: unsigned requests, for public buckets. obstore signs every write
  (it fetches a token even then), so an anonymous mount reads and refuses writes;
- STORAGE_EMULATOR_HOST: an emulator's endpoint, as the Google client libraries and
  gcsfs read it (with no token, unless credentials are named too); a service
  account file may also name one as "gcs_base_url" (with "disable_oauth": true).

obstore speaks GCS's XML API (GET, HEAD, PUT, DELETE of /BUCKET/OBJECT, and
ListObjectsV2-style listings). An object's version is its generation: every PUT is
conditioned on the generation last seen (x-goog-if-generation-match), 0 for an
object the mount knows absent or never saw; ranges read together name it
(?generation=N). A read "unless it is still this generation" cannot be asked: the
value is read and its generation compared. Values carry their CRC-32C as
x-goog-meta-zarrfs-crc32c (checksums.py).
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Any

from obstore.store import GCSStore as _Bucket

from zarrfs.stores import checksums, cloud_config
from zarrfs.stores.objstore import ObjectStore
from zarrfs.stores.s3_errors import Dialect
from zarrfs.stores.s3_versions import UNKNOWN

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "https://storage.googleapis.com"
SCHEMES = ("gs", "gcs")  # gcsfs reads both
_SECRETS = ("GOOGLE_", "GCS_", "STORAGE_")

GCS = Dialect(
    "GCS",
    "gs",
    "bucket",
    frozenset({"NoSuchBucket"}),
    re.compile(
        "AccessDenied|AccountDisabled|AuthenticationRequired|ExpiredToken|InvalidSecurity"
        "|MissingSecurityHeader|UserProjectMissing|UserProjectAccountProblem"
    ),
    re.compile(r"metadata\.google\.internal|169\.254\.169\.254|computeMetadata"),
    "no Google credentials found (set GOOGLE_APPLICATION_CREDENTIALS to a service "
    "account's JSON key, or read a public bucket anonymously)",
)


class GcsStore(ObjectStore):
    dialect = GCS
    checksum_header = checksums.GCS_HEADER

    def __init__(self, url: str, *, anonymous: bool = False) -> None:
        """``url`` is "gs://bucket[/prefix]" (or gcs://); ``anonymous`` sends
        unsigned requests (public buckets) and reads no credentials at all.

        Nothing is fetched here (``check`` asks the bucket); a bad URL, endpoint or
        credentials file raises StoreError with errno EINVAL."""
        _, self.bucket, self.prefix = cloud_config.parse_url(url, SCHEMES, "gs://bucket[/prefix]")
        self._url = f"gs://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")
        settings: dict[str, Any] = {}
        emulator = os.environ.get("STORAGE_EMULATOR_HOST", "")
        if emulator and "://" not in emulator:
            emulator = "http://" + emulator  # as the Google libraries take "host:port"
        endpoint, scheme = cloud_config.checked_endpoint(
            emulator, self._url, "STORAGE_EMULATOR_HOST"
        )
        credentials = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS", "")
        self._anonymous = anonymous
        if anonymous:
            settings["skip_signature"] = True
        elif endpoint and not credentials:
            # What object_store takes for an emulator: a service account that asks
            # for no token (it would fetch one from a metadata server otherwise).
            account = {"disable_oauth": True, "client_email": "", "private_key": ""}
            account |= {"private_key_id": "", "gcs_base_url": endpoint}
            settings["service_account_key"] = json.dumps(account)
        elif credentials:
            what = "GOOGLE_APPLICATION_CREDENTIALS"
            found = cloud_config.read_json(credentials, self._url, what)
            if found.get("type", "service_account") == "service_account":
                # obstore reads the emulator settings of a service account file only.
                settings["service_account"] = credentials
                named = found.get("gcs_base_url")
                if isinstance(named, str) and not endpoint:
                    endpoint, scheme = cloud_config.checked_endpoint(named, self._url, what)
            else:
                settings["application_credentials"] = credentials
        if endpoint:
            settings["base_url"] = endpoint
        self._endpoint = endpoint or DEFAULT_ENDPOINT
        self._connect(_Bucket, settings, scheme, lambda e: cloud_config.scrub(e, _SECRETS))

    def acquire_writer_lease(self, run_dir: str) -> None:
        if self._anonymous:
            # Refused here, without a write that would first wait for a token.
            self._denied = True
            log.warning(
                "%s: an anonymous mount of Google Cloud Storage cannot write: writes fail "
                "with EACCES",
                self._url,
            )
            return
        super().acquire_writer_lease(run_dir)

    def _version_of(self, meta: Any) -> Any:
        """The generation (x-goog-generation); UNKNOWN where a server sends none, so
        that no write is conditioned on what is not known."""
        return meta.get("version") or UNKNOWN

    def versions(self, prefix: str, most: int) -> dict[str, str] | None:
        """None, with no request: a listing names each object's ETag, not the
        generation its version is."""
        return None

    def _replace_mode(self, version: Any) -> Any:
        return {"version": version}  # x-goog-if-generation-match

    def _version_options(self, meta: Any) -> Any:
        return {"version": meta.get("version")}  # ?generation=

    def _unless_options(self, tag: str) -> dict[str, Any] | None:
        """None: a GET can be conditioned on a generation's match only (If-None-Match
        takes an ETag, and a version's tag here is its generation)."""
        return None
