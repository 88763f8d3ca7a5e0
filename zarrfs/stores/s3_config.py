"""How the S3 store is configured: its URL, endpoint, credentials and client limits.

Configuration follows the AWS conventions only: AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION / AWS_DEFAULT_REGION,
AWS_ENDPOINT_URL (http:// allowed), web identity and instance credentials (read by
obstore), and AWS_PROFILE with ~/.aws/config and ~/.aws/credentials (read through
boto3: obstore cannot).
"""

from __future__ import annotations

import errno
import logging
import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from zarrfs.errors import StoreError

# Transient failures (5xx, throttling's 503 SlowDown, dropped connections, timeouts)
# are retried by obstore with exponential backoff and full jitter: 0.1 s doubling
# up to 2 s, at most 5 retries, none started after 10 s. A mount answers EIO then,
# rather than hang a reader for obstore's default of 3 minutes. (A conditional PUT
# that timed out is not retried: its outcome is unknown, see s3_versions.py.)
_BACKOFF = {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=2)}
RETRY: Any = {"max_retries": 5, "retry_timeout": timedelta(seconds=10), "backoff": _BACKOFF}
# A connection must come up in 5 s and an answer may stall for at most 30 s
# (waiting for its head, or between two pieces of its body); one request may take
# 5 minutes in all: a 256 MiB range at 1 MB/s. A trickling server is cut off there.
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 30.0
REQUEST_TIMEOUT = 300.0
# Libraries whose DEBUG records carry secrets: botocore logs request signatures
# and the bodies of STS answers (an assumed role's SecretAccessKey, SessionToken).
QUIETED = ("botocore", "boto3", "s3transfer")

_BUCKET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{1,254}")


def _seconds(name: str, default: float) -> float:
    """A timeout, shortened by tests through the environment (never lengthened
    past the default, nor below 0.1 s)."""
    try:
        value = float(os.environ.get(name, "") or default)
    except ValueError:
        return default
    return min(max(value, 0.1), default)


def client_options(scheme: str) -> dict[str, Any]:
    read = _seconds("ZARRFS_S3_READ_TIMEOUT", READ_TIMEOUT)
    total = _seconds("ZARRFS_S3_REQUEST_TIMEOUT", REQUEST_TIMEOUT)
    return {
        "connect_timeout": f"{int(CONNECT_TIMEOUT * 1000)}ms",
        "read_timeout": f"{int(read * 1000)}ms",
        "timeout": f"{int(total * 1000)}ms",
        # obstore refuses plain HTTP unless told; an http:// endpoint is the user's choice.
        "allow_http": scheme == "http",
    }


def env(*names: str) -> str:
    return next((os.environ[n] for n in names if os.environ.get(n)), "")


def endpoint(url: str) -> tuple[str, str]:
    """(endpoint URL, its scheme) from the environment; ("", "") for AWS itself."""
    found = env("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT")
    scheme = urlsplit(found).scheme.lower()
    if found and (scheme not in ("http", "https") or not urlsplit(found).hostname):
        # Checked here: object_store would panic at every request instead.
        raise StoreError(f"{url}: the AWS endpoint URL is no http(s) URL", errno.EINVAL)
    return found.rstrip("/"), scheme


def path_of(key: str) -> str:
    """``key`` as an object path below the prefix ("" for the prefix itself);
    empty components are dropped, "." and ".." refused (they would leave it)."""
    parts = [p for p in key.split("/") if p]
    if "." in parts or ".." in parts or "\0" in key:
        raise StoreError(f"invalid key {key!r}", errno.EINVAL)
    return "/".join(parts)


def parse_url(url: str) -> tuple[str, str]:
    """(bucket, prefix) of "s3://bucket/prefix"."""
    scheme, sep, rest = url.partition("://")
    bucket, _, prefix = rest.partition("/")
    if scheme.lower() != "s3" or not sep or not _BUCKET.fullmatch(bucket):
        raise StoreError(f"{url!r}: not an s3://bucket[/prefix] URL", errno.EINVAL)
    try:
        return bucket, path_of(prefix)
    except StoreError:
        raise StoreError(f"{url!r}: invalid prefix", errno.EINVAL) from None


def scrub(e: Exception) -> str:
    """The first line of a configuration error, any secret of the environment cut."""
    text = (str(e) or type(e).__name__).splitlines()[0]
    for name, value in os.environ.items():
        secret = any(word in name for word in ("SECRET", "TOKEN", "KEY"))
        if name.startswith("AWS_") and secret and len(value) > 3:
            text = text.replace(value, "***")
    return text


def quiet_libraries() -> None:
    """No DEBUG record of boto3 or botocore reaches zarrfs's log (``--log-level
    debug`` included): botocore logs signatures, and answers holding credentials."""
    for name in QUIETED:
        logger = logging.getLogger(name)
        if logger.getEffectiveLevel() < logging.INFO or logger.level < logging.INFO:
            logger.setLevel(logging.INFO)


def profile_credentials(url: str) -> tuple[Any, str | None]:
    """(credential provider, region) of an AWS profile read through boto3, or (None,
    None) where obstore reads everything itself: keys in the environment come
    before profiles (as in every AWS SDK), and without AWS_PROFILE or shared files
    there is no profile. A profile without credentials leaves obstore's own chain
    (web identity, ECS, EC2 instance metadata)."""
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        return None, None
    home = Path.home() / ".aws"
    files = [
        Path(env("AWS_CONFIG_FILE") or home / "config"),
        Path(env("AWS_SHARED_CREDENTIALS_FILE") or home / "credentials"),
    ]
    if not os.environ.get("AWS_PROFILE") and not any(f.is_file() for f in files):
        return None, None
    quiet_libraries()
    try:  # imported only here: boto3 takes a while to import
        import boto3
        import botocore.exceptions
        from obstore.auth.boto3 import Boto3CredentialProvider
    except ImportError:
        raise StoreError(
            f"{url}: AWS profiles need boto3 (pip install boto3)", errno.EINVAL
        ) from None
    try:
        session = boto3.Session()
        if session.get_credentials() is None:
            return None, session.region_name
        return Boto3CredentialProvider(session), session.region_name
    except botocore.exceptions.ProfileNotFound:
        name = os.environ.get("AWS_PROFILE", "default")
        raise StoreError(f"{url}: AWS profile {name!r} not found", errno.EINVAL) from None
    except botocore.exceptions.BotoCoreError as e:
        # botocore's messages name files and profiles, never key material.
        raise StoreError(f"{url}: AWS profile: {e}", errno.EACCES) from None
