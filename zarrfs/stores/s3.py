"""A store backed by an S3 bucket (or an S3-compatible server), through obstore.

obstore (Rust object_store bindings) makes each call in native code with the GIL
released, so the fetch pool's threads really run in parallel, and it retries
transient failures itself. Configuration (AWS conventions only) is s3_config.py's;
the requests, conditional PUTs (If-Match on the ETag last seen, If-None-Match: *),
checksums, conditional GETs and the writer lease are objstore.py's, shared with
Google Cloud Storage and Azure.

S3 has no directories: a value is an object, a prefix a common prefix of a
delimited listing; "directory marker" objects ("a/b/") are neither.

Every value PUT carries its CRC-32C as user metadata (objstore.py), and obstore
sends a SHA-256 of the body that S3 verifies before storing it (checksums.py).

No message raised here carries text of the server's or of obstore's: the body of
a signature error can echo the access key and the session token, so errors are
rebuilt from their HTTP status, S3 error code and kind alone (s3_errors.py).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from obstore.store import S3Store as _Bucket

from zarrfs.stores import checksums
from zarrfs.stores import s3_config as config
from zarrfs.stores.objstore import ObjectStore
from zarrfs.stores.s3_errors import S3

log = logging.getLogger(__name__)

# Kept importable from here: the retry policy and client limits (s3_config.py).
RETRY = config.RETRY


class S3Store(ObjectStore):
    dialect = S3

    def __init__(
        self,
        url: str,
        *,
        anonymous: bool = False,
        endpoint_url: str = "",
        region: str = "",
        profile: str = "",
    ) -> None:
        """``url`` is "s3://bucket" or "s3://bucket/prefix"; ``anonymous`` sends
        unsigned requests (public buckets) and reads no credentials at all;
        ``endpoint_url``, ``region`` and ``profile`` win over the environment and
        the AWS config files (s3_config.resolve).

        Nothing is fetched here (``check`` asks the bucket); a bad URL, endpoint
        or AWS profile raises StoreError with errno EINVAL."""
        self.bucket, self.prefix = config.parse_url(url)
        self._url = f"s3://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")
        wanted = config.Settings(endpoint_url, region, profile, anonymous)
        resolved = config.resolve(self._url, wanted)
        if resolved.origins:
            log.debug("%s: %s", self._url, ", ".join(resolved.origins))
        settings: dict[str, Any] = resolved.store_config()
        settings.update(checksums.upload_settings(os.environ))
        if anonymous:
            settings["skip_signature"] = True
        self._endpoint = resolved.endpoint
        self._connect(
            _Bucket,
            settings,
            resolved.scheme,
            config.scrub,
            credential_provider=resolved.provider,
        )
