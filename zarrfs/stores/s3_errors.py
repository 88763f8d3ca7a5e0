"""obstore's exceptions as StoreErrors of one line, with nothing the server sent.

The body of a signature error can echo the access key, the session token or the
request's Authorization header (and a request's URL, an Azure SAS), so a message is
rebuilt from the HTTP status, the service's error code and the kind of failure
alone; obstore's text is never chained. Each service's codes and hints are its
``Dialect``: S3 here, Google Cloud Storage and Azure beside their stores.
"""

from __future__ import annotations

import errno
import re
from dataclasses import dataclass

from obstore import exceptions as _errors

from zarrfs.errors import StoreError


@dataclass(frozen=True)
class Dialect:
    """How one service's errors read, and what its messages call things."""

    name: str  # "S3": the service, in messages
    scheme: str  # "s3": its URLs'
    container: str  # "bucket": what holds the objects
    missing: frozenset[str]  # error codes that say the bucket is missing
    denied: re.Pattern[str]  # error codes that say "these credentials may not" (EACCES)
    metadata: re.Pattern[str]  # where its client fetches credentials when none are set
    no_credentials: str  # what to set, said when there are none
    redirect: str = ""  # said of a PermanentRedirect


# S3 error codes that say "these credentials may not do this" (EACCES).
_DENIED = re.compile(
    "AccessDenied|AllAccessDisabled|AccountProblem|ExpiredToken|InvalidAccessKeyId"
    "|InvalidToken|SignatureDoesNotMatch|TokenRefreshRequired"
)
_STATUS = re.compile(r"status code: (\d{3})")
_CODE = re.compile(r"<Code>(\w{1,64})</Code>")
_RETRIES = re.compile(r"after (\d+) retries")
_KIND = re.compile(r"\bkind: (\w{1,32})")
# The server a request went to, from the URL obstore names ("GET http://h:9/b?..."):
# its host and port only. Never more: the rest of a URL may be a presigned query.
_HOST = re.compile(
    r"\b(?:GET|PUT|HEAD|POST|DELETE) https?://(?:[^/@\s]*@)?"
    r"([A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\])(:\d{1,5})?[/?\s,)]"
)
# Where obstore fetches credentials when none are configured (EC2, ECS).
_METADATA = re.compile(r"169\.254\.169\.254|169\.254\.170\.2|fd00:ec2::254|/latest/api/token")


def code_of(e: Exception) -> str | None:
    """The S3 error code in an error's text ("NoSuchBucket"), if any."""
    found = _CODE.search(str(e))
    return found.group(1) if found else None


def host_of(e: Exception, service: str = "S3") -> str:
    """ "host:port" of the server a failed request went to, "the S3 server" (of
    ``service``) where the error does not say."""
    found = _HOST.search(str(e))
    return "".join(part or "" for part in found.groups()) if found else f"the {service} server"


def statuses_of(e: Exception) -> list[str]:
    return _STATUS.findall(str(e))


S3 = Dialect(
    "S3",
    "s3",
    "bucket",
    frozenset({"NoSuchBucket"}),
    _DENIED,
    _METADATA,
    "no AWS credentials found (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or "
    "AWS_PROFILE, or read a public bucket anonymously)",
    "the bucket is in another region (set AWS_REGION)",
)


def no_bucket(bucket: str, dialect: Dialect = S3) -> StoreError:
    return StoreError(f"{dialect.scheme}://{bucket}: {dialect.container} does not exist")


def failure(
    action: str, where: str, bucket: str, e: Exception, dialect: Dialect = S3
) -> StoreError:
    """``e`` of ``action`` ("reading") on ``where`` (the object's URL) as a StoreError."""
    text, code = str(e), code_of(e)
    if isinstance(e, ValueError):
        return StoreError(f"{action} {where}: not a valid {dialect.name} key", errno.EINVAL)
    if isinstance(e, _errors.InvalidPathError):
        # object_store refuses a whole listing over one such key.
        return StoreError(f"{action} {where}: a key below has an empty, '.' or '..' part")
    if code in dialect.missing:
        return no_bucket(bucket, dialect)
    if dialect.metadata.search(text):
        return StoreError(f"{action} {where}: {dialect.no_credentials}", errno.EACCES)
    statuses = _STATUS.findall(text)
    status = statuses[-1] if statuses else None
    if status:
        reason = f"HTTP {status}" + (f" {code}" if code else "")
        if code == "PermanentRedirect" and dialect.redirect:
            reason += f": {dialect.redirect}"
    elif kind := _KIND.search(text):
        # Named: behind a wrong endpoint (or none where one was meant) is the usual
        # cause, and the host says which.
        host = host_of(e, dialect.name)
        names = {"Connect": f"cannot connect to {host}", "Timeout": f"timed out waiting for {host}"}
        reason = names.get(kind.group(1), f"network error ({kind.group(1)}) with {host}")
    else:
        reason = type(e).__name__
    denied = (_errors.PermissionDeniedError, _errors.UnauthenticatedError)
    if dialect.denied.fullmatch(code or "") or status in ("401", "403") or isinstance(e, denied):
        return StoreError(f"{action} {where}: access denied ({reason})", errno.EACCES)
    retries = _RETRIES.search(text)
    after = f" after {retries.group(1)} retries" if retries else ""
    return StoreError(f"{action} {where}: {reason}{after}", errno.EIO)
