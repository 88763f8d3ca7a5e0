"""The writer lease of an object store (S3, Google Cloud Storage, Azure): one
read-write mount of a bucket prefix at a time.

On one machine a read-write mount holds an exclusive ``flock`` on a file of the run
directory named by a digest of the endpoint, bucket and prefix; the kernel drops it
when the daemon ends, however it ends. Across machines it holds the lease object
``<prefix>/.zarrfs-lease`` (Zarr readers ignore it: it is no metadata document and
no directory), a small JSON document naming its owner:

- taken with a conditional create (If-None-Match: *; on Google Cloud Storage,
  generation 0), so of two mounts racing for it one wins;
- renewed every TTL/3 with a PUT conditioned on its own version (an ETag; on Google
  Cloud Storage a generation), so a renewal finds out when another mount has taken
  it over; the mount has then lost it and every write fails (EIO) from then on,
  after one log line;
- a lease not renewed for its TTL (its Last-Modified, by the server's clock, TTL
  seconds old) has expired: the daemon that held it died or lost the network, and
  another mount takes it over with a PUT conditioned on its version. A lease of this
  machine (same host, boot, PID namespace and user) whose process is gone is taken
  over at once: a SIGKILLed daemon does not keep its store for a TTL;
- a mount stops writing itself when it could not renew for 5/6 of the TTL (each
  write tries a renewal first), before any other mount may find the lease expired;
- deleted at umount, if it is still this mount's.

No store can fence a request already sent: a PUT delayed past the TTL by a network
partition can still arrive after another mount took over (each one conditional on
a version, so it cannot replace what the new owner has written since).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import obstore

from zarrfs.errors import StoreError

log = logging.getLogger(__name__)

LEASE_KEY = ".zarrfs-lease"
TTL = 60.0  # seconds a lease lasts without renewal (ZARRFS_S3_LEASE_TTL for tests)
RENEWALS = 3  # renewals per TTL: every 20 s by default
SAFE = 5 / 6  # of the TTL after the last renewal was sent, writes stop
LEASE_LIMIT = 64 << 10  # bytes of a lease document read at most
TTL_BOUNDS = (1.0, 3600.0)  # a lease's own TTL is taken within these


def ttl_from_env() -> float:
    try:
        ttl = float(os.environ.get("ZARRFS_S3_LEASE_TTL", "") or TTL)
    except ValueError:
        ttl = TTL
    return min(max(ttl, TTL_BOUNDS[0]), TTL_BOUNDS[1])


class Conflict(Exception):
    """A conditional request found another version than it was conditioned on."""


@dataclass
class LeaseObject:
    """The lease as read: its document (parsed, or {}), version and age in seconds."""

    owner: dict[str, Any]
    version: str
    age: float


@dataclass
class LeaseIO:
    """The requests of the lease, made by the store (its error handling)."""

    # (body, the version it replaces or None to create it) -> its new version; Conflict
    put: Callable[[bytes, str | None], str]
    get: Callable[[], LeaseObject | None]
    head: Callable[[], str | None]  # the current version
    delete: Callable[[], None]


def lease_io(
    call: Callable[..., Any],
    version_of: Callable[[Any], Any],
    replace_mode: Callable[[Any], Any],
) -> LeaseIO:
    """The lease's requests through ``call(action, obstore function, *args, **kw)``:
    the store's error handling, None for a missing object or a failed condition;
    ``version_of`` names an object's version in its metadata, ``replace_mode`` is
    the PUT mode conditioned on one (the store's own)."""

    def put(body: bytes, version: str | None) -> str:
        mode = "create" if version is None else replace_mode(version)
        kw = {"mode": mode, "use_multipart": False, "conditional": True}
        stored = call("writing", obstore.put, LEASE_KEY, body, **kw)
        if stored is None:
            raise Conflict
        return str(version_of(stored) or "")

    def get() -> LeaseObject | None:
        found = call("reading", obstore.get, LEASE_KEY)
        if found is None:
            return None
        meta, data = found.meta, b""
        if meta["size"] <= LEASE_LIMIT:  # a larger body is dropped unread
            data = bytes(call("reading", lambda _: found.bytes()) or b"")
        age = time.time() - meta["last_modified"].timestamp()
        return LeaseObject(parse_lease(data), str(version_of(meta)), age)

    def head() -> str | None:
        meta = call("reading", obstore.head, LEASE_KEY)
        return None if meta is None else str(version_of(meta))

    def delete() -> None:
        call("deleting", obstore.delete, LEASE_KEY)

    return LeaseIO(put, get, head, delete)


def _machine() -> dict[str, Any]:
    """What tells this machine, and this PID namespace and user on it, from others."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    try:
        pidns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        pidns = 0
    return {"host": socket.gethostname(), "boot": boot, "pidns": pidns, "uid": os.geteuid()}


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return True  # unknown: not taken for dead
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def parse_lease(data: bytes) -> dict[str, Any]:
    try:
        owner = json.loads(data)
    except ValueError:
        return {}
    return owner if isinstance(owner, dict) else {}


def lease_ttl(owner: dict[str, Any]) -> float:
    ttl = owner.get("ttl")
    if not isinstance(ttl, int | float) or isinstance(ttl, bool):
        return TTL
    return min(max(float(ttl), TTL_BOUNDS[0]), TTL_BOUNDS[1])


def describe_owner(owner: dict[str, Any]) -> str:
    host, pid = owner.get("host"), owner.get("pid")
    if isinstance(host, str) and isinstance(pid, int):
        return f"process {pid} on {host[:64]!r}"
    return "another mount"


class LocalLock:
    """An exclusive flock on ``<run_dir>/s3-<digest>.lock``; the holder's PID inside."""

    def __init__(self, run_dir: str, identity: str, url: str) -> None:
        digest = hashlib.sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()[:32]
        self.path = os.path.join(run_dir, f"s3-{digest}.lock")
        self.digest = digest
        self.fd: int | None = None
        for _ in range(5):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = self._holder(fd)
                os.close(fd)
                raise StoreError(
                    f"store {url!r} is already mounted read-write {holder}", errno.EBUSY
                ) from None
            # The holder before removed the file at its release: lock the new one.
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
                self.fd = fd
                return
            os.close(fd)
        raise StoreError(f"store {url!r}: cannot lock {self.path}", errno.EBUSY)

    @staticmethod
    def _holder(fd: int) -> str:
        try:
            pid = int(os.pread(fd, 32, 0).decode().strip())
        except (OSError, ValueError):
            return "by another zarrfs process"
        return f"by process {pid}"

    def close(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.path)  # still locked: a waiting locker sees it gone
            os.close(self.fd)
            self.fd = None


class WriterLease:
    def __init__(self, io: LeaseIO, where: str, url: str, lock_digest: str) -> None:
        self._io = io
        self._where = where  # s3://bucket/prefix/.zarrfs-lease, for messages
        self._url = url
        self.ttl = ttl_from_env()
        self._owner = {
            **_machine(),
            "pid": os.getpid(),
            "nonce": secrets.token_hex(8),
            "ttl": self.ttl,
            "store": url,
            "lock": lock_digest,
        }
        self._lock = threading.Lock()
        self._version: str | None = None  # the lease's, as this mount last stored it
        self._sent = 0.0  # monotonic time the last successful renewal was sent
        self.lost: str | None = None  # why writes are refused for good
        self._failing = False  # renewals failing (logged once)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- taking ------------------------------------------------------------------------

    def acquire(self) -> None:
        """Take the lease or raise StoreError (EBUSY) naming its holder."""
        for _ in range(3):
            sent = time.monotonic()
            try:
                self._version = self._io.put(self._document(), None)
                self._sent = sent
                break
            except Conflict:
                pass
            found = self._io.get()
            if found is None:
                continue  # released in between: try to create it again
            if not self._expired(found):
                raise StoreError(self._refusal(found), errno.EBUSY)
            sent = time.monotonic()
            try:
                self._version = self._io.put(self._document(), found.version)
            except Conflict:
                continue  # another mount took it first, or it was renewed: look again
            self._sent = sent
            log.warning(
                "took over the writer lease %s of %s: %s",
                self._where,
                describe_owner(found.owner),
                self._why_expired(found),
            )
            break
        else:
            raise StoreError(f"store {self._url!r}: the writer lease kept changing", errno.EBUSY)
        self._thread = threading.Thread(target=self._renewing, name="s3-lease", daemon=True)
        self._thread.start()

    def _document(self) -> bytes:
        owner = {**self._owner, "renewed": datetime.now().astimezone().isoformat()}
        return json.dumps(owner).encode()

    def _same_machine(self, owner: dict[str, Any]) -> bool:
        return all(owner.get(k) == self._owner[k] for k in ("host", "boot", "pidns", "uid"))

    def _expired(self, found: LeaseObject) -> bool:
        if self._same_machine(found.owner) and not _alive(found.owner.get("pid")):
            return True
        return found.age > lease_ttl(found.owner)

    def _why_expired(self, found: LeaseObject) -> str:
        ttl = lease_ttl(found.owner)
        if found.age > ttl:
            return f"not renewed for {found.age:.0f} s (its TTL is {ttl:g} s)"
        return "its process on this machine is gone"

    def _refusal(self, found: LeaseObject) -> str:
        ttl = lease_ttl(found.owner)
        left = max(ttl - found.age, 0.0)
        return (
            f"store {self._url!r} is already mounted read-write by "
            f"{describe_owner(found.owner)} (its lease {self._where} expires {left:.0f} s "
            f"after its last renewal, {ttl:g} s without one)"
        )

    # -- keeping -----------------------------------------------------------------------

    def _renewing(self) -> None:
        while not self._stop.wait(self.ttl / RENEWALS):
            self.renew()

    def renew(self) -> None:
        with self._lock:
            if self.lost is not None or self._version is None:
                return
            sent = time.monotonic()
            try:
                self._version = self._io.put(self._document(), self._version)
            except Conflict:
                self.lost = (
                    f"the writer lease {self._where} was taken over by another mount: "
                    "writes are refused (remount to write again)"
                )
                log.error("%s", self.lost)
                return
            except StoreError as e:
                if not self._failing:
                    log.warning("cannot renew the writer lease %s (will retry): %s", self._where, e)
                self._failing = True
                return
            if self._failing:
                log.warning("renewed the writer lease %s again", self._where)
            self._failing = False
            self._sent = sent

    def check(self) -> None:
        """Before a write: StoreError (EIO) unless the lease is surely still ours."""
        if self.lost is None and time.monotonic() - self._sent > self.ttl * SAFE:
            self.renew()
        if self.lost is not None:
            raise StoreError(self.lost, errno.EIO)
        if time.monotonic() - self._sent > self.ttl * SAFE:
            raise StoreError(
                f"the writer lease {self._where} could not be renewed for "
                f"{time.monotonic() - self._sent:.0f} s: writes wait until it is",
                errno.EIO,
            )

    # -- letting go --------------------------------------------------------------------

    def release(self) -> None:
        """Stop renewing; delete the lease if it is still this mount's."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        with self._lock:
            if self.lost is not None or self._version is None:
                return
            version, self._version = self._version, None
            self.lost = f"the writer lease {self._where} was released: the mount is ending"
            try:
                # obstore deletes unconditionally: compared first, so that a lease taken
                # over in the meantime is not removed (bar a request in between).
                if self._io.head() == version:
                    self._io.delete()
            except StoreError as e:
                log.warning(
                    "cannot remove the writer lease %s (%s): another read-write mount "
                    "can take it over %g s after its last renewal",
                    self._where,
                    e,
                    self.ttl,
                )
