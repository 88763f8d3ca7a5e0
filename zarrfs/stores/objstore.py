"""What every object store of zarrfs does alike through obstore.

obstore's requests (get, ranged get, head, conditional put, delete, listings) are
the same calls for each service's client. A subclass makes its client from the
service's own configuration and names its ``Dialect`` (s3_errors.py: its error
codes and words); where the service differs, it says so: how an object's version
is named (``_version_of``), a PUT conditioned on it (``_replace_mode``), a read of
that version (``_version_options``), a read unless it is still that version
(``_unless_options``), and whether suffix ranges exist. Reads, checksums included,
are objreads.py's; listings, writes and the writer lease are here.

Keys are "/"-separated and map to "<prefix>/<key>". Nothing outside the prefix is
read, written or deleted: key components "." and ".." are refused.

Every PUT is conditional on the version the mount last read or stored, so that a
request that timed out and reaches the server late cannot replace newer data; a
failed condition is a late request of the mount's own (written over) or another
writer's change (EIO: never overwritten). See s3_versions.py. A read-write mount
holds the prefix's writer lease (s3_lease.py). DELETE cannot be conditional in
obstore. Every value PUT carries its CRC-32C as user metadata (checksums.py), which
whole GETs check.

No message raised here carries text of the server's or of obstore's: the body of
a signature error can echo keys and tokens, so errors are rebuilt from their HTTP
status, error code and kind alone.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import obstore

from zarrfs.errors import StoreError
from zarrfs.stores import checksums
from zarrfs.stores import s3_config as config
from zarrfs.stores.base import Listing
from zarrfs.stores.objreads import CONFLICT, MISSING, ObjectReads
from zarrfs.stores.s3_lease import LEASE_KEY, LeaseIO, LocalLock, WriterLease, lease_io
from zarrfs.stores.s3_versions import DELETED, UNKNOWN, Doubt, Versions, digest_of, plain_etag

log = logging.getLogger(__name__)

# A PUT answered 412 is retried over the mount's own late requests at most so often.
_RESOLUTIONS = 4
# Writes of one object are serialised (locks by a hash of its path); with a flush's 32
# PUTs in flight, 4096 locks make two unrelated keys sharing one rare.
_STRIPES = 4096


class ObjectStore(ObjectReads):
    # Besides ObjectReads' attributes, set by ``_start`` (a subclass's __init__
    # calls it last).
    _stripes: list[threading.Lock]
    _local: LocalLock | None
    _lease: WriterLease | None
    _denied: bool

    def _connect(
        self,
        client: Callable[..., Any],
        settings: dict[str, Any],
        scheme: str,
        scrub: Callable[[Exception], str],
        **more: Any,
    ) -> None:
        """Make the service's obstore client (``client``: its store class) and this
        store's state; a configuration obstore refuses is a StoreError (EINVAL) whose
        text ``scrub`` has rid of secrets."""
        try:
            self._bucket = client(
                self.bucket,
                prefix=self.prefix or None,
                config=settings,
                client_options=config.client_options(scheme),
                retry_config=config.RETRY,
                **more,
            )
        except Exception as e:
            raise StoreError(f"{self._url}: {scrub(e)}", errno.EINVAL) from None
        self._versions = Versions()
        self._stripes = [threading.Lock() for _ in range(_STRIPES)]
        self._local = None
        self._lease = None
        self._denied = False  # the lease could not be written: no write can be

    # -- how versions are written ------------------------------------------------------

    def _replace_mode(self, version: Any) -> Any:
        """The PUT mode that replaces ``version`` and nothing else (If-Match)."""
        return {"e_tag": version}

    def check(self) -> None:
        """Ask the bucket once (a listing of at most one key under the prefix), so
        that a mount can refuse at once: a StoreError with a one-line message
        ("s3://nobucket: bucket does not exist", "checking s3://b/p: access denied
        (HTTP 403 AccessDenied)"). A bucket whose objects may be read but not
        listed fails here too: zarrfs lists an object store."""
        stream = obstore.list(self._bucket, chunk_size=1)
        if self._call("checking", "", lambda: next(iter(stream), None)) is MISSING:
            raise self._no_bucket()

    def list_dir(self, prefix: str) -> Listing:
        """One delimited listing (obstore follows its pages). The listed prefix's own
        directory marker is no key of it, nor is the writer lease (s3_lease.py)."""
        path = _path(prefix)
        listing = obstore.list_with_delimiter
        listed = self._call("listing", prefix, listing, self._bucket, path or None)
        if listed is MISSING:
            raise self._no_bucket()
        skip = len(path) + 1 if path else 0
        hidden = (path, LEASE_KEY)
        keys = [meta["path"][skip:] for meta in listed["objects"] if meta["path"] not in hidden]
        prefixes = [name[skip:] for name in listed["common_prefixes"]]
        return Listing(tuple(sorted(k for k in keys if k)), tuple(sorted(p for p in prefixes if p)))

    def _listed(self, prefix: str) -> Iterator[tuple[str, Any]]:
        """One recursive listing, a request per thousand keys: (name relative to
        ``prefix``, object metadata), in key order; the prefix's own marker and the
        writer lease left out."""
        path = _path(prefix)
        skip = len(path) + 1 if path else 0
        chunks = iter(obstore.list(self._bucket, path or None, chunk_size=1000))
        while (chunk := self._call("listing", prefix, lambda: next(chunks, None))) is not None:
            if chunk is MISSING:
                raise self._no_bucket()
            for meta in chunk:
                name = meta["path"][skip:]
                if name and meta["path"] not in (path, LEASE_KEY):
                    yield name, meta

    def scan(self, prefix: str) -> Iterator[tuple[str, int]]:
        """One recursive listing. Directory markers are left out: a zero-byte object
        whose name is a prefix of the next key listed (S3 lists in key order, so a
        marker "a/" comes right before the keys under it)."""
        held: tuple[str, int] | None = None
        for name, meta in self._listed(prefix):
            if held is not None and not (held[1] == 0 and name.startswith(held[0] + "/")):
                yield held
            held = (name, int(meta["size"]))
        if held is not None:
            yield held

    def _listed_tag(self, meta: Any) -> str:
        """A listed object's version as a GET of it names it: its ETag."""
        return self._version(meta).tag

    def versions(self, prefix: str, most: int) -> dict[str, str] | None:
        """One recursive listing: each key's version as a GET or HEAD of it names
        it; None past ``most`` keys."""
        found: dict[str, str] = {}
        for name, meta in self._listed(prefix):
            if len(found) == most:
                return None
            found[name] = self._listed_tag(meta)
        return found

    # -- writing -----------------------------------------------------------------------

    def set(self, key: str, value: bytes, *, durable: bool = True) -> None:
        """One PUT: S3 shows readers the old object or the new one, never a mix, and
        a completed PUT is durable (so ``durable`` asks nothing more)."""
        self._put(key, _value_path(key), value, self._checksum(value))

    def _checksum(self, value: Any) -> dict[str, str]:
        """The PUT ``attributes`` of ``value``: its CRC-32C as user metadata."""
        return checksums.put_attributes(value, self.checksum_metadata)

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
                mode: Any = self._replace_mode(expected) if known else "create"
                self._versions.begin(path)
                stored = CONFLICT
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
                    if stored is CONFLICT:
                        self._versions.end(path)
                    else:
                        version = self._version_of(stored) or UNKNOWN
                        self._versions.end(path, version, changed=True)
                if stored is not CONFLICT:
                    return
                self._resolve(key, path, value, expected)
        raise StoreError(f"writing {self._where(key)}: the object kept changing (HTTP 412)")

    def _resolve(self, key: str, path: str, value: Any, expected: Any) -> None:
        """After a 412: the current version becomes the one to write over if the
        mount never saw the object, or if it holds a value of the mount's own whose
        request had no known outcome (a late PUT or DELETE); otherwise another
        writer changed it, and it is not overwritten (EIO)."""
        meta = self._call("writing", key, obstore.head, self._bucket, path)
        meta = None if meta is MISSING else meta
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

    def stage(
        self, key: str, value: bytes | Sequence[bytes]
    ) -> tuple[str, str, Any, dict[str, str]]:
        """Nothing is sent before ``commit``: a PUT is already all-or-nothing. The
        value's checksum is taken here, in the caller's (encoding) thread."""
        if not isinstance(value, bytes | bytearray | memoryview):
            value = list(value)
        return key, _value_path(key), value, self._checksum(value)

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
            return None if found is MISSING or found is CONFLICT else found

        return lease_io(call, self._version_of, self._replace_mode)


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
