"""What an S3 store knows of the versions of its objects, for conditional writes.

Every PUT of the S3 store is conditional: on the ETag of the object it last stored
or read (If-Match), or on there being none (If-None-Match: *). A PUT that failed
without an answer (a timeout, a dropped connection, a 5xx) may still be applied by
the server later; conditioned on a version the mount has since replaced, it can
then only fail (412), never replace newer data. ``Versions`` keeps, per object:

- the ETag the mount last saw for it (None: known to be absent); unknown until the
  object is first read or written;
- the digests of values whose PUT (or a DELETE) ended without a known outcome, so
  that a 412 caused by the mount's own late request is told apart from another
  writer's change.

A read that raced a write of the same object says nothing of the version after
that write: what it saw is recorded only if no write of the object started or
ended while it ran.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

UNKNOWN: Any = object()  # the mount has neither read nor written this object
DELETED = b""  # the digest recorded for a DELETE whose outcome is unknown
LIMIT = 1 << 17  # objects remembered; the oldest are forgotten (then UNKNOWN again)
DOUBTS = 4  # values in doubt remembered per object


@dataclass(frozen=True)
class Doubt:
    """A value sent in a request with no known outcome: its MD5 and size."""

    digest: bytes
    size: int


def digest_of(value: Any) -> Doubt:
    """The MD5 of a value given as bytes-like or as a sequence of parts."""
    md5 = hashlib.md5(usedforsecurity=False)
    size = 0
    parts: Iterable[Any] = (value,) if isinstance(value, bytes | bytearray | memoryview) else value
    for part in parts:
        view = memoryview(part).cast("B")
        md5.update(view)
        size += len(view)
    return Doubt(md5.digest(), size)


def plain_etag(etag: str | None) -> str:
    """An ETag without its quotes and weak prefix, lower case."""
    text = (etag or "").strip()
    if text.startswith("W/"):
        text = text[2:]
    return text.strip('"').lower()


class Versions:
    def __init__(self, limit: int = LIMIT) -> None:
        self._lock = threading.Lock()
        self._limit = limit
        self._clock = 0  # advanced at every start and end of a write
        # path -> (ETag, None for absent, or UNKNOWN; clock of its last write event)
        self._known: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self._busy: dict[str, int] = {}  # writes under way, per path
        self._doubts: OrderedDict[str, tuple[Doubt, ...]] = OrderedDict()

    def now(self) -> int:
        """Taken before a read; passed to ``seen`` after it."""
        return self._clock

    def seen(self, path: str, etag: str | None, since: int) -> None:
        """A read that began at ``since`` found ``etag`` (None: no object)."""
        with self._lock:
            entry = self._known.get(path)
            if path in self._busy or (entry is not None and entry[1] > since):
                return
            self._remember(path, etag, entry[1] if entry is not None else 0)

    def expected(self, path: str) -> Any:
        """The version a write must replace: an ETag, None, or UNKNOWN."""
        with self._lock:
            entry = self._known.get(path)
            return UNKNOWN if entry is None else entry[0]

    def begin(self, path: str) -> None:
        with self._lock:
            self._clock += 1
            self._busy[path] = self._busy.get(path, 0) + 1
            entry = self._known.get(path)
            self._remember(path, UNKNOWN if entry is None else entry[0], self._clock)

    def end(self, path: str, etag: Any = UNKNOWN, *, changed: bool = False) -> None:
        """A write ended; with ``changed`` the object is now ``etag`` (None: absent)."""
        with self._lock:
            self._clock += 1
            left = self._busy.get(path, 1) - 1
            if left:
                self._busy[path] = left
            else:
                self._busy.pop(path, None)
            entry = self._known.get(path)
            if changed:
                self._remember(path, etag, self._clock)
            elif entry is not None:
                self._remember(path, entry[0], self._clock)

    def adopt(self, path: str, etag: str | None) -> None:
        """The object's current version is the one to write over."""
        with self._lock:
            self._clock += 1
            self._remember(path, etag, self._clock)

    def doubt(self, path: str, doubt: Doubt) -> None:
        with self._lock:
            old = self._doubts.pop(path, ())
            self._doubts[path] = (*(d for d in old if d != doubt), doubt)[-DOUBTS:]
            while len(self._doubts) > self._limit:
                self._doubts.popitem(last=False)

    def doubts(self, path: str) -> tuple[Doubt, ...]:
        with self._lock:
            return self._doubts.get(path, ())

    def _remember(self, path: str, etag: Any, clock: int) -> None:
        self._known[path] = (etag, clock)
        self._known.move_to_end(path)
        while len(self._known) > self._limit:
            oldest, entry = self._known.popitem(last=False)
            if oldest in self._busy:  # still written: keep it, as the newest
                self._known[oldest] = entry
                if len(self._known) <= len(self._busy):
                    break
