"""What configuring Google Cloud Storage and Azure stores shares: their URLs, the
endpoint a test or an emulator names, and configuration errors without secrets.

The client limits and retries are S3's (s3_config.py): one policy for every
object store.
"""

from __future__ import annotations

import errno
import json
import os
import re
from typing import Any
from urllib.parse import urlsplit

from zarrfs.errors import StoreError
from zarrfs.stores.s3_config import path_of

_CONTAINER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{1,254}")
# A credentials file larger than this is no credentials file: not read whole.
CREDENTIALS_LIMIT = 1 << 20
_SECRET_WORDS = ("SECRET", "TOKEN", "KEY", "CONNECTION", "SAS", "CREDENTIALS")


def parse_url(url: str, schemes: tuple[str, ...], form: str) -> tuple[str, str, str]:
    """(scheme, container, prefix) of "<scheme>://container/prefix", the scheme one
    of ``schemes``; ``form`` is what the error calls a good URL. The container may
    carry "@host" (abfs://container@account.dfs.core.windows.net/...): it is left
    on for the caller."""
    scheme, sep, rest = url.partition("://")
    container, _, prefix = rest.partition("/")
    name = container.partition("@")[0]
    if scheme.lower() not in schemes or not sep or not _CONTAINER.fullmatch(name):
        raise StoreError(f"{url!r}: not a {form} URL", errno.EINVAL)
    try:
        return scheme.lower(), container, path_of(prefix)
    except StoreError:
        raise StoreError(f"{url!r}: invalid prefix", errno.EINVAL) from None


def checked_endpoint(found: str, url: str, what: str) -> tuple[str, str]:
    """(endpoint URL without a trailing "/", its scheme); ("", "") for none."""
    if not found:
        return "", ""
    parts = urlsplit(found)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        # Checked here: object_store would panic at every request instead.
        raise StoreError(f"{url}: {what} is no http(s) URL", errno.EINVAL)
    return found.rstrip("/"), parts.scheme.lower()


def read_json(path: str, url: str, what: str) -> dict[str, Any]:
    """A credentials file's JSON object; StoreError (EINVAL) naming ``what`` (the
    variable that names it), never quoting the file."""
    try:
        with open(path, "rb") as f:
            data = f.read(CREDENTIALS_LIMIT + 1)
    except OSError as e:
        reason = f"{url}: {what}: cannot read {path!r} ({e.strerror})"
        raise StoreError(reason, errno.EINVAL) from None
    try:
        found = json.loads(data) if len(data) <= CREDENTIALS_LIMIT else None
    except ValueError:
        found = None
    if not isinstance(found, dict):
        raise StoreError(f"{url}: {what}: {path!r} is no JSON credentials file", errno.EINVAL)
    return found


def scrub(e: Exception, prefixes: tuple[str, ...], secrets: tuple[str, ...] = ()) -> str:
    """The first line of a configuration error, any secret of the environment (a
    variable of ``prefixes`` whose name says it holds one) and ``secrets`` cut."""
    text = (str(e) or type(e).__name__).splitlines()[0]
    values = [
        value
        for name, value in os.environ.items()
        if name.startswith(prefixes) and any(word in name for word in _SECRET_WORDS)
    ]
    for value in sorted([*values, *secrets], key=len, reverse=True):
        if len(value) > 3:
            text = text.replace(value, "***")
    return text
