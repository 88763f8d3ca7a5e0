"""What every object store of zarrfs does alike through obstore.

obstore's requests (get, ranged get, head, conditional put, delete, listings) are
the same calls for each service's client. A subclass makes its client from the
service's own configuration and names its ``Dialect`` (s3_errors.py: its error
codes and words); where the service differs, it says so here: how an object's
version is named (``_version_of``), a PUT conditioned on it (``_replace_mode``),
a read of that version (``_version_options``), and whether suffix ranges exist.

Keys are "/"-separated and map to "<prefix>/<key>". Nothing outside the prefix is
read, written or deleted: key components "." and ".." are refused.

Every PUT is conditional on the version the mount last read or stored, so that a
request that timed out and reaches the server late cannot replace newer data; a
failed condition is a late request of the mount's own (written over) or another
writer's change (EIO: never overwritten). See s3_versions.py. A read-write mount
holds the prefix's writer lease (s3_lease.py). DELETE cannot be conditional in
obstore.

No message raised here carries text of the server's or of obstore's: the body of
a signature error can echo keys and tokens, so errors are rebuilt from their HTTP
status, error code and kind alone.
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

from zarrfs.errors import InvalidValueError, StoreError
from zarrfs.stores import s3_config as config
from zarrfs.stores.base import Listing, Store, check_ranges, resolve_range
from zarrfs.stores.s3_errors import Dialect, code_of, failure, no_bucket, statuses_of
from zarrfs.stores.s3_lease import LEASE_KEY, LeaseIO, LocalLock, WriterLease, lease_io
from zarrfs.stores.s3_versions import DELETED, UNKNOWN, Doubt, Versions, digest_of, plain_etag

log = logging.getLogger(__name__)

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


class ObjectStore(Store):
    read_only = False
    remote = True
    listable = True

    dialect: Dialect
    suffix_ranges = True  # ranged GETs of the last n bytes (Azure has none)

    # Set by a subclass's __init__: the bucket's name and prefix, its URL, the
    # obstore client of the bucket, and the endpoint (for the lease's identity);
    # then ``_start``.
    bucket: str
    prefix: str
    _url: str
    _bucket: Any
    _endpoint: str
    _versions: Versions
    _stripes: list[threading.Lock]
    _local: LocalLock | None
    _lease: WriterLease | None
    _denied: bool

    def _start(self) -> None:
        self._versions = Versions()
        self._stripes = [threading.Lock() for _ in range(_STRIPES)]
        self._local = None
        self._lease = None
        self._denied = False  # the lease could not be written: no write can be

    # -- how versions are named --------------------------------------------------------

    def _version_of(self, meta: Any) -> Any:
        """The version an object's metadata (or a PUT's result) names: its ETag."""
        return meta.get("e_tag")

    def _replace_mode(self, version: Any) -> Any:
        """The PUT mode that replaces ``version`` and nothing else (If-Match)."""
        return {"e_tag": version}

    def _version_options(self, meta: Any) -> Any:
        """The GET options that read the version ``meta`` names, or fail."""
        return {"if_match": meta["e_tag"]}

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
        listed fails here too: zarrfs lists an object store."""
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
        since = self._versions.now()
        result = self._call("reading", key, obstore.get, self._bucket, path) if path else None
        if result is None or result is _MISSING:
            if result is _MISSING:
                self._versions.seen(path, None, since)
            return None
        self._versions.seen(path, self._version_of(result.meta), since)
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
        if length == 0 or (start < 0 and (-start > length or not self.suffix_ranges)):
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
        self._versions.seen(path, self._version_of(found[1]), since)
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
        self._put(key, _value_path(key), value)

    def _put(self, key: str, path: str, value: Any) -> None:
        """A single PUT (no multipart upload: an interrupted one would leave parts
        behind; obstore joins a list of parts itself, outside the GIL), conditional
        on the version last seen. A 412 is resolved by ``_resolve``."""
        self._check_lease(key)
        with self._stripes[hash(path) % _STRIPES]:
            for _ in range(_RESOLUTIONS):
                expected = self._versions.expected(path)
                known = expected is not None and expected is not UNKNOWN
                mode: Any = self._replace_mode(expected) if known else "create"
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
                        version = self._version_of(stored) or UNKNOWN
                        self._versions.end(path, version, changed=True)
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
        current = None if meta is None else self._version_of(meta)
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
        wanted = (self._bucket, path, self._version_options(meta), max(d.size for d in values))
        data = self._call("writing", key, _get_version, *wanted)
        if not isinstance(data, bytes):
            return False
        digest = hashlib.md5(data, usedforsecurity=False).digest()
        return any(d.digest == digest for d in values)

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

        return lease_io(call, self._version_of, self._replace_mode)

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
        """``function(*args, **kw)``; ``_MISSING`` where it found no object (with
        ``ranged=True``, ``_UNSATISFIABLE`` for a range the object cannot answer;
        with ``conditional=True``, ``_CONFLICT`` for a failed precondition); any
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
            return _CONFLICT if conditional else _MISSING
        except (_errors.PreconditionError, _errors.AlreadyExistsError) as e:
            if code_of(e) in self.dialect.missing:
                raise self._no_bucket() from None
            if conditional or isinstance(e, _errors.PreconditionError):
                return _CONFLICT
            raise self._failure(action, key, e) from None
        except Exception as e:
            text = str(e)
            if ranged and ("416" in statuses_of(e) or "non-partial" in text):
                return _UNSATISFIABLE
            raise self._failure(action, key, e) from None
        except BaseException as e:
            # object_store panics on what it does not expect (a range past the end):
            # pyo3 raises PanicException, a BaseException.
            if type(e).__name__ != "PanicException":
                raise
            where, name = self._where(key), self.dialect.name
            raise StoreError(f"{action} {where}: the {name} client failed") from None


def _ranged_get(bucket: Any, path: str, bounds: Any) -> tuple[bytes, Any]:
    result = obstore.get(bucket, path, options={"range": bounds})
    return bytes(result.bytes()), result.meta


def _get_version(bucket: Any, path: str, options: Any, limit: int) -> bytes | None:
    """The version of an object ``options`` name, if it is no larger than ``limit``."""
    result = obstore.get(bucket, path, options=options)
    return bytes(result.bytes()) if result.meta["size"] <= limit else None


_path = config.path_of


def _value_path(key: str) -> str:
    """``_path`` of a key that names a value, so not the prefix itself."""
    if path := _path(key):
        return path
    raise StoreError(f"invalid key {key!r}", errno.EINVAL)
