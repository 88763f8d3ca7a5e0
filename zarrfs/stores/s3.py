"""A store backed by an S3 bucket (or an S3-compatible server), through obstore.

obstore (Rust object_store bindings) makes each call in native code with the GIL
released, so the fetch pool's threads really run in parallel, and it retries
transient failures itself. Configuration follows the AWS conventions only:
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION /
AWS_DEFAULT_REGION, AWS_ENDPOINT_URL (http:// allowed), web identity and instance
credentials (read by obstore), and AWS_PROFILE with ~/.aws/config and
~/.aws/credentials (read through boto3: obstore cannot).

Keys are "/"-separated and map to "<prefix>/<key>". S3 has no directories: a value
is an object, a prefix a common prefix of a delimited listing; "directory marker"
objects ("a/b/") are neither. Nothing outside the prefix is read, written or
deleted: key components "." and ".." are refused.

No message raised here carries text of the server's or of obstore's: the body of
a signature error can echo the access key and the session token, so errors are
rebuilt from their HTTP status, S3 error code and kind alone.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import obstore
from obstore import exceptions as _errors
from obstore.store import S3Store as _Bucket

from zarrfs.errors import InvalidValueError, StoreError
from zarrfs.stores.base import Listing, Store, check_ranges, resolve_range

# Transient failures (5xx, throttling's 503 SlowDown, dropped connections, timeouts)
# are retried by obstore with exponential backoff and full jitter: 0.1 s doubling
# up to 2 s, at most 5 retries, none started after 10 s. A mount answers EIO then,
# rather than hang a reader for obstore's default of 3 minutes.
_BACKOFF = {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=2)}
RETRY: Any = {"max_retries": 5, "retry_timeout": timedelta(seconds=10), "backoff": _BACKOFF}
# A connection must come up in 5 s and a response may stall for at most 30 s (both
# retried); one request may take 5 minutes in all: a 256 MiB range at 1 MB/s.
CLIENT: Any = {"connect_timeout": "5s", "read_timeout": "30s", "timeout": "5min"}

# S3 error codes that say "these credentials may not do this" (EACCES).
_DENIED = re.compile(
    "AccessDenied|AllAccessDisabled|AccountProblem|ExpiredToken|InvalidAccessKeyId"
    "|InvalidToken|SignatureDoesNotMatch|TokenRefreshRequired"
)
_STATUS = re.compile(r"status code: (\d{3})")
_CODE = re.compile(r"<Code>(\w{1,64})</Code>")
_RETRIES = re.compile(r"after (\d+) retries")
_KIND = re.compile(r"\bkind: (\w{1,32})")
# Where obstore fetches credentials when none are configured (EC2, ECS).
_METADATA = re.compile(r"169\.254\.169\.254|169\.254\.170\.2|fd00:ec2::254|/latest/api/token")
_BUCKET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{1,254}")
# obstore runs one runtime of threads per process, started at its first request; a
# fork's child keeps none of the threads, and its requests would wait forever.
_state = {"used": False, "forked": False}
os.register_at_fork(after_in_child=lambda: _state.update(forked=_state["used"]))
_MISSING = object()  # an obstore call found no object (it raised FileNotFoundError)
_UNSATISFIABLE = object()  # a ranged GET the object cannot answer (416, or not partial)


class S3Store(Store):
    read_only = False
    remote = True
    listable = True

    def __init__(self, url: str, *, anonymous: bool = False) -> None:
        """``url`` is "s3://bucket" or "s3://bucket/prefix"; ``anonymous`` sends
        unsigned requests (public buckets) and reads no credentials at all.

        Nothing is fetched here (``check`` asks the bucket); a bad URL, endpoint
        or AWS profile raises StoreError with errno EINVAL."""
        self.bucket, self.prefix = _parse_url(url)
        self._url = f"s3://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")
        config: dict[str, Any] = {}
        provider = None
        if anonymous:
            config["skip_signature"] = True
        else:
            provider, region = _profile_credentials(self._url)
            if region and not _env("AWS_REGION", "AWS_DEFAULT_REGION"):
                config["region"] = region
        endpoint = _env("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT")
        scheme = urlsplit(endpoint).scheme.lower()
        if endpoint and (scheme not in ("http", "https") or not urlsplit(endpoint).hostname):
            # Checked here: object_store would panic at every request instead.
            raise StoreError(f"{self._url}: the AWS endpoint URL is no http(s) URL", errno.EINVAL)
        # obstore refuses plain HTTP unless told; an http:// endpoint is the user's choice.
        client = {**CLIENT, "allow_http": scheme == "http"}
        try:
            self._bucket = _Bucket(
                self.bucket,
                prefix=self.prefix or None,
                config=config,  # type: ignore[arg-type]
                client_options=client,
                retry_config=RETRY,
                credential_provider=provider,
            )
        except Exception as e:
            raise StoreError(f"{self._url}: {_scrub(e)}", errno.EINVAL) from None

    def describe(self) -> str:
        return self._url

    def close(self) -> None:
        """Nothing to release: obstore closes its pooled connections when the store
        is collected. Here so that every store can be closed alike."""

    def check(self) -> None:
        """Ask the bucket once (a listing of at most one key under the prefix), so
        that a mount can refuse at once: a StoreError with a one-line message
        ("s3://nobucket: bucket does not exist", "checking s3://b/p: access denied
        (HTTP 403 AccessDenied)"). A bucket whose objects may be read but not
        listed fails here too: zarrfs lists an S3 store."""
        stream = obstore.list(self._bucket, chunk_size=1)
        if self._call("checking", "", lambda: next(iter(stream), None)) is _MISSING:
            raise self._no_bucket()

    # -- reading -----------------------------------------------------------------------

    def get(self, key: str, *, limit: int | None = None) -> bytes | None:
        """One GET; with ``limit``, the size in its headers is checked before any of
        a larger body is read (the connection is dropped instead)."""
        value = self.get_buffer(key, limit=limit)
        return None if value is None else bytes(value)

    def get_buffer(self, key: str, *, limit: int | None = None) -> memoryview | None:
        """``get`` without the copy into ``bytes``: a read-only view of the body as
        obstore received it."""
        path = _path(key)
        result = self._call("reading", key, obstore.get, self._bucket, path) if path else None
        if result is None or result is _MISSING:
            return None
        size = result.meta["size"]
        if limit is not None and size > limit:
            # Dropped now: an exception a caller keeps would keep this frame, and with
            # it the response and its connection, open with the body unread.
            del result
            raise InvalidValueError(
                f"reading {self._where(key)}: {size} bytes, more than the limit of {limit}"
            )
        return memoryview(self._call("reading", key, result.bytes))

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        check_ranges([(start, length)])
        return self._range(key, _path(key), start, length)

    def _range(self, key: str, path: str, start: int, length: int) -> bytes | None:
        """One ranged GET where the range can be said without the size: an offset
        range, or a suffix range that covers the tail asked for; a HEAD first
        otherwise (a suffix range of 2**62 bytes must not fetch a whole object)."""
        if not path:
            return None
        if length == 0 or (start < 0 and -start > length):
            return self._range_by_size(key, path, start, length)
        bounds: Any = (start, start + length) if start >= 0 else {"suffix": -start}
        value = self._call("reading", key, _ranged_get, self._bucket, path, bounds, ranged=True)
        if value is _UNSATISFIABLE:
            # 416: the range starts at or past the end; a suffix range of an empty
            # object may come back whole (200, not 206): the size decides.
            return self._range_by_size(key, path, start, length)
        return None if value is _MISSING else value

    def _range_by_size(self, key: str, path: str, start: int, length: int) -> bytes | None:
        size = self._size(key, path)
        if size is None:
            return None
        offset, count = resolve_range(start, length, size)
        if count == 0:
            return b""
        bounds = (offset, offset + count)
        value = self._call("reading", key, _ranged_get, self._bucket, path, bounds)
        return None if value is _MISSING else value

    def get_ranges(self, key: str, ranges: list[tuple[int, int]]) -> list[bytes] | None:
        """A HEAD for the size, then one obstore ``get_ranges`` (ranges less than
        1 MiB apart merged into one request, up to 10 requests at once). The size
        comes first because obstore cannot take a range past the end."""
        check_ranges(ranges)
        path = _path(key)
        if len(ranges) == 1:
            value = self._range(key, path, *ranges[0])
            return None if value is None else [value]
        size = self._size(key, path)
        if size is None:
            return None
        spans = [resolve_range(start, length, size) for start, length in ranges]
        wanted = [(offset, count) for offset, count in spans if count]
        if not wanted:
            return [b"" for _ in spans]
        # The object may shrink after the HEAD: object_store then panics (see _call).
        starts, lengths = zip(*wanted)
        fetch = obstore.get_ranges
        values = self._call(
            "reading", key, fetch, self._bucket, path, starts=starts, lengths=lengths
        )
        if values is _MISSING:
            return None
        found = iter(values)
        return [bytes(next(found)) if count else b"" for _, count in spans]

    def _head(self, key: str, path: str) -> Any:
        meta = self._call("reading", key, obstore.head, self._bucket, path) if path else None
        return None if meta is _MISSING else meta

    def _size(self, key: str, path: str) -> int | None:
        meta = self._head(key, path)
        return None if meta is None else int(meta["size"])

    def size(self, key: str) -> int | None:
        return self._size(key, _path(key))

    def contains(self, key: str) -> bool:
        return self.size(key) is not None

    def mtime(self, key: str) -> float | None:
        meta = self._head(key, _path(key))
        return None if meta is None else meta["last_modified"].timestamp()

    def list_dir(self, prefix: str) -> Listing:
        """One delimited listing (obstore follows its pages). The listed prefix's own
        directory marker is no key of it."""
        path = _path(prefix)
        listing = obstore.list_with_delimiter
        listed = self._call("listing", prefix, listing, self._bucket, path or None)
        if listed is _MISSING:
            raise self._no_bucket()
        skip = len(path) + 1 if path else 0
        keys = [meta["path"][skip:] for meta in listed["objects"] if meta["path"] != path]
        prefixes = [name[skip:] for name in listed["common_prefixes"]]
        return Listing(tuple(sorted(k for k in keys if k)), tuple(sorted(p for p in prefixes if p)))

    def scan(self, prefix: str) -> Iterator[tuple[str, int]]:
        """One recursive listing. Directory markers are left out: a zero-byte object
        whose name is a prefix of the next key listed (S3 lists in key order, so a
        marker "a/" comes right before the keys under it)."""
        path = _path(prefix)
        skip = len(path) + 1 if path else 0
        chunks = iter(obstore.list(self._bucket, path or None, chunk_size=1000))
        held: tuple[str, int] | None = None
        while (chunk := self._call("listing", prefix, lambda: next(chunks, None))) is not None:
            if chunk is _MISSING:
                raise self._no_bucket()
            for meta in chunk:
                name = meta["path"][skip:]
                if meta["path"] == path or not name:
                    continue
                if held is not None and not (held[1] == 0 and name.startswith(held[0] + "/")):
                    yield held
                held = (name, int(meta["size"]))
        if held is not None:
            yield held

    # -- writing -----------------------------------------------------------------------

    def set(self, key: str, value: bytes, *, durable: bool = True) -> None:
        """One PUT: S3 shows readers the old object or the new one, never a mix, and
        a completed PUT is durable (so ``durable`` asks nothing more)."""
        self._put(key, _value_path(key), value)

    def _put(self, key: str, path: str, value: Any) -> None:
        # A single PUT (no multipart upload: an interrupted one would leave parts
        # behind); obstore joins a list of parts itself, outside the GIL.
        self._call("writing", key, obstore.put, self._bucket, path, value, use_multipart=False)

    def stage(self, key: str, value: bytes | Sequence[bytes]) -> tuple[str, str, Any]:
        """Nothing is sent before ``commit``: a PUT is already all-or-nothing."""
        if not isinstance(value, bytes | bytearray | memoryview):
            value = list(value)
        return key, _value_path(key), value

    def commit(self, staged: list[tuple[str, str, Any]]) -> None:
        """PUT each staged value in order; at the first failure the rest stay unput
        and the StoreError says how many were written."""
        for done, (key, path, value) in enumerate(staged):
            try:
                self._put(key, path, value)
            except StoreError as e:
                if len(staged) == 1:
                    raise
                written = f"{done} of {len(staged)} values written, the rest not"
                raise StoreError(f"{e} ({written})", e.errno) from None

    def delete(self, key: str, *, durable: bool = True) -> None:
        """S3 answers a DELETE of a missing key with success too."""
        self._call("deleting", key, obstore.delete, self._bucket, _value_path(key))

    # -- errors ------------------------------------------------------------------------

    def _where(self, key: str) -> str:
        return f"{self._url}/{key}" if key else self._url

    def _no_bucket(self) -> StoreError:
        return StoreError(f"s3://{self.bucket}: bucket does not exist")

    def _call(
        self, action: str, key: str, function: Callable[..., Any], *args: Any, **kw: Any
    ) -> Any:
        """``function(*args, **kw)``; ``_MISSING`` where it found no object (and with
        ``ranged=True``, ``_UNSATISFIABLE`` for a range the object cannot answer);
        any other failure as a StoreError raised ``from None``: obstore's message,
        which may quote the server, is never chained."""
        ranged = kw.pop("ranged", False)
        if _state["forked"]:
            raise StoreError(
                f"{action} {self._where(key)}: S3 was used before this process forked "
                "(open S3 stores after the fork)"
            )
        _state["used"] = True
        try:
            return function(*args, **kw)
        except FileNotFoundError as e:
            if _code(e) == "NoSuchBucket":
                raise self._no_bucket() from None
            return _MISSING
        except Exception as e:
            text = str(e)
            if ranged and ("416" in _STATUS.findall(text) or "non-partial" in text):
                return _UNSATISFIABLE
            raise self._failure(action, key, e) from None
        except BaseException as e:
            # object_store panics on what it does not expect (a range past the end):
            # pyo3 raises PanicException, a BaseException.
            if type(e).__name__ != "PanicException":
                raise
            raise StoreError(f"{action} {self._where(key)}: the S3 client failed") from None

    def _failure(self, action: str, key: str, e: Exception) -> StoreError:
        text, where, code = str(e), self._where(key), _code(e)
        if isinstance(e, ValueError):
            return StoreError(f"{action} {where}: not a valid S3 key", errno.EINVAL)
        if isinstance(e, _errors.InvalidPathError):
            # object_store refuses a whole listing over one such key.
            return StoreError(f"{action} {where}: a key below has an empty, '.' or '..' part")
        if code == "NoSuchBucket":
            return self._no_bucket()
        if _METADATA.search(text):
            return StoreError(
                f"{action} {where}: no AWS credentials found (set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY or AWS_PROFILE, or read a public bucket anonymously)",
                errno.EACCES,
            )
        statuses = _STATUS.findall(text)
        status = statuses[-1] if statuses else None
        if status:
            reason = f"HTTP {status}" + (f" {code}" if code else "")
            if code == "PermanentRedirect":
                reason += ": the bucket is in another region (set AWS_REGION)"
        elif kind := _KIND.search(text):
            names = {"Connect": "cannot connect", "Timeout": "timed out"}
            reason = names.get(kind.group(1), f"network error ({kind.group(1)})")
        else:
            reason = type(e).__name__
        denied = (_errors.PermissionDeniedError, _errors.UnauthenticatedError)
        if _DENIED.fullmatch(code or "") or status in ("401", "403") or isinstance(e, denied):
            return StoreError(f"{action} {where}: access denied ({reason})", errno.EACCES)
        retries = _RETRIES.search(text)
        after = f" after {retries.group(1)} retries" if retries else ""
        return StoreError(f"{action} {where}: {reason}{after}", errno.EIO)


def _ranged_get(bucket: _Bucket, path: str, bounds: Any) -> bytes:
    return bytes(obstore.get(bucket, path, options={"range": bounds}).bytes())


def _code(e: Exception) -> str | None:
    found = _CODE.search(str(e))
    return found.group(1) if found else None


def _scrub(e: Exception) -> str:
    """The first line of a configuration error, any secret of the environment cut."""
    text = (str(e) or type(e).__name__).splitlines()[0]
    for name, value in os.environ.items():
        secret = any(word in name for word in ("SECRET", "TOKEN", "KEY"))
        if name.startswith("AWS_") and secret and len(value) > 3:
            text = text.replace(value, "***")
    return text


def _path(key: str) -> str:
    """``key`` as an object path below the prefix ("" for the prefix itself);
    empty components are dropped, "." and ".." refused (they would leave it)."""
    parts = [p for p in key.split("/") if p]
    if "." in parts or ".." in parts or "\0" in key:
        raise StoreError(f"invalid key {key!r}", errno.EINVAL)
    return "/".join(parts)


def _value_path(key: str) -> str:
    """``_path`` of a key that names a value, so not the prefix itself."""
    if path := _path(key):
        return path
    raise StoreError(f"invalid key {key!r}", errno.EINVAL)


def _parse_url(url: str) -> tuple[str, str]:
    """(bucket, prefix) of "s3://bucket/prefix"."""
    scheme, sep, rest = url.partition("://")
    bucket, _, prefix = rest.partition("/")
    if scheme.lower() != "s3" or not sep or not _BUCKET.fullmatch(bucket):
        raise StoreError(f"{url!r}: not an s3://bucket[/prefix] URL", errno.EINVAL)
    try:
        return bucket, _path(prefix)
    except StoreError:
        raise StoreError(f"{url!r}: invalid prefix", errno.EINVAL) from None


def _env(*names: str) -> str:
    return next((os.environ[n] for n in names if os.environ.get(n)), "")


def _profile_credentials(url: str) -> tuple[Any, str | None]:
    """(credential provider, region) of an AWS profile read through boto3, or (None,
    None) where obstore reads everything itself: keys in the environment come
    before profiles (as in every AWS SDK), and without AWS_PROFILE or shared files
    there is no profile. A profile without credentials leaves obstore's own chain
    (web identity, ECS, EC2 instance metadata)."""
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        return None, None
    home = Path.home() / ".aws"
    files = [
        Path(_env("AWS_CONFIG_FILE") or home / "config"),
        Path(_env("AWS_SHARED_CREDENTIALS_FILE") or home / "credentials"),
    ]
    if not os.environ.get("AWS_PROFILE") and not any(f.is_file() for f in files):
        return None, None
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
