"""What every object store of zarrfs reads alike through obstore, and how each of its
requests is made (``_call``: errors rebuilt, nothing the server sent kept).

Reads: whole GETs (checked against the CRC-32C the store sends with every PUT,
checksums.py), ranged GETs (suffix ranges where the service has them, a HEAD for
the size otherwise), HEADs, and the versioned reads of the disk cache: ``stat``,
``fetch`` and ``fetch_ranges`` with the version each read saw, conditional where
the service can be asked "unless it is still this version" (S3 and Azure: If-None-
Match on the ETag, a 304 is UNCHANGED); where it cannot (GCS, whose versions are
generations: its XML API has no "if generation does not match" for a GET), the
value is read and its version compared, UNCHANGED when equal.

A ranged GET is not checked: the checksum is of the whole object. Ranges read
together are of one version (If-Match on the ETag, or the generation by number).
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from typing import Any

import obstore
from obstore import exceptions as _errors

from zarrfs.errors import InvalidValueError, StoreError
from zarrfs.stores import checksums
from zarrfs.stores import s3_config as config
from zarrfs.stores.base import (
    UNCHANGED,
    Bytes,
    Fetched,
    Store,
    Version,
    check_ranges,
    resolve_range,
)
from zarrfs.stores.s3_errors import Dialect, code_of, failure, no_bucket, statuses_of
from zarrfs.stores.s3_versions import Versions

log = logging.getLogger(__name__)

# obstore runs one runtime of threads per process, started at its first request; a
# fork's child keeps none of the threads, and its requests would wait forever.
_state = {"used": False, "forked": False}
os.register_at_fork(after_in_child=lambda: _state.update(forked=_state["used"]))
MISSING = object()  # an obstore call found no object (it raised FileNotFoundError)
UNSATISFIABLE = object()  # a ranged GET the object cannot answer (416, or not partial)
CONFLICT = object()  # a conditional request found another version (412, 409)
NOT_MODIFIED = object()  # a GET answered 304 Not Modified (If-None-Match named its ETag)
# Ranges of an object that changes while they are read are read again so often.
_REREADS = 4


class ObjectReads(Store):
    read_only = False
    remote = True
    listable = True

    dialect: Dialect
    suffix_ranges = True  # ranged GETs of the last n bytes (Azure has none)
    # The user metadata that carries a value's CRC-32C, and its header (for messages).
    checksum_metadata = checksums.METADATA
    checksum_header = checksums.HEADER

    # Set by a subclass's __init__: the bucket's name and prefix, its URL, the
    # obstore client of the bucket, and the endpoint (for the lease's identity);
    # then ``_start``.
    bucket: str
    prefix: str
    _url: str
    _bucket: Any
    _endpoint: str
    _versions: Versions

    # -- how versions are named --------------------------------------------------------

    def _version_of(self, meta: Any) -> Any:
        """The version an object's metadata (or a PUT's result) names: its ETag."""
        return meta.get("e_tag")

    def _version_options(self, meta: Any) -> Any:
        """The GET options that read the version ``meta`` names, or fail."""
        return {"if_match": meta["e_tag"]}

    def _unless_options(self, tag: str) -> dict[str, Any] | None:
        """The GET options that answer 304 while the object is at version ``tag``
        (If-None-Match on the ETag); None where the service has none."""
        return {"if_none_match": tag}

    def _version(self, meta: Any) -> Version:
        """The Version of an object's metadata: its tag the version ``_version_of``
        names (the ETag where a service names none)."""
        modified = meta.get("last_modified")
        mtime = None if modified is None else modified.timestamp()
        tag = self._version_of(meta)
        if not isinstance(tag, str):
            tag = str(meta.get("e_tag") or f"{meta['size']}:{mtime}")
        return Version(tag, mtime, int(meta["size"]))

    def describe(self) -> str:
        return self._url

    def close(self) -> None:
        """Nothing to release: obstore closes its pooled connections when the store
        is collected. Here so that every store can be closed alike."""

    def cache_identity(self) -> str:
        """What names this store in a disk cache: the endpoint and the URL (one bucket
        name may be two buckets on two servers)."""
        return f"{self._endpoint or 'aws'} {self._url}"

    # -- whole values ------------------------------------------------------------------

    def get(self, key: str, *, limit: int | None = None) -> bytes | None:
        """One GET; with ``limit``, the size in its headers is checked before any of
        a larger body is read (the connection is dropped instead)."""
        value = self.get_buffer(key, limit=limit)
        return None if value is None else bytes(value)

    def get_buffer(self, key: str, *, limit: int | None = None) -> memoryview | None:
        """``get`` without the copy into ``bytes``: a read-only view of the body as
        obstore received it.

        An object that carries the CRC-32C this store sends with every PUT
        (checksums.py) is checked against it: a body that does not match is read
        again once (a byte changed on the way), then a StoreError (EIO) naming the
        key. An object without it (written by another tool) is not checked."""
        found = self._get_checked(key, _path(key), limit, {})
        assert found is not NOT_MODIFIED  # (no condition was sent)
        return None if found is None else found[0]

    def _get_checked(self, key: str, path: str, limit: int | None, options: Any) -> Any:
        """A GET with ``options``, its body checked (see ``get_buffer``): (body,
        meta), None where there is no object, ``NOT_MODIFIED`` for a 304."""
        found = self._get_once(key, path, limit, options)
        if found is None or found is NOT_MODIFIED:
            return found
        body, expected, meta = found
        if expected is None or expected.matches(body):
            return body, meta
        del found, body  # the first body: not kept while the second is read
        reason = f"reading {self._where(key)}: {checksums.mismatch(expected)}"
        again = self._get_once(key, path, limit, options)
        if again is None or again is NOT_MODIFIED:
            return again
        body, expected, meta = again
        if expected is None or expected.matches(body):
            log.warning("%s; read again: the second answer was served", reason)
            return body, meta
        raise StoreError(f"{reason} (2 tries)", errno.EIO)

    def _get_once(self, key: str, path: str, limit: int | None, options: Any) -> Any:
        """One GET: (body, the checksum its object carries, meta), None where there is
        no object, ``NOT_MODIFIED`` for a 304."""
        if not path:
            return None
        since = self._versions.now()
        result = self._call("reading", key, get_unless, self._bucket, path, options)
        if result is MISSING:
            self._versions.seen(path, None, since)
            return None
        if result is NOT_MODIFIED:
            return result
        self._versions.seen(path, self._version_of(result.meta), since)
        size = result.meta["size"]
        if limit is not None and size > limit:
            # Dropped now: an exception a caller keeps would keep this frame, and with
            # it the response and its connection, open with the body unread.
            del result
            raise InvalidValueError(
                f"reading {self._where(key)}: {size} bytes, more than the limit of {limit}"
            )
        attributes = result.attributes
        expected = checksums.from_attributes(
            attributes, self.checksum_metadata, self.checksum_header
        )
        meta = result.meta
        return memoryview(self._call("reading", key, result.bytes)), expected, meta

    # -- ranges ------------------------------------------------------------------------

    def get_range(self, key: str, start: int, length: int) -> Bytes | None:
        check_ranges([(start, length)])
        return self._range(key, _path(key), start, length)

    def _range(self, key: str, path: str, start: int, length: int) -> Bytes | None:
        """One ranged GET where the range can be said without the size: an offset
        range, or a suffix range that covers the tail asked for; a HEAD first
        otherwise (a suffix range of 2**62 bytes must not fetch a whole object)."""
        if not path:
            return None
        if length == 0 or (start < 0 and (-start > length or not self.suffix_ranges)):
            return self._range_by_size(key, path, start, length)
        bounds: Any = (start, start + length) if start >= 0 else {"suffix": -start}
        value = self._ranged(key, path, bounds, ranged=True)
        if value is UNSATISFIABLE:
            # 416: the range starts at or past the end; a suffix range of an empty
            # object may come back whole (200, not 206): the size decides.
            return self._range_by_size(key, path, start, length)
        return None if value is MISSING else value

    def get_tail(self, key: str, length: int) -> tuple[Bytes, int] | None:
        """One suffix-ranged GET: the service's answer names the object's size."""
        check_ranges([(0, length)])
        path = _path(key)
        if not path or not length or not self.suffix_ranges:
            return super().get_tail(key, length)
        since = self._versions.now()
        bounds = {"suffix": length}
        found = self._call("reading", key, _ranged_get, self._bucket, path, bounds, ranged=True)
        if found is MISSING:
            self._versions.seen(path, None, since)
            return None
        if found is UNSATISFIABLE:  # an empty object: the size decides
            return super().get_tail(key, length)
        body, meta = found
        self._versions.seen(path, self._version_of(meta), since)
        size = int(meta["size"])
        if len(body) != min(length, size):
            raise StoreError(
                f"reading {self._where(key)}: {len(body)} bytes of its last {min(length, size)}",
                errno.EIO,
            )
        return body, size

    def _ranged(self, key: str, path: str, bounds: Any, **kw: Any) -> Any:
        since = self._versions.now()
        if isinstance(bounds, tuple):
            # obstore's get_range: the body in one buffer it sized from the range,
            # a third of the CPU of a GET's body gathered (bench/network.py). Its
            # answer names no version: none is recorded (the shard's index, read
            # first, recorded the one a conditional PUT then relies on).
            found = self._call("reading", key, _offset_get, self._bucket, path, bounds, **kw)
            if found is MISSING:
                self._versions.seen(path, None, since)
            return found
        found = self._call("reading", key, _ranged_get, self._bucket, path, bounds, **kw)
        if found is MISSING:
            self._versions.seen(path, None, since)
        if found is MISSING or found is UNSATISFIABLE:
            return found
        self._versions.seen(path, self._version_of(found[1]), since)
        return found[0]

    def _range_by_size(self, key: str, path: str, start: int, length: int) -> Bytes | None:
        size = self._size(key, path)
        if size is None:
            return None
        offset, count = resolve_range(start, length, size)
        if count == 0:
            return b""
        value = self._ranged(key, path, (offset, offset + count))
        return None if value is MISSING else value

    def get_ranges(self, key: str, ranges: list[tuple[int, int]]) -> list[Bytes] | None:
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
        if values is MISSING:
            return None
        found = iter(values)
        return [memoryview(next(found)) if count else b"" for _, count in spans]

    # -- sizes and versions ------------------------------------------------------------

    def _head(self, key: str, path: str) -> Any:
        if not path:
            return None
        since = self._versions.now()
        meta = self._call("reading", key, obstore.head, self._bucket, path)
        if meta is MISSING:
            self._versions.seen(path, None, since)
            return None
        self._versions.seen(path, self._version_of(meta), since)
        return meta

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

    def stat(self, key: str) -> Version | None:
        """One HEAD: the version, last modification and size."""
        meta = self._head(key, _path(key))
        return None if meta is None else self._version(meta)

    def fetch(
        self, key: str, *, limit: int | None = None, unless: Version | None = None
    ) -> Fetched | None:
        """One GET, conditional when ``unless`` names a version and the service can
        (a 304 is ``UNCHANGED``: no body travels; otherwise the version read is
        compared); the size is checked against ``limit`` from the headers, before
        any of the body is read."""
        condition = None if unless is None else self._unless_options(unless.tag)
        found = self._get_checked(key, _path(key), limit, condition or {})
        if found is None or found is NOT_MODIFIED:
            return None if found is None else UNCHANGED
        body, meta = found
        version = self._version(meta)
        if unless is not None and version.tag == unless.tag:
            return UNCHANGED  # type: ignore[no-any-return]
        return Fetched(body, version)

    def fetch_ranges(
        self, key: str, ranges: list[tuple[int, int]], *, unless: Version | None = None
    ) -> tuple[list[Bytes], Version | None] | None:
        """One ranged GET for one plain range (conditional on ``unless`` as
        ``fetch``); otherwise a HEAD for the version and size, then one GET per
        range, each of that version, so that every range is of one and the same
        value (the object changing meanwhile: all again, a few times at most)."""
        check_ranges(ranges)
        path = _path(key)
        if not path:
            return None
        start, length = ranges[0] if len(ranges) == 1 else (0, 0)
        if length > 0 and (start >= 0 or self._suffix(start, length)):
            bounds: Any = (start, start + length) if start >= 0 else {"suffix": -start}
            condition = None if unless is None else self._unless_options(unless.tag)
            options: Any = {"range": bounds, **(condition or {})}
            found = self._call("reading", key, get_unless, self._bucket, path, options, ranged=True)
            if found is MISSING:
                return None
            if found is NOT_MODIFIED:
                return UNCHANGED  # type: ignore[no-any-return]
            if found is not UNSATISFIABLE:
                self._versions.seen(path, self._version_of(found.meta), self._versions.now())
                version = self._version(found.meta)
                if unless is not None and unless.tag == version.tag:
                    return UNCHANGED  # type: ignore[no-any-return]
                return [memoryview(self._call("reading", key, found.bytes))], version
        for _ in range(_REREADS):
            meta = self._head(key, path)
            if meta is None:
                return None
            version = self._version(meta)
            if unless is not None and unless.tag == version.tag:
                return UNCHANGED  # type: ignore[no-any-return]
            values = self._spans_of(key, path, ranges, meta)
            if values is not None:
                return values, version
        raise StoreError(f"reading {self._where(key)}: the object kept changing")

    def _suffix(self, start: int, length: int) -> bool:
        """Whether a suffix range asks for no more than ``length`` bytes, and the
        service takes suffix ranges."""
        return self.suffix_ranges and -start <= length

    def _spans_of(
        self, key: str, path: str, ranges: list[tuple[int, int]], meta: Any
    ) -> list[Bytes] | None:
        """The ranges of the object at the version ``meta`` names (None: it is at
        another now)."""
        size = int(meta["size"])
        out = []
        for start, length in ranges:
            offset, count = resolve_range(start, length, size)
            if count == 0:
                out.append(b"")
                continue
            options = {"range": (offset, offset + count), **self._version_options(meta)}
            found = self._call(
                "reading", key, get_unless, self._bucket, path, options, conditional=True
            )
            if found is CONFLICT:
                return None
            out.append(memoryview(self._call("reading", key, found.bytes)))
        return out

    # -- errors ------------------------------------------------------------------------

    def _where(self, key: str) -> str:
        return f"{self._url}/{key}" if key else self._url

    def _no_bucket(self) -> StoreError:
        return no_bucket(self.bucket, self.dialect)

    def _failure(self, action: str, key: str, e: Exception) -> StoreError:
        return failure(action, self._where(key), self.bucket, e, self.dialect)

    def _call(
        self, action: str, key: str, function: Callable[..., Any], *args: Any, **kw: Any
    ) -> Any:
        """``function(*args, **kw)``; ``MISSING`` where it found no object (with
        ``ranged=True``, ``UNSATISFIABLE`` for a range the object cannot answer;
        with ``conditional=True``, ``CONFLICT`` for a failed precondition); any
        other failure as a StoreError raised ``from None``: obstore's message,
        which may quote the server, is never chained."""
        ranged = kw.pop("ranged", False)
        conditional = kw.pop("conditional", False)
        if _state["forked"]:
            raise StoreError(
                f"{action} {self._where(key)}: {self.dialect.name} was used before this "
                f"process forked (open {self.dialect.name} stores after the fork)"
            )
        _state["used"] = True
        try:
            return function(*args, **kw)
        except FileNotFoundError as e:
            if code_of(e) in self.dialect.missing:
                raise self._no_bucket() from None
            return CONFLICT if conditional else MISSING
        except (_errors.PreconditionError, _errors.AlreadyExistsError) as e:
            if code_of(e) in self.dialect.missing:
                raise self._no_bucket() from None
            if conditional or isinstance(e, _errors.PreconditionError):
                return CONFLICT
            raise self._failure(action, key, e) from None
        except Exception as e:
            text = str(e)
            if ranged and ("416" in statuses_of(e) or "non-partial" in text):
                return UNSATISFIABLE
            raise self._failure(action, key, e) from None
        except BaseException as e:
            # object_store panics on what it does not expect (a range past the end):
            # pyo3 raises PanicException, a BaseException.
            if type(e).__name__ != "PanicException":
                raise
            where, name = self._where(key), self.dialect.name
            raise StoreError(f"{action} {where}: the {name} client failed") from None


def _ranged_get(bucket: Any, path: str, bounds: Any) -> tuple[memoryview, Any]:
    result = obstore.get(bucket, path, options={"range": bounds})
    return memoryview(result.bytes()), result.meta


def _offset_get(bucket: Any, path: str, bounds: tuple[int, int]) -> memoryview:
    return memoryview(obstore.get_range(bucket, path, start=bounds[0], end=bounds[1]))


def get_unless(bucket: Any, path: str, options: Any) -> Any:
    """``obstore.get`` with ``options``; ``NOT_MODIFIED`` for a 304."""
    try:
        return obstore.get(bucket, path, options=options)
    except _errors.NotModifiedError:
        return NOT_MODIFIED


_path = config.path_of
