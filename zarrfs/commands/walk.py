"""A store's whole hierarchy at once, for ``zarrfs check`` and ``zarrfs tree``.

The rules are the mount tree's (namespace/tree.py): where the root holds consolidated metadata
it alone lists the hierarchy (unless ``consolidated=False``), otherwise each store
directory is listed; what a directory's documents make of it is formats/metadata/hierarchy.py's
business. Unlike the tree, which hides a node whose metadata is broken and keeps
serving the rest, a walk keeps such a node with the reason, so that the commands can
report it. Reads only: nothing here writes to the store.

Everything the commands print passes through ``printable``: names, keys, reasons and
codec settings come from the store, and a terminal acts on the control characters
they may hold (an escape sequence retitles the window or moves the cursor, a newline
fakes a line of output).
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import click

from zarrfs.errors import InvalidValueError, MetadataError, StoreError, ZarrfsError
from zarrfs.formats.metadata import hierarchy
from zarrfs.formats.metadata.hierarchy import Listing
from zarrfs.formats.model import ArrayMeta, NodeMeta, join_key
from zarrfs.namespace.tree import node_documents, read_root_keys
from zarrfs.stores.base import Listing as KeyListing
from zarrfs.stores.base import Store, WriteRefusingStore
from zarrfs.stores.location import StoreOptions, open_store

# What a terminal acts on instead of showing: C0 controls, DEL and C1 controls (Unicode's
# "Cc"), the line and paragraph separators, the bidirectional formatting characters
# (they reorder what follows them on screen), and lone surrogates (undecodable bytes
# of a file name, which no terminal encoding can carry).
_UNPRINTABLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}")


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on written as an escape
    (``\\x1b``, ``\\n``, ``\\u202e``), so that what the store holds is shown, never
    obeyed; the rest is left as it is."""
    return _UNPRINTABLE.sub(_escape, text)


def echo(line: str, *, err: bool = False) -> None:
    """One line of a command's output (stdout, or stderr with ``err``), made printable."""
    click.echo(printable(line), err=err)


class _PrintableHandler(logging.Handler):
    """Log lines of the commands on stderr, made printable, message only (as Python's
    fallback handler writes them, to whatever stderr is at the time)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            echo(self.format(record), err=True)
        except Exception:
            self.handleError(record)


def _log_printably() -> None:
    """Send the commands' log lines through _PrintableHandler, unless logging was set
    up already."""
    logger = logging.getLogger("zarrfs")
    if logger.handlers or logging.getLogger().handlers:
        return
    logger.addHandler(_PrintableHandler(logging.WARNING))


class ReadOnlyStore(WriteRefusingStore):
    """``inner`` for reading; every write raises ReadOnlyError. The commands that
    only look at a store open it through this, so that no code path of theirs can
    change it (a directory store's clean-up of temporary files included)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.remote = inner.remote
        self.listable = inner.listable

    def get(self, key: str, *, limit: int | None = None) -> bytes | None:
        return self.inner.get(key, limit=limit)

    def get_buffer(self, key: str, *, limit: int | None = None) -> bytes | memoryview | None:
        return self.inner.get_buffer(key, limit=limit)

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        return self.inner.get_range(key, start, length)

    def get_ranges(self, key: str, ranges: list[tuple[int, int]]) -> list[bytes] | None:
        return self.inner.get_ranges(key, ranges)

    def size(self, key: str) -> int | None:
        return self.inner.size(key)

    def contains(self, key: str) -> bool:
        return self.inner.contains(key)

    def list_dir(self, prefix: str) -> KeyListing:
        return self.inner.list_dir(prefix)

    def scan(self, prefix: str) -> Iterator[tuple[str, int]]:
        return self.inner.scan(prefix)

    def mtime(self, key: str) -> float | None:
        return self.inner.mtime(key)

    def describe(self) -> str:
        return self.inner.describe()

    def refusal(self) -> str:
        return f"{self.describe()} is opened read-only"

    def cleanup(self, older_than: float, between: Callable[[], None] | None = None) -> int:
        raise self._refuse()  # (a mount's clean-up deletes: nothing here may)


@dataclass
class Node:
    """One group or array; ``meta`` is None when its metadata cannot be read."""

    name: str
    path: str  # "" for the root
    meta: NodeMeta | None
    # Metadata that could not be read (the reason the node has no meta, attributes
    # read as empty, a directory that could not be listed), one line each.
    problems: list[str] = field(default_factory=list)
    children: list[Node] = field(default_factory=list)

    @property
    def is_array(self) -> bool:
        return isinstance(self.meta, ArrayMeta)

    def nodes(self) -> Iterator[Node]:
        """This node and every one below it, depth first, children by name."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))


@dataclass
class Hierarchy:
    root: Node
    consolidated: str | None  # the key the hierarchy was listed from, if one
    listed: bool  # False: a store that cannot list and has no consolidated metadata
    problems: list[str]  # of the store as a whole (consolidated metadata ignored, ...)

    def problem_lines(self) -> list[str]:
        """Every metadata problem found, one line each, naming where."""
        found = list(self.problems)
        for node in self.root.nodes():
            found += [f"/{node.path}: {problem}" for problem in node.problems]
        return found


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def _format_warnings() -> Iterator[list[str]]:
    """What formats/ logs while it reads metadata: a document it had to ignore
    (malformed attributes, unusable consolidated metadata) tells in a log line only,
    and is unreadable metadata for the commands. Collected instead of logged."""
    logger = logging.getLogger("zarrfs.formats")
    collect = _Collect()
    propagate, level = logger.propagate, logger.level
    logger.addHandler(collect)
    logger.propagate = False
    logger.setLevel(logging.WARNING)
    try:
        yield collect.messages
    finally:
        logger.removeHandler(collect)
        logger.propagate, logger.level = propagate, level


class _Walker:
    def __init__(self, store: Store, consolidated: bool) -> None:
        self.store = store
        self.problems: list[str] = []
        self.listing: Listing | None = None
        self.root_reads: dict[str, bytes | None] = {}
        source = self._read_root()
        if consolidated and source is not None:
            with _format_warnings() as messages:
                self.listing = hierarchy.open_listing(*source)
            self.problems += messages

    def _read_root(self) -> tuple[str, bytes] | None:
        """As Tree._read_root, the problems kept instead of logged."""
        try:
            return read_root_keys(
                self.store,
                self.root_reads,
                lambda key, e: self.problems.append(f"ignoring {key}: {e}"),
            )
        except InvalidValueError as e:
            raise MetadataError(str(e)) from None  # the root's own document

    def _documents(self, path: str) -> dict[str, bytes]:
        return node_documents(self.store, self.listing, self.root_reads, path)

    def child_names(self, path: str) -> tuple[tuple[str, ...], str | None]:
        if self.listing is not None:
            return tuple(sorted(self.listing.children.get(path, ()))), None
        if not self.store.listable:
            return (), None
        try:
            return tuple(sorted(self.store.list_dir(path).prefixes)), None
        except StoreError as e:
            return (), f"cannot list {path or '/'}: {e}"

    def node(self, path: str, name: str) -> Node | None:
        """The node at ``path``, without its children; None: no Zarr node there."""
        problems: list[str] = []
        meta = None
        with _format_warnings() as messages:
            try:
                found = hierarchy.node_at(path, self._documents(path))
            except (MetadataError, StoreError) as e:
                if not path:
                    raise
                found = None
                problems.append(str(e))
            else:
                if found is None:
                    return None
                meta = found.meta
        return Node(name, path, meta, [*messages, *problems])


def walk(store: Store, *, consolidated: bool = True) -> Hierarchy:
    """Every group and array of ``store``. MetadataError when its root is no Zarr node
    or its root metadata cannot be read."""
    walker = _Walker(store, consolidated)
    root = walker.node("", "")
    if root is None:
        raise MetadataError(f"{store.describe()}: no Zarr group or array metadata found")
    # With a stack, not recursion: a consolidated document may nest paths deeper than
    # Python's recursion limit.
    stack = [root]
    while stack:
        node = stack.pop()
        if node.meta is None or node.is_array:
            continue
        names, problem = walker.child_names(node.path)
        if problem is not None:
            node.problems.append(problem)
        for name in names:
            child = walker.node(join_key(node.path, name), name)
            if child is not None:
                node.children.append(child)
                stack.append(child)
    listed = walker.listing is not None or store.listable
    key = walker.listing.key if walker.listing is not None else None
    return Hierarchy(root, key, listed, walker.problems)


def open_and_walk(
    location: str, *, anonymous: bool, consolidated: bool, done: str | None
) -> tuple[ReadOnlyStore, Hierarchy]:
    """For the commands that look at a store: it opened read-only and walked, one
    error line and exit status 1 when that fails, and a warning when only its root
    could be reached (``done``: what is done with the root, "shown"; None: no
    warning, the caller says what it makes of that)."""
    _log_printably()
    try:
        opened = ReadOnlyStore(open_store(location, StoreOptions(anonymous=anonymous)))
        found = walk(opened, consolidated=consolidated)
    except ZarrfsError as e:
        echo(f"zarrfs: error: {e}", err=True)
        sys.exit(1)
    if not found.listed and done is not None:
        echo(
            f"zarrfs: {opened.describe()} cannot be listed and holds no consolidated "
            f"metadata: only its root is {done}",
            err=True,
        )
    return opened, found
