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

Every value PUT carries its CRC-32C as user metadata, and obstore sends a SHA-256
of the body that S3 verifies before storing it; a whole GET of an object that
carries the CRC-32C checks it (checksums.py). A ranged GET cannot: the checksum is
of the whole object.

No message raised here carries text of the server's or of obstore's: the body of
a signature error can echo the access key and the session token, so errors are
rebuilt from their HTTP status, S3 error code and kind alone.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import obstore
from obstore import exceptions as _errors
from obstore.store import S3Store as _Bucket

from zarrfs.errors import InvalidValueError, StoreError
from zarrfs.stores import checksums
from zarrfs.stores import s3_config as config
from zarrfs.stores.base import (
    UNCHANGED,
    Fetched,
    Listing,
    Store,
    Version,
    check_ranges,
    resolve_range,
)
from zarrfs.stores.s3_errors import code_of, failure, no_bucket, statuses_of
from zarrfs.stores.s3_lease import LEASE_KEY, LeaseIO, LocalLock, WriterLease, lease_io
from zarrfs.stores.s3_versions import DELETED, UNKNOWN, Doubt, Versions, digest_of, plain_etag

log = logging.getLogger(__name__)

# Kept importable from here: the retry policy and client limits (s3_config.py).
RETRY = config.RETRY

# obstore runs one runtime of threads per process, started at its first request; a
# fork's child keeps none of the threads, and its requests would wait forever.
_state = {"used": False, "forked": False}
os.register_at_fork(after_in_child=lambda: _state.update(forked=_state["used"]))
_MISSING = object()  # an obstore call found no object (it raised FileNotFoundError)
_UNSATISFIABLE = object()  # a ranged GET the object cannot answer (416, or not partial)
_CONFLICT = object()  # a conditional request found another version (412, 409)
# A PUT answered 412 is retried over the mount's own late requests at most so often.
_RESOLUTIONS = 4
_STRIPES = 64  # writes of one object are serialised (locks by a hash of its path)


class S3Store(Store):
    read_only = False
    remote = True
    listable = True

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
        try:
            self._bucket = _Bucket(
                self.bucket,
                prefix=self.prefix or None,
                config=settings,  # type: ignore[arg-type]
                client_options=config.client_options(resolved.scheme),
                retry_config=config.RETRY,
                credential_provider=resolved.provider,
            )
        except Exception as e:
            raise StoreError(f"{self._url}: {config.scrub(e)}", errno.EINVAL) from None
        self._versions = Versions()
        self._stripes = [threading.Lock() for _ in range(_STRIPES)]
        self._local: LocalLock | None = None
        self._lease: WriterLease | None = None
        self._denied = False  # the lease could not be written: no write can be

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
        obstore received it.

        An object that carries the CRC-32C this store sends with every PUT
        (checksums.py) is checked against it: a body that does not match is read
        again once (a byte changed on the way), then a StoreError (EIO) naming the
        key. An object without it (written by another tool) is not checked."""
        found = self._get_checked(key, _path(key), limit, {})
        assert found is not _NOT_MODIFIED  # (no condition was sent)
        return None if found is None else found[0]

    def _get_checked(self, key: str, path: str, limit: int | None, options: Any) -> Any:
        """A GET with ``options``, its body checked (see ``get_buffer``): (body,
        meta), None where there is no object, ``_NOT_MODIFIED`` for a 304."""
        found = self._get_once(key, path, limit, options)
        if found is None or found is _NOT_MODIFIED:
            return found
        body, expected, meta = found
        if expected is None or expected.matches(body):
            return body, meta
        del found, body  # the first body: not kept while the second is read
        reason = f"reading {self._where(key)}: {checksums.mismatch(expected)}"
        again = self._get_once(key, path, limit, options)
        if again is None or again is _NOT_MODIFIED:
            return again
        body, expected, meta = again
        if expected is None or expected.matches(body):
            log.warning("%s; read again: the second answer was served", reason)
            return body, meta
        raise StoreError(f"{reason} (2 tries)", errno.EIO)

    def _get_once(self, key: str, path: str, limit: int | None, options: Any) -> Any:
        """One GET: (body, the checksum its object carries, meta), None where there is
        no object, ``_NOT_MODIFIED`` for a 304."""
        if not path:
            return None
        since = self._versions.now()
        result = self._call("reading", key, _get_unless, self._bucket, path, options)
        if result is _MISSING:
            self._versions.seen(path, None, since)
            return None
        if result is _NOT_MODIFIED:
            return result
        self._versions.seen(path, result.meta["e_tag"], since)
        size = result.meta["size"]
        if limit is not None and size > limit:
            # Dropped now: an exception a caller keeps would keep this frame, and with
            # it the response and its connection, open with the body unread.
            del result
            raise InvalidValueError(
                f"reading {self._where(key)}: {size} bytes, more than the limit of {limit}"
            )
        expected = checksums.from_attributes(result.attributes)
        meta = result.meta
        return memoryview(self._call("reading", key, result.bytes)), expected, meta

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
        value = self._ranged(key, path, bounds, ranged=True)
        if value is _UNSATISFIABLE:
            # 416: the range starts at or past the end; a suffix range of an empty
            # object may come back whole (200, not 206): the size decides.
            return self._range_by_size(key, path, start, length)
        return None if value is _MISSING else value

    def _ranged(self, key: str, path: str, bounds: Any, **kw: Any) -> Any:
        since = self._versions.now()
        found = self._call("reading", key, _ranged_get, self._bucket, path, bounds, **kw)
        if found is _MISSING:
            self._versions.seen(path, None, since)
        if found is _MISSING or found is _UNSATISFIABLE:
            return found
        self._versions.seen(path, found[1]["e_tag"], since)
        return found[0]

    def _range_by_size(self, key: str, path: str, start: int, length: int) -> bytes | None:
        size = self._size(key, path)
        if size is None:
            return None
        offset, count = resolve_range(start, length, size)
        if count == 0:
            return b""
        value = self._ranged(key, path, (offset, offset + count))
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
        if not path:
            return None
        since = self._versions.now()
        meta = self._call("reading", key, obstore.head, self._bucket, path)
        if meta is _MISSING:
            self._versions.seen(path, None, since)
            return None
        self._versions.seen(path, meta["e_tag"], since)
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

    def list_dir(self, prefix: str) -> Listing:
        """One delimited listing (obstore follows its pages). The listed prefix's own
        directory marker is no key of it, nor is the writer lease (s3_lease.py)."""
        path = _path(prefix)
        listing = obstore.list_with_delimiter
        listed = self._call("listing", prefix, listing, self._bucket, path or None)
        if listed is _MISSING:
            raise self._no_bucket()
        skip = len(path) + 1 if path else 0
        hidden = (path, LEASE_KEY)
        keys = [meta["path"][skip:] for meta in listed["objects"] if meta["path"] not in hidden]
        prefixes = [name[skip:] for name in listed["common_prefixes"]]
        return Listing(tuple(sorted(k for k in keys if k)), tuple(sorted(p for p in prefixes if p)))

    def scan(self, prefix: str) -> Iterator[tuple[str, int]]:
        """One recursive listing. Directory markers are left out: a zero-byte object
        whose name is a prefix of the next key listed (S3 lists in key order, so a
        marker "a/" comes right before the keys under it); so is the writer lease."""
        path = _path(prefix)
        skip = len(path) + 1 if path else 0
        chunks = iter(obstore.list(self._bucket, path or None, chunk_size=1000))
        held: tuple[str, int] | None = None
        while (chunk := self._call("listing", prefix, lambda: next(chunks, None))) is not None:
            if chunk is _MISSING:
                raise self._no_bucket()
            for meta in chunk:
                name = meta["path"][skip:]
                if meta["path"] in (path, LEASE_KEY) or not name:
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
        self._put(key, _value_path(key), value, checksums.put_attributes(value))

    def _put(self, key: str, path: str, value: Any, attributes: dict[str, str]) -> None:
        """A single PUT (no multipart upload: an interrupted one would leave parts
        behind; obstore joins a list of parts itself, outside the GIL), conditional
        on the version last seen, with the value's checksum in ``attributes``. A
        412 is resolved by ``_resolve``."""
        self._check_lease(key)
        with self._stripes[hash(path) % _STRIPES]:
            for _ in range(_RESOLUTIONS):
                expected = self._versions.expected(path)
                known = expected is not None and expected is not UNKNOWN
                mode: Any = {"e_tag": expected} if known else "create"
                self._versions.begin(path)
                stored = _CONFLICT
                try:
                    stored = self._call(
                        "writing",
                        key,
                        obstore.put,
                        self._bucket,
                        path,
                        value,
                        attributes=attributes,
                        mode=mode,
                        use_multipart=False,
                        conditional=True,
                    )
                except StoreError:
                    # Sent, maybe received: the server may still apply it later.
                    self._versions.doubt(path, digest_of(value))
                    raise
                finally:
                    if stored is _CONFLICT:
                        self._versions.end(path)
                    else:
                        etag = stored.get("e_tag") or UNKNOWN
                        self._versions.end(path, etag, changed=True)
                if stored is not _CONFLICT:
                    return
                self._resolve(key, path, value, expected)
        raise StoreError(f"writing {self._where(key)}: the object kept changing (HTTP 412)")

    def _resolve(self, key: str, path: str, value: Any, expected: Any) -> None:
        """After a 412: the current version becomes the one to write over if the
        mount never saw the object, or if it holds a value of the mount's own whose
        request had no known outcome (a late PUT or DELETE); otherwise another
        writer changed it, and it is not overwritten (EIO)."""
        meta = self._call("writing", key, obstore.head, self._bucket, path)
        meta = None if meta is _MISSING else meta
        current = None if meta is None else meta["e_tag"]
        if expected is UNKNOWN or current == expected or self._ours(key, path, value, meta):
            self._versions.adopt(path, current)
            return
        raise StoreError(
            f"writing {self._where(key)}: changed by another writer since this mount read "
            "or stored it (HTTP 412 Precondition Failed): not overwritten",
            errno.EIO,
        )

    def _ours(self, key: str, path: str, value: Any, meta: Any) -> bool:
        doubts = (*self._versions.doubts(path), digest_of(value))
        if meta is None:
            return any(d.digest == DELETED for d in doubts)
        values = [d for d in doubts if d.digest != DELETED]
        etag = plain_etag(meta["e_tag"])
        if any(d.digest.hex() == etag for d in values):  # S3: the MD5 of a single PUT
            return True
        if not any(d.size == meta["size"] for d in values):
            return False
        # An ETag that is no MD5 (SSE-KMS, other servers): the bytes decide.
        wanted = (self._bucket, path, meta["e_tag"], max(d.size for d in values))
        data = self._call("writing", key, _get_version, *wanted)
        if not isinstance(data, bytes):
            return False
        digest = hashlib.md5(data, usedforsecurity=False).digest()
        return any(d.digest == digest for d in values)

    def stage(
        self, key: str, value: bytes | Sequence[bytes]
    ) -> tuple[str, str, Any, dict[str, str]]:
        """Nothing is sent before ``commit``: a PUT is already all-or-nothing. The
        value's checksum is taken here, in the caller's (encoding) thread."""
        if not isinstance(value, bytes | bytearray | memoryview):
            value = list(value)
        return key, _value_path(key), value, checksums.put_attributes(value)

    def commit(self, staged: list[tuple[str, str, Any, dict[str, str]]]) -> None:
        """PUT each staged value in order; at the first failure the rest stay unput
        and the StoreError says how many were written."""
        for done, (key, path, value, attributes) in enumerate(staged):
            try:
                self._put(key, path, value, attributes)
            except StoreError as e:
                if len(staged) == 1:
                    raise
                written = f"{done} of {len(staged)} values written, the rest not"
                raise StoreError(f"{e} ({written})", e.errno) from None

    def delete(self, key: str, *, durable: bool = True) -> None:
        """S3 answers a DELETE of a missing key with success too. Unconditional:
        obstore sends no If-Match with a DELETE (docs/semantics.md, S3)."""
        path = _value_path(key)
        self._check_lease(key)
        with self._stripes[hash(path) % _STRIPES]:
            self._versions.begin(path)
            done = False
            try:
                self._call("deleting", key, obstore.delete, self._bucket, path)
                done = True
            except StoreError:
                self._versions.doubt(path, Doubt(DELETED, 0))
                raise
            finally:
                self._versions.end(path, None, changed=done)

    # -- the writer lease --------------------------------------------------------------

    def acquire_writer_lease(self, run_dir: str) -> None:
        """One read-write mount of this bucket prefix at a time (s3_lease.py): the
        local lock in ``run_dir``, then the lease object; StoreError (EBUSY) naming
        the holder otherwise. Writes are refused once the lease is lost."""
        identity = f"{self._endpoint or 'aws'} {self.bucket}/{self.prefix}"
        local = LocalLock(run_dir, identity, self._url)
        try:
            lease = WriterLease(self._lease_io(), self._where(LEASE_KEY), self._url, local.digest)
            lease.acquire()
        except StoreError as e:
            local.close()
            if e.errno != errno.EACCES:
                raise
            # Credentials that may not write here (a public bucket read anonymously, a
            # read-only policy): the mount reads, and refuses every write, as S3 would.
            self._denied = True
            log.warning("%s: this mount cannot write (%s): writes fail with EACCES", self._url, e)
            return
        except BaseException:
            local.close()
            raise
        self._local, self._lease = local, lease

    def release_writer_lease(self) -> None:
        """At umount, after the last write: the lease deleted, the lock dropped."""
        lease, local = self._lease, self._local
        self._local = None
        if lease is not None:
            lease.release()
        if local is not None:
            local.close()

    def _check_lease(self, key: str) -> None:
        if self._denied:
            where = self._where(key)
            raise StoreError(
                f"writing {where}: access denied (this mount could not write its lease)",
                errno.EACCES,
            )
        if self._lease is not None:
            self._lease.check()

    def _lease_io(self) -> LeaseIO:
        def call(action: str, function: Callable[..., Any], *args: Any, **kw: Any) -> Any:
            found = self._call(action, LEASE_KEY, function, self._bucket, *args, **kw)
            return None if found is _MISSING or found is _CONFLICT else found

        return lease_io(call)

    # -- errors ------------------------------------------------------------------------

    def _where(self, key: str) -> str:
        return f"{self._url}/{key}" if key else self._url

    def _no_bucket(self) -> StoreError:
        return no_bucket(self.bucket)

    def _call(
        self, action: str, key: str, function: Callable[..., Any], *args: Any, **kw: Any
    ) -> Any:
        """``function(*args, **kw)``; ``_MISSING`` where it found no object (with
        ``ranged=True``, ``_UNSATISFIABLE`` for a range the object cannot answer;
        with ``conditional=True``, ``_CONFLICT`` for a failed precondition); any
        other failure as a StoreError raised ``from None``: obstore's message,
        which may quote the server, is never chained."""
        ranged = kw.pop("ranged", False)
        conditional = kw.pop("conditional", False)
        if _state["forked"]:
            raise StoreError(
                f"{action} {self._where(key)}: S3 was used before this process forked "
                "(open S3 stores after the fork)"
            )
        _state["used"] = True
        try:
            return function(*args, **kw)
        except FileNotFoundError as e:
            if code_of(e) == "NoSuchBucket":
                raise self._no_bucket() from None
            return _CONFLICT if conditional else _MISSING
        except (_errors.PreconditionError, _errors.AlreadyExistsError) as e:
            if code_of(e) == "NoSuchBucket":
                raise self._no_bucket() from None
            if conditional or isinstance(e, _errors.PreconditionError):
                return _CONFLICT
            raise failure(action, self._where(key), self.bucket, e) from None
        except Exception as e:
            text = str(e)
            if ranged and ("416" in statuses_of(e) or "non-partial" in text):
                return _UNSATISFIABLE
            raise failure(action, self._where(key), self.bucket, e) from None
        except BaseException as e:
            # object_store panics on what it does not expect (a range past the end):
            # pyo3 raises PanicException, a BaseException.
            if type(e).__name__ != "PanicException":
                raise
            raise StoreError(f"{action} {self._where(key)}: the S3 client failed") from None

    # -- versions ----------------------------------------------------------------------

    def cache_identity(self) -> str:
        """What names this store in a disk cache: the endpoint and the URL (one bucket
        name may be two buckets on two servers)."""
        return f"{self._endpoint or 'aws'} {self._url}"

    def stat(self, key: str) -> Version | None:
        """One HEAD: the ETag, last modification and size."""
        meta = self._head(key, _path(key))
        return None if meta is None else _version(meta)

    def fetch(
        self, key: str, *, limit: int | None = None, unless: Version | None = None
    ) -> Fetched | None:
        """One GET, with If-None-Match when ``unless`` names a version (a 304 is
        ``UNCHANGED``: no body travels); the size is checked against ``limit`` from
        the headers, before any of the body is read."""
        options: Any = {} if unless is None else {"if_none_match": unless.tag}
        found = self._get_checked(key, _path(key), limit, options)
        if found is None or found is _NOT_MODIFIED:
            return None if found is None else UNCHANGED
        body, meta = found
        return Fetched(body, _version(meta))

    def fetch_ranges(
        self, key: str, ranges: list[tuple[int, int]], *, unless: Version | None = None
    ) -> tuple[list[bytes], Version | None] | None:
        """One ranged GET for one plain range (If-None-Match with ``unless``);
        otherwise a HEAD for the version and size, then one GET per range, each
        If-Match that version, so that every range is of one and the same value
        (the object changing meanwhile: all again, a few times at most)."""
        check_ranges(ranges)
        path = _path(key)
        if not path:
            return None
        if len(ranges) == 1 and ranges[0][1] > 0 and ranges[0][0] >= -ranges[0][1]:
            start, length = ranges[0]
            bounds: Any = (start, start + length) if start >= 0 else {"suffix": -start}
            options: Any = {"range": bounds}
            if unless is not None:
                options["if_none_match"] = unless.tag
            found = self._call(
                "reading", key, _get_unless, self._bucket, path, options, ranged=True
            )
            if found is _MISSING:
                return None
            if found is _NOT_MODIFIED:
                return UNCHANGED  # type: ignore[no-any-return]
            if found is not _UNSATISFIABLE:
                self._versions.seen(path, found.meta["e_tag"], self._versions.now())
                data = bytes(self._call("reading", key, found.bytes))
                return [data], _version(found.meta)
        for _ in range(_RESOLUTIONS):
            meta = self._head(key, path)
            if meta is None:
                return None
            version = _version(meta)
            if unless is not None and unless.tag == version.tag:
                return UNCHANGED  # type: ignore[no-any-return]
            values = self._spans_of(key, path, ranges, version)
            if values is not None:
                return values, version
        raise StoreError(f"reading {self._where(key)}: the object kept changing")

    def _spans_of(
        self, key: str, path: str, ranges: list[tuple[int, int]], version: Version
    ) -> list[bytes] | None:
        """The ranges of the object at ``version`` (None: it is at another now)."""
        assert version.size is not None
        out = []
        for start, length in ranges:
            offset, count = resolve_range(start, length, version.size)
            if count == 0:
                out.append(b"")
                continue
            options = {"range": (offset, offset + count), "if_match": version.tag}
            found = self._call(
                "reading", key, _get_unless, self._bucket, path, options, conditional=True
            )
            if found is _CONFLICT:
                return None
            out.append(bytes(self._call("reading", key, found.bytes)))
        return out


def _ranged_get(bucket: _Bucket, path: str, bounds: Any) -> tuple[bytes, Any]:
    result = obstore.get(bucket, path, options={"range": bounds})
    return bytes(result.bytes()), result.meta


def _get_version(bucket: _Bucket, path: str, etag: str, limit: int) -> bytes | None:
    """Version ``etag`` of an object, if it is no larger than ``limit``."""
    result = obstore.get(bucket, path, options={"if_match": etag})
    return bytes(result.bytes()) if result.meta["size"] <= limit else None


_path = config.path_of


def _value_path(key: str) -> str:
    """``_path`` of a key that names a value, so not the prefix itself."""
    if path := _path(key):
        return path
    raise StoreError(f"invalid key {key!r}", errno.EINVAL)


# An obstore GET answered 304 Not Modified (If-None-Match named its ETag).
_NOT_MODIFIED = object()


def _get_unless(bucket: _Bucket, path: str, options: Any) -> Any:
    """``obstore.get`` with ``options``; ``_NOT_MODIFIED`` for a 304."""
    try:
        return obstore.get(bucket, path, options=options)
    except _errors.NotModifiedError:
        return _NOT_MODIFIED


def _version(meta: Any) -> Version:
    modified = meta.get("last_modified")
    return Version(
        str(meta["e_tag"]),
        None if modified is None else modified.timestamp(),
        int(meta["size"]),
    )
