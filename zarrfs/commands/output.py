"""What the commands print: one error line and an exit status (``fail``), and the
lines of the commands that look at a store (``check``, ``tree``), made printable.

Everything those commands print passes through ``printable``: names, keys, reasons
and codec settings come from the store, and a terminal acts on the control
characters they may hold (an escape sequence retitles the window or moves the
cursor, a newline fakes a line of output).
"""

from __future__ import annotations

import logging
import re
import sys
from typing import NoReturn

import click

from zarrfs.commands.walk import Hierarchy, open_walk
from zarrfs.errors import ZarrfsError
from zarrfs.stores.readonly import ReadOnlyStore

# What a terminal acts on instead of showing: C0 controls, DEL and C1 controls (Unicode's
# "Cc"), the line and paragraph separators, the bidirectional formatting characters
# (they reorder what follows them on screen), and lone surrogates (undecodable bytes
# of a file name, which no terminal encoding can carry).
_UNPRINTABLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def fail(message: str, code: int = 1) -> NoReturn:
    click.echo(f"zarrfs: error: {message}", err=True)
    sys.exit(code)


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


def open_and_walk(
    location: str, *, anonymous: bool, consolidated: bool
) -> tuple[ReadOnlyStore, Hierarchy]:
    """``walk.open_walk`` for a command: its log lines printable, and its failure one
    error line and exit status 1."""
    _log_printably()
    try:
        return open_walk(location, anonymous=anonymous, consolidated=consolidated)
    except ZarrfsError as e:
        echo(f"zarrfs: error: {e}", err=True)
        sys.exit(1)
