"""How the S3 store is configured: its URL, endpoint, credentials and client limits.

Configuration follows the AWS conventions only, with the mount options
(``--endpoint-url``, ``--region``, ``--profile``, ``--anonymous``) first: then
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION /
AWS_DEFAULT_REGION, AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL (http:// allowed), web
identity and instance credentials (read by obstore), and last the profile
(AWS_PROFILE or ``--profile``) of ~/.aws/config and ~/.aws/credentials, read through
botocore (obstore cannot): its credentials, ``region`` and ``endpoint_url``. No
option carries a credential: they stay out of command lines and /proc/mounts.
"""

from __future__ import annotations

import errno
import logging
import os
import re
from dataclasses import dataclass
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


def endpoint(url: str, given: str = "") -> tuple[str, str]:
    """(endpoint URL, its scheme) of ``given`` (an option's, the environment's or a
    profile's); ("", "") for AWS itself. An endpoint is a place, never a secret: one
    with user info or a query string is refused, as are other schemes."""
    parts = urlsplit(given)
    scheme = parts.scheme.lower()
    if given and (scheme not in ("http", "https") or not parts.hostname):
        # Checked here: object_store would panic at every request instead.
        raise StoreError(f"{url}: the AWS endpoint URL is no http(s) URL", errno.EINVAL)
    if "@" in parts.netloc or parts.query or parts.fragment:
        raise StoreError(
            f"{url}: the AWS endpoint URL carries user info or a query string: credentials "
            "go in ~/.aws/credentials or the environment",
            errno.EINVAL,
        )
    return given.rstrip("/"), scheme


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
    debug`` included): botocore logs signatures, and answers holding credentials.
    Nor INFO ("Found credentials in shared credentials file"): a failed mount says
    one line, and where the settings came from is zarrfs's own DEBUG record."""
    for name in QUIETED:
        logger = logging.getLogger(name)
        if logger.getEffectiveLevel() < logging.WARNING or logger.level < logging.WARNING:
            logger.setLevel(logging.WARNING)


@dataclass(frozen=True)
class Settings:
    """What the command line says of S3 ("": not said, the environment or the
    profile decides)."""

    endpoint_url: str = ""
    region: str = ""
    profile: str = ""
    anonymous: bool = False  # unsigned requests: no credentials read at all


@dataclass(frozen=True)
class Resolved:
    """The S3 client's configuration, each value from the first place that has it:
    the option, the environment, the profile."""

    endpoint: str  # "" for AWS itself
    scheme: str  # of the endpoint: "http", "https" or ""
    region: str  # "" where nothing says (obstore's default, us-east-1)
    provider: Any  # the profile's credentials (botocore's), or None: obstore's own chain
    origins: tuple[str, ...]  # where the endpoint and region came from, for the log

    def store_config(self) -> dict[str, Any]:
        """obstore's ``config``: its values win over what obstore reads from the
        environment itself."""
        settings: dict[str, Any] = {}
        if self.endpoint:
            settings["endpoint"] = self.endpoint
        if self.region:
            settings["region"] = self.region
        return settings


# The environment variables of the endpoint, in the AWS SDKs' order (AWS_ENDPOINT is
# object_store's own name).
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT")
REGION_VARIABLES = ("AWS_REGION", "AWS_DEFAULT_REGION")
PROFILE_VARIABLES = ("AWS_DEFAULT_PROFILE", "AWS_PROFILE")  # botocore's order


def resolve(url: str, settings: Settings) -> Resolved:
    """The configuration of the store at ``url``: the endpoint and the region from
    ``settings``, else the environment, else the profile (its ``endpoint_url``, or
    ``endpoint_url`` under ``s3`` in its ``services`` section, which comes first, and
    its ``region``); credentials from the profile where ``settings`` names one, else
    from the environment's keys, else from the profile (the AWS CLI's order:
    ``--profile`` wins over AWS_ACCESS_KEY_ID). StoreError (EINVAL) for a profile
    that is named and missing, an unreadable AWS file or a bad endpoint."""
    profile = _Profile.load(url, settings.profile) if _wants_profile(settings) else None
    origins = []
    given, where = _first(settings.endpoint_url, ENDPOINT_VARIABLES, profile, "endpoint_url")
    if given:
        origins.append(f"endpoint {given.rstrip('/')} ({where})")
    end, scheme = endpoint(url, given)
    region, where = _first(settings.region, REGION_VARIABLES, profile, "region")
    if region:
        origins.append(f"region {region} ({where})")
    provider = None
    # Keys in the environment come before the profile's, but for a profile named by
    # an option (as the AWS CLI's --profile); obstore reads them itself.
    from_profile = settings.profile or not os.environ.get("AWS_ACCESS_KEY_ID")
    if profile is not None and not settings.anonymous and from_profile:
        provider = profile.credentials()
    return Resolved(end, scheme, region, provider, tuple(origins))


def _wants_profile(settings: Settings) -> bool:
    """A profile is read where one is named or an AWS file exists; without them
    botocore (slow to import) is left alone."""
    if settings.profile or env(*PROFILE_VARIABLES):
        return True
    return any(f.is_file() for f in aws_files())


def aws_files() -> tuple[Path, Path]:
    """The config and credentials files, as the AWS CLI finds them (without HOME,
    as under mount(8) or systemd, ``~`` is the user's home directory from passwd)."""
    home = Path(os.path.expanduser("~")) / ".aws"
    return (
        Path(env("AWS_CONFIG_FILE") or home / "config"),
        Path(env("AWS_SHARED_CREDENTIALS_FILE") or home / "credentials"),
    )


def _first(
    given: str, variables: tuple[str, ...], profile: _Profile | None, name: str
) -> tuple[str, str]:
    """(value, where it came from) of a setting: the option, the environment, the
    profile; ("", "") where none has it."""
    if given:
        return given, "option"
    for variable in variables:
        if os.environ.get(variable):
            return os.environ[variable], variable
    if profile is not None:
        value = profile.setting(name)
        if value:
            return value, f"profile {profile.name!r}"
    return "", ""


class _Profile:
    """One profile of the AWS config files, read through botocore."""

    def __init__(self, url: str, name: str, session: Any, scoped: dict[str, Any]) -> None:
        self._url = url
        self.name = name
        self._session = session  # botocore's Session
        self._scoped = scoped  # the profile's own section

    @classmethod
    def load(cls, url: str, name: str) -> _Profile:
        """The profile ``name`` (else AWS_PROFILE's, else "default"): StoreError if
        a named one is missing or the files cannot be parsed."""
        quiet_libraries()
        try:  # imported only here: botocore takes a while to import
            import botocore.exceptions
            import botocore.session
        except ImportError:
            raise StoreError(
                f"{url}: AWS profiles need boto3 (pip install boto3)", errno.EINVAL
            ) from None
        session = botocore.session.Session(profile=name or None)
        found = name or "default"
        try:
            found = session.get_config_variable("profile") or "default"
            scoped = session.get_scoped_config()
        except botocore.exceptions.ProfileNotFound:
            raise StoreError(f"{url}: AWS profile {found!r} not found", errno.EINVAL) from None
        except botocore.exceptions.BotoCoreError as e:
            # botocore's messages name files and profiles, never key material.
            raise StoreError(f"{url}: AWS config: {scrub(e)}", errno.EINVAL) from None
        return cls(url, found, session, scoped)

    def setting(self, name: str) -> str:
        """``name`` of the profile; for ``endpoint_url``, the ``s3`` entry of the
        profile's ``services`` section comes first, as in the AWS CLI."""
        if name == "endpoint_url":
            services = self._session.full_config.get("services", {})
            section = services.get(self._scoped.get("services", ""), {})
            s3 = section.get("s3", {}) if isinstance(section, dict) else {}
            if isinstance(s3, dict) and isinstance(s3.get("endpoint_url"), str):
                return str(s3["endpoint_url"]).strip()
        value = self._scoped.get(name, "")
        return value.strip() if isinstance(value, str) else ""

    def credentials(self) -> Any:
        """A credential provider of the profile, or None where it has none: obstore's
        own chain then (web identity, ECS, EC2 instance metadata). Made of botocore's
        session, so that it brings no region of its own into the store's config."""
        try:
            import botocore.exceptions
            from obstore.auth.boto3 import Boto3CredentialProvider
        except ImportError:
            raise StoreError(
                f"{self._url}: AWS profiles need boto3 (pip install boto3)", errno.EINVAL
            ) from None
        try:
            if self._session.get_credentials() is None:  # kept by the session
                return None
            return Boto3CredentialProvider(self._session)
        except botocore.exceptions.BotoCoreError as e:
            # botocore's messages name files and profiles, never key material.
            raise StoreError(f"{self._url}: AWS profile: {scrub(e)}", errno.EACCES) from None
