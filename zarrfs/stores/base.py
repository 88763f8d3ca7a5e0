"""The key/value store contract every backend implements.

Keys are "/"-separated relative paths ("" is the root). Methods block: callers in
the FUSE loop run them in worker threads. Errors other than "missing" surface as
``StoreError`` carrying an errno.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from zarrfs.errors import InvalidValueError, ReadOnlyError


def join_key(path: str, name: str) -> str:
    """Store key of ``name`` inside node ``path`` ("" is the store root)."""
    return f"{path}/{name}" if path else name


# The most one ranged read may ask for (and all ranges of one ``get_ranges`` call
# together). Lengths come from untrusted metadata (a shard index): a request is
# refused before anything of its size is allocated or fetched.
RANGE_LIMIT = 256 << 20
# Offsets go to pread(2) and HTTP Range headers as signed 64-bit integers.
_MAX_OFFSET = (1 << 63) - 1


def check_ranges(ranges: list[tuple[int, int]]) -> None:
    """Refuse malformed ranges (``ValueError``) and too much asked for
    (``InvalidValueError``): every store checks the same way, before any I/O."""
    total = 0
    for start, length in ranges:
        for number in (start, length):
            # bool is an int, and a float or numpy scalar here is a caller's bug.
            if type(number) is not int:
                raise ValueError(f"range ({start!r}, {length!r}): not integers")
        if length < 0:
            raise ValueError(f"range ({start}, {length}): negative length")
        if not -_MAX_OFFSET <= start <= _MAX_OFFSET or start + length > _MAX_OFFSET:
            raise ValueError(f"range ({start}, {length}): offset out of bounds")
        total += length
        if length > RANGE_LIMIT or total > RANGE_LIMIT:
            raise InvalidValueError(
                f"range ({start}, {length}): more than {RANGE_LIMIT} bytes asked for"
            )


def resolve_range(start: int, length: int, size: int) -> tuple[int, int]:
    """(offset, count) that ``get_range(key, start, length)`` reads of a value of
    ``size`` bytes: the range [start, start + length), a negative ``start`` first
    taken as ``size + start``, cut to [0, size)."""
    begin = start if start >= 0 else size + start
    end = min(begin + length, size)
    begin = max(begin, 0)
    return begin, max(end - begin, 0)


@dataclass(frozen=True)
class Listing:
    """Direct children of a prefix: plain keys and sub-prefixes (names only)."""

    keys: tuple[str, ...]
    prefixes: tuple[str, ...]


@dataclass(frozen=True)
class Version:
    """Which value of a key a read saw: equal versions name the same bytes.

    ``tag`` is the store's own token for it (an S3 or HTTP ETag; a file's
    modification time in nanoseconds, size and inode), never parsed by callers;
    ``mtime`` (seconds) and ``size`` are what the store said along with it."""

    tag: str
    mtime: float | None = None
    size: int | None = None


@dataclass(frozen=True)
class Fetched:
    """A value and the version it was read at (None: the store cannot tell)."""

    value: bytes | memoryview
    version: Version | None


class _Unchanged:
    def __repr__(self) -> str:
        return "UNCHANGED"


# What ``fetch``/``fetch_ranges`` return when the value is still at the version the
# caller named (an HTTP 304: no body travelled).
UNCHANGED: Any = _Unchanged()


# What ranged reads return: bytes, or a read-only view of memory the store's client
# filled (no copy into ``bytes``: for a decoder, or a slice, the buffer protocol is
# all that is needed).
Bytes = bytes | memoryview


class NotAtHand(Exception):
    """Raised, within ``Store.at_hand()``, by a read that would have to ask the remote
    store: what it asked is not kept locally, or no longer fresh."""


class Store(ABC):
    # What the rest of zarrfs needs to know of a store besides its methods:
    # ``read_only``: writes raise ReadOnlyError (zip archives, HTTP), and the mount
    # comes up read-only; ``remote``: each request waits on a network, so fetches
    # go to a pool sized to connections, apart from the decode workers; ``listable``:
    # ``list_dir`` can enumerate (HTTP cannot: only consolidated metadata lists).
    # ``local_tier``: keeps local copies of values (a disk cache), that ``at_hand``
    # reads without waiting on the network.
    read_only = False
    remote = False
    listable = True
    local_tier = False

    @abstractmethod
    def get(self, key: str, *, limit: int | None = None) -> bytes | None:
        """The value of ``key``, or ``None`` when it does not exist.

        A value that may not be read (not a plain value of the store, e.g. a link
        out of it) or is larger than ``limit`` bytes raises ``InvalidValueError``.
        """

    def get_buffer(self, key: str, *, limit: int | None = None) -> bytes | memoryview | None:
        """``get``, for a caller that only needs the buffer protocol (a decoder): a
        store whose client hands over memory of its own returns a view of it rather
        than copying it into ``bytes`` (a chunk's worth per read)."""
        return self.get(key, limit=limit)

    def get_range(self, key: str, start: int, length: int) -> Bytes | None:
        """Bytes [start, start + length) of the value of ``key``, or ``None`` when it
        does not exist (as for ``get``: a directory is no value either).

        Like pread(2), fewer bytes (possibly none) come back where the range runs
        past the value's end. A negative ``start`` counts from the end: the range
        is [size + start, size + start + length), and whatever of it lies before
        the value's first byte is cut off; so ``get_range(key, -n, n)`` is the last
        ``n`` bytes (the whole value if it is shorter), fetched without knowing the
        size (an HTTP suffix range). ``resolve_range`` is the exact rule.

        A negative length, a non-integer or an offset beyond 2**63 - 1 raise
        ``ValueError``; a length over ``RANGE_LIMIT`` raises ``InvalidValueError``
        (checked before the store is touched); a value that ``get`` refuses is
        refused here too. This generic version reads the whole value: stores
        that can read a range natively override it.
        """
        ranges = self.get_ranges(key, [(start, length)])
        return None if ranges is None else ranges[0]

    def get_ranges(self, key: str, ranges: list[tuple[int, int]]) -> list[Bytes] | None:
        """``get_range`` of each (start, length) of ``ranges``, of one and the same
        value (read once here), in order; ``None`` when ``key`` does not exist.
        All ranges together may ask for at most ``RANGE_LIMIT`` bytes."""
        check_ranges(ranges)
        value = self.get(key)
        if value is None:
            return None
        out = []
        for start, length in ranges:
            offset, count = resolve_range(start, length, len(value))
            out.append(value[offset : offset + count])
        return out

    def get_tail(self, key: str, length: int) -> tuple[Bytes, int] | None:
        """The last ``length`` bytes of the value of ``key`` (all of it, if shorter)
        and the value's size: a shard's index at its end, with the size its entries
        are checked against; ``None`` when ``key`` does not exist. Stores that learn
        the size from a suffix range's answer (S3's Content-Range) need one request;
        this generic version asks the size first."""
        check_ranges([(0, length)])
        size = self.size(key)
        if size is None:
            return None
        start = max(size - length, 0)
        data = self.get_range(key, start, size - start)
        return None if data is None else (data, size)

    def size(self, key: str) -> int | None:
        """The length of the value of ``key`` in bytes, ``None`` when it does not
        exist; refused as ``get`` refuses. A shard index needs no size first (one at
        the start is ``get_range(key, 0, n)``, one at the end ``get_range(key, -n,
        n)``): this is for checks and summaries. This generic version reads the value."""
        value = self.get(key)
        return None if value is None else len(value)

    def stat(self, key: str) -> Version | None:
        """The version of the value of ``key`` (one HEAD, one stat), ``None`` when it
        does not exist. This generic version tells size and time as its tag."""
        size = self.size(key)
        if size is None:
            return None
        mtime = self.mtime(key)
        return Version(f"{size}:{mtime}", mtime, size)

    def fetch(
        self, key: str, *, limit: int | None = None, unless: Version | None = None
    ) -> Fetched | None:
        """``get`` with the version read, in one request where the store can:
        ``None`` when ``key`` does not exist, ``UNCHANGED`` when ``unless`` names the
        version it still has (a conditional GET; nothing is read). The generic
        version knows no versions: it always reads, and says ``None``."""
        value = self.get_buffer(key, limit=limit)
        return None if value is None else Fetched(value, None)

    def fetch_ranges(
        self, key: str, ranges: list[tuple[int, int]], *, unless: Version | None = None
    ) -> tuple[list[Bytes], Version | None] | None:
        """``get_ranges`` with the version they were read at, as ``fetch``."""
        found = self.get_ranges(key, ranges)
        return None if found is None else (found, None)

    @abstractmethod
    def contains(self, key: str) -> bool: ...

    @abstractmethod
    def list_dir(self, prefix: str) -> Listing: ...

    def scan(self, prefix: str) -> Iterator[tuple[str, int]]:
        """Every key under ``prefix`` (recursively) with its size, keys relative to it.

        Only for summaries (``info``); the generic version reads every value (one
        that may not be read is no key here).
        """
        listing = self.list_dir(prefix)
        for name in listing.keys:
            try:
                value = self.get(join_key(prefix, name))
            except InvalidValueError:
                continue
            if value is not None:
                yield name, len(value)
        for sub in listing.prefixes:
            for key, size in self.scan(join_key(prefix, sub)):
                yield f"{sub}/{key}", size

    @abstractmethod
    def set(self, key: str, value: bytes, *, durable: bool = True) -> None:
        """Store ``value`` under ``key`` atomically: readers see the old or the new value.

        With ``durable=False`` the value's bytes are on disk before it replaces the
        old one (so a crash leaves old or new, never a torn value), but the
        replacement itself becomes durable only at the next ``sync(keys)``.
        """

    def stage(self, key: str, value: bytes | Sequence[bytes]) -> Any:
        """First half of a batched ``set(durable=False)``: prepare ``value`` for ``key``
        without making it visible; ``commit`` a list of these to put them in place.
        ``value`` may come in parts (a shard's inner chunks and index), stored one
        after the other, so that nobody copies them into one buffer first."""
        if not isinstance(value, bytes | bytearray | memoryview):
            value = b"".join(value)
        return (key, value)

    def commit(self, staged: list[Any]) -> None:
        """Put staged values in place, each atomically, their bytes on disk first.

        On failure nothing more is put in place and what is left is discarded.
        """
        for key, value in staged:
            self.set(key, value, durable=False)

    def sync(self, keys: list[str]) -> None:  # noqa: B027 - durable stores need nothing
        """Make earlier non-durable ``set``/``delete`` of ``keys`` durable."""

    @abstractmethod
    def delete(self, key: str, *, durable: bool = True) -> None:
        """Remove ``key``; a missing key is not an error."""

    def cleanup(self, older_than: float, between: Callable[[], None] | None = None) -> int:
        """Remove what an interrupted run left before ``older_than``; returns how many.
        A store that walks many places calls ``between`` after each (pacing)."""
        return 0

    @abstractmethod
    def mtime(self, key: str) -> float | None:
        """Modification time of ``key`` (seconds), ``None`` when unknown or missing."""

    def acquire_writer_lease(self, run_dir: str) -> None:  # noqa: B027 - most need none
        """Before a read-write mount: make sure no other read-write mount of this
        store runs (a remote store, where no local lock can; S3: s3_lease.py), or
        raise StoreError naming the holder. ``run_dir`` is the user's private run
        directory, for a lock file of this machine's mounts."""

    def release_writer_lease(self) -> None:  # noqa: B027 - most need none
        """At the end of a read-write mount, after its last write."""

    def statvfs(self) -> tuple[int, int, int] | None:
        """(block size, total blocks, free blocks) of the backing storage, if known."""
        return None

    def versions(self, prefix: str, most: int) -> dict[str, str] | None:
        """The version tag of every key under ``prefix`` (recursively; keys relative
        to it) from one listing, as ``stat`` would name each; None where a listing
        does not name versions, or names more than ``most`` keys."""
        return None

    def at_hand(self) -> AbstractContextManager[None]:
        """Within it, this thread's reads answer only from local copies: a read that
        would ask the remote store raises NotAtHand instead. Of use only where
        ``local_tier``; elsewhere it changes nothing."""
        return contextlib.nullcontext()

    def serves_locally(self) -> bool:
        """Whether values come without waiting on a network now: a local store's
        always, a remote store's where local copies answer its recent reads (a disk
        cache). Read-ahead sizes its window by it."""
        return not self.remote

    def reading_under(self, prefix: str) -> None:  # noqa: B027 - a hint most ignore
        """A hint, never I/O: many keys under ``prefix`` (an array's) are about to be
        read. A store may then check what it holds of them in bulk
        (stores/diskcache.py)."""

    def describe(self) -> str:
        return type(self).__name__


class WriteRefusingStore(Store):
    """A store every write of which raises ReadOnlyError: zip archives, HTTP, and
    any store opened only to be looked at (``zarrfs check``, ``zarrfs tree``)."""

    read_only = True

    @abstractmethod
    def refusal(self) -> str:
        """Why it refuses writes, as the error says."""

    def _refuse(self) -> ReadOnlyError:
        return ReadOnlyError(self.refusal())

    def set(self, key: str, value: bytes, *, durable: bool = True) -> None:
        raise self._refuse()

    def stage(self, key: str, value: bytes | Sequence[bytes]) -> Any:
        raise self._refuse()

    def commit(self, staged: list[Any]) -> None:
        raise self._refuse()

    def delete(self, key: str, *, durable: bool = True) -> None:
        raise self._refuse()

    def sync(self, keys: list[str]) -> None:
        if keys:  # nothing to make durable is no write
            raise self._refuse()
