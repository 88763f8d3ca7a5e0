"""Sizes as users write them on the command line."""

from __future__ import annotations


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
