"""JSON text, fast and in bounded memory (pure): writing it indented, and reading
where each member of one large object lies without keeping their values.

Writing: ``json.dumps`` with an indent, three times faster, for parsed JSON.
Consolidated metadata shows each node's documents as its writer would have written
them (zarr-python: indent 2 or 4), so a mount of 10 000 arrays serialises 20 000
documents. With an indent, Python 3.11's json falls back to its pure-Python
encoder, a generator per token (0.3 s for those documents); this one builds a
list of strings in one recursion over what ``json.loads`` can return and uses
json's own C string escaper, so the bytes are the same. Anything else (a type
json.loads does not make, an int too long to print) is left to ``json.dumps``.
Indenting multiplies a deeply nested document many times over, so the output may
be bounded (``limit``): past it, ``TooLong`` is raised before it is all made.

Reading: ``read_object`` accepts exactly the documents ``json.loads`` accepts (one
JSON object, any of json's encodings) and returns its members, but the members of
the one object at a given member path are returned as ``Spans``: where each value
lies in the document's UTF-8 text, which ``json.loads`` of that slice parses. A
consolidated document of 100 000 nodes is read so, one value in memory at a time,
with json's own C scanner, instead of as one tree of a million Python objects.
"""

from __future__ import annotations

import codecs
import json
import re
from json.decoder import scanstring
from json.encoder import encode_basestring_ascii as _quote  # the C escaper where built
from typing import Any

from zarrfs.errors import MetadataError
from zarrfs.formats.limits import MAX_JSON_DEPTH, check_depth

_INFINITY = float("inf")


class _Unusual(Exception):
    """A value this encoder does not handle: json.dumps does."""


class TooLong(Exception):
    """The text would be longer than the limit it was made under."""


def dumps(value: Any, indent: int | None, sort_keys: bool, limit: int | None = None) -> str:
    """``json.dumps(value, indent=indent, sort_keys=sort_keys, ensure_ascii=True,
    allow_nan=True)``, character for character; TooLong past ``limit`` characters."""
    if indent is not None:
        out: list[str] = []
        room = None if limit is None else [limit]
        try:
            _dump(value, out, "\n", " " * indent, sort_keys, room)
            return "".join(out)
        except (_Unusual, ValueError, RecursionError):
            pass
    # json's C encoder serves indent None; the rest is rare
    text = json.dumps(value, indent=indent, sort_keys=sort_keys, ensure_ascii=True, allow_nan=True)
    if limit is not None and len(text) > limit:
        raise TooLong(len(text))
    return text


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return _quote(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    kind = type(value)
    if kind is int:
        return int.__repr__(value)
    if kind is float:
        if value != value:
            return "NaN"
        if value == _INFINITY:
            return "Infinity"
        if value == -_INFINITY:
            return "-Infinity"
        return float.__repr__(value)
    raise _Unusual(kind.__name__)


def _spend(room: list[int], length: int) -> None:
    room[0] -= length
    if room[0] < 0:
        raise TooLong()


def _dump(
    value: Any, out: list[str], newline: str, unit: str, sort_keys: bool, room: list[int] | None
) -> None:
    """Append ``value``; ``newline`` is a line break plus the current level's indent;
    ``room``, when given, the characters left before TooLong."""
    kind = type(value)
    if kind is dict:
        if not value:
            out.append("{}")
            return
        inner = newline + unit
        separator = "{" + inner
        items = sorted(value.items()) if sort_keys else value.items()
        for key, item in items:
            if type(key) is not str:
                raise _Unusual("key")
            quoted = _quote(key)
            out.append(separator)
            out.append(quoted)
            out.append(": ")
            if type(item) is dict or type(item) is list:
                if room is not None:
                    _spend(room, len(separator) + len(quoted) + 2)
                _dump(item, out, inner, unit, sort_keys, room)
            else:
                text = _scalar(item)
                out.append(text)
                if room is not None:
                    _spend(room, len(separator) + len(quoted) + 2 + len(text))
            separator = "," + inner
        out.append(newline + "}")
        if room is not None:
            _spend(room, len(newline) + 1)
    elif kind is list:
        if not value:
            out.append("[]")
            return
        inner = newline + unit
        separator = "[" + inner
        for item in value:
            out.append(separator)
            if type(item) is dict or type(item) is list:
                if room is not None:
                    _spend(room, len(separator))
                _dump(item, out, inner, unit, sort_keys, room)
            else:
                text = _scalar(item)
                out.append(text)
                if room is not None:
                    _spend(room, len(separator) + len(text))
            separator = "," + inner
        out.append(newline + "]")
        if room is not None:
            _spend(room, len(newline) + 1)
    else:
        text = _scalar(value)
        out.append(text)
        if room is not None:
            _spend(room, len(text))


# -- reading ---------------------------------------------------------------------------

_WHITESPACE = re.compile(r"[ \t\n\r]*")  # json's own
_scan_value = json.JSONDecoder().scan_once  # json's C scanner: (value, end) at an index
_UTF8_PIECE = 1 << 20
_END_BITS = 40
_END_MASK = (1 << _END_BITS) - 1


class Spans(dict[str, int]):
    """The members of one object by name: where each value lies (``span``)."""


def span(packed: int) -> tuple[int, int, bool]:
    """(start, end, whether the value is an object) of a Spans value: its text is
    ``source[start:end]`` of the source ``read_object`` returned."""
    return packed >> (_END_BITS + 1), (packed >> 1) & ((1 << _END_BITS) - 1), bool(packed & 1)


def start(packed: int) -> int:
    return packed >> (_END_BITS + 1)


def end(packed: int) -> int:
    return (packed >> 1) & _END_MASK


def _pack(start: int, end: int, is_object: bool) -> int:
    # One int per member, not a tuple of three: a tenth of the memory.
    return (start << (_END_BITS + 1)) | (end << 1) | is_object


def read_object(
    data: bytes, what: str, path: tuple[str, ...]
) -> tuple[dict[str, Any], bytes] | None:
    """``json.loads(data)``, except that the object at member path ``path``
    (("metadata",): ``data["metadata"]``) is ``Spans``; and the UTF-8 text the spans
    refer to (``data`` itself unless it is UTF-16/32). None when ``data`` holds no
    object at all (``json.loads`` tells what it holds, or why it is no JSON).

    MetadataError when it is no valid JSON, or nests deeper than MAX_JSON_DEPTH.
    """
    try:
        encoding = json.detect_encoding(data)
        if encoding.startswith("utf-8"):
            source = data
            if not data.isascii():
                _check_utf8(data)
        else:
            source = data.decode(encoding, "surrogatepass").encode("utf-8", "surrogatepass")
        # Latin-1 makes one character of each byte: offsets in the text are offsets
        # in the source, and non-ASCII text (only inside strings) is read from it.
        reader = _Reader(source.decode("latin-1"), source, what)
        start = 3 if encoding == "utf-8-sig" else 0
        members = reader.document(start, path)
        if members is None:
            return None
    except (UnicodeDecodeError, ValueError) as e:
        raise MetadataError(f"{what} is not valid JSON: {e}") from None
    except RecursionError:
        raise MetadataError(f"{what} nests deeper than JSON can be read") from None
    return members, source


def loads_object(text: bytes) -> dict[str, Any]:
    """``json.loads`` of a UTF-8 slice that ``read_object`` found to be an object (so
    valid), without its detour through detecting the encoding."""
    value, _ = _scan_value(text.decode("utf-8", "surrogatepass"), 0)
    return value  # type: ignore[no-any-return]


def _check_utf8(data: bytes) -> None:
    """UnicodeDecodeError where ``data`` is no UTF-8 (as json.loads decodes it), in
    pieces: the decoded text is not kept."""
    decoder = codecs.getincrementaldecoder("utf-8")("surrogatepass")
    view = memoryview(data)
    for offset in range(0, len(data), _UTF8_PIECE):
        decoder.decode(view[offset : offset + _UTF8_PIECE])
    decoder.decode(b"", final=True)


class _Reader:
    def __init__(self, text: str, source: bytes, what: str) -> None:
        self.text = text
        self.source = source
        self.ascii = source.isascii()
        self.what = what
        # A document with few brackets cannot nest deep: most are spared the walk.
        self.shallow = text.count("[") + text.count("{") <= MAX_JSON_DEPTH

    def document(self, pos: int, path: tuple[str, ...]) -> dict[str, Any] | None:
        text = self.text
        pos = self._space(pos)
        if not text.startswith("{", pos):
            return None
        members, end = self._object(pos, 1, path)
        end = self._space(end)
        if end != len(text):
            raise json.JSONDecodeError("Extra data", text, end)
        return members

    def _space(self, pos: int) -> int:
        return _WHITESPACE.match(self.text, pos).end()  # type: ignore[union-attr]

    def _members(self, pos: int) -> Any:
        """(name, position of its value) of each member of the object at ``pos``; the
        caller sends back where each value ended."""
        text = self.text
        pos = self._space(pos + 1)
        if text.startswith("}", pos):
            return pos + 1
        while True:
            if not text.startswith('"', pos):
                raise json.JSONDecodeError(
                    "Expecting property name enclosed in double quotes", text, pos
                )
            name, end = scanstring(text, pos + 1)
            if not self.ascii and not name.isascii():
                name = json.loads(self.source[pos:end])
            pos = self._space(end)
            if not text.startswith(":", pos):
                raise json.JSONDecodeError("Expecting ':' delimiter", text, pos)
            pos = yield name, self._space(pos + 1)
            pos = self._space(pos)
            if text.startswith("}", pos):
                return pos + 1
            if not text.startswith(",", pos):
                raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)
            pos = self._space(pos + 1)

    def _object(self, pos: int, depth: int, path: tuple[str, ...]) -> tuple[dict[str, Any], int]:
        members: dict[str, Any] = {}
        walk = self._members(pos)
        end = None
        try:
            while True:
                name, pos = walk.send(end)
                value: Any
                if path and name == path[0] and self.text.startswith("{", pos):
                    if len(path) == 1:
                        value, end = self._spans(pos, depth + 1)
                    else:
                        value, end = self._object(pos, depth + 1, path[1:])
                else:
                    value, end = self._value(pos, depth + 1)
                    if not self.ascii and not self.text[pos:end].isascii():
                        value = json.loads(self.source[pos:end])  # its strings as UTF-8
                members[name] = value  # the last of duplicate names wins, as in json
        except StopIteration as stop:
            return members, stop.value

    def _spans(self, pos: int, depth: int) -> tuple[Spans, int]:
        # _members and _value, unrolled: this loop reads each node's entry.
        text, space, scan = self.text, _WHITESPACE.match, _scan_value
        limit = MAX_JSON_DEPTH - depth  # a value shorter than this cannot nest too deep
        spans = Spans()
        pos = space(text, pos + 1).end()
        if text.startswith("}", pos):
            return spans, pos + 1
        while True:
            if not text.startswith('"', pos):
                raise json.JSONDecodeError(
                    "Expecting property name enclosed in double quotes", text, pos
                )
            name, end = scanstring(text, pos + 1)
            if not self.ascii and not name.isascii():
                name = json.loads(self.source[pos:end])
            pos = space(text, end).end()
            if not text.startswith(":", pos):
                raise json.JSONDecodeError("Expecting ':' delimiter", text, pos)
            pos = space(text, pos + 1).end()
            try:
                value, end = scan(text, pos)
            except StopIteration as stop:
                raise json.JSONDecodeError("Expecting value", text, stop.value) from None
            if end - pos > limit:
                self._check_depth(value, pos, end, depth + 1)
            spans[name] = _pack(pos, end, type(value) is dict)
            pos = space(text, end).end()
            if text.startswith("}", pos):
                return spans, pos + 1
            if not text.startswith(",", pos):
                raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)
            pos = space(text, pos + 1).end()

    def _value(self, pos: int, depth: int) -> tuple[Any, int]:
        try:
            value, end = _scan_value(self.text, pos)
        except StopIteration as stop:
            raise json.JSONDecodeError("Expecting value", self.text, stop.value) from None
        self._check_depth(value, pos, end, depth)
        return value, end

    def _check_depth(self, value: Any, start: int, end: int, depth: int) -> None:
        """MetadataError where ``value``, at ``depth`` in the document, nests too deep."""
        if self.shallow:
            return
        text = self.text
        brackets = text.count("[", start, end) + text.count("{", start, end)
        if brackets + depth - 1 > MAX_JSON_DEPTH:
            nested = value
            for _ in range(depth - 1):  # as deep as it lies in the document
                nested = [nested]
            check_depth(nested, self.what)
