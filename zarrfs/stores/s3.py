"""A store backed by an S3 bucket (or an S3-compatible server), through obstore.

obstore (Rust object_store bindings) makes each call in native code with the GIL
released, so the fetch pool's threads really run in parallel, and it retries
transient failures itself. Configuration (AWS conventions only) is s3_config.py's.

Keys are "/"-separated and map to "<prefix>/<key>". S3 has no directories: a value
is an object, a prefix a common prefix of a delimited listing; "directory marker"
objects ("a/b/") are neither. Nothing outside the prefix is read, written or
deleted: key components "." and ".." are refused.

Every PUT is conditional on the version the mount last read or stored (If-Match,
or If-None-Match: * for an object it knows absent or has never seen), so that a
request that timed out and reaches the server late cannot replace newer data; a
412 is a late request of the mount's own (written over) or another writer's change
(EIO: never overwritten). See s3_versions.py. A read-write mount holds the
prefix's writer lease (s3_lease.py). DELETE cannot be conditional in obstore.

No message raised here carries text of the server's or of obstore's: the body of
a signature error can echo the access key and the session token, so errors are
rebuilt from their HTTP status, S3 error code and kind alone.
"""

from __future__ import annotations

import errno
import threading
from typing import Any

from obstore.store import S3Store as _Bucket

from zarrfs.errors import StoreError
from zarrfs.stores import s3_config as config
from zarrfs.stores.objstore import _STRIPES, ObjectStore
from zarrfs.stores.s3_errors import no_bucket
from zarrfs.stores.s3_lease import LocalLock, WriterLease
from zarrfs.stores.s3_versions import Versions

# Kept importable from here: the retry policy and client limits (s3_config.py).
RETRY = config.RETRY


class S3Store(ObjectStore):
    def __init__(self, url: str, *, anonymous: bool = False) -> None:
        """``url`` is "s3://bucket" or "s3://bucket/prefix"; ``anonymous`` sends
        unsigned requests (public buckets) and reads no credentials at all.

        Nothing is fetched here (``check`` asks the bucket); a bad URL, endpoint
        or AWS profile raises StoreError with errno EINVAL."""
        self.bucket, self.prefix = config.parse_url(url)
        self._url = f"s3://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")
        settings: dict[str, Any] = {}
        provider = None
        if anonymous:
            settings["skip_signature"] = True
        else:
            provider, region = config.profile_credentials(self._url)
            if region and not config.env("AWS_REGION", "AWS_DEFAULT_REGION"):
                settings["region"] = region
        self._endpoint, scheme = config.endpoint(self._url)
        try:
            self._bucket = _Bucket(
                self.bucket,
                prefix=self.prefix or None,
                config=settings,  # type: ignore[arg-type]
                client_options=config.client_options(scheme),
                retry_config=config.RETRY,
                credential_provider=provider,
            )
        except Exception as e:
            raise StoreError(f"{self._url}: {config.scrub(e)}", errno.EINVAL) from None
        self._versions = Versions()
        self._stripes = [threading.Lock() for _ in range(_STRIPES)]
        self._local: LocalLock | None = None
        self._lease: WriterLease | None = None
        self._denied = False  # the lease could not be written: no write can be

    def _no_bucket(self) -> StoreError:
        return no_bucket(self.bucket)
