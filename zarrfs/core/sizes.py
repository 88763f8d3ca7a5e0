"""Sizes and counts as users read and write them: on the command line, in messages."""

from __future__ import annotations

_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def parse_size(text: str) -> int:
    """'512M', '1G', '4096' → bytes (binary units, as rclone and s3ql take them)."""
    units = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    s = text.strip().upper().removesuffix("B").removesuffix("I")
    num, unit = (s[:-1], s[-1]) if s and s[-1] in units else (s, "")
    try:
        value = float(num)
        if not 0 <= value < 2**63:
            raise ValueError
        return int(value * units[unit])
    except (ValueError, OverflowError):
        raise ValueError(f"invalid size {text!r}") from None


def plural(n: int, word: str) -> str:
    """ "1 chunk", "3 chunks"."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def format_size(nbytes: int, *, short: bool = False) -> str:
    """``nbytes`` in binary units, for a sentence: "1 byte", "100 bytes", "192 KiB",
    "1.5 MiB" (up to four significant digits); ``short``, for a line of figures:
    "116 B", "192.0 KiB", "21.2 KiB" (one decimal)."""
    if nbytes < 1024:
        return f"{nbytes} B" if short else plural(nbytes, "byte")
    value = float(nbytes)
    for unit in _UNITS:
        value /= 1024
        if value < 1024 or unit == _UNITS[-1]:
            break
    return f"{value:.1f} {unit}" if short else f"{value:.4g} {unit}"
