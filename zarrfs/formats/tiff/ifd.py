"""One IFD (image file directory) of a TIFF: its size and its bytes (pure)."""

from __future__ import annotations

import struct
from collections.abc import Sequence

from zarrfs.formats.tiff.geo import TYPE_SIZES, Entry, pack_values

# Out-of-line values start on 8-byte boundaries (TIFF asks for even ones; doubles
# read best aligned).
VALUE_ALIGN = 8


def _align(n: int, to: int = VALUE_ALIGN) -> int:
    return -(-n // to) * to


def ifd_size(entries: Sequence[Entry], bigtiff: bool) -> int:
    """The bytes an IFD of these entries takes, its out-of-line values included."""
    inline = 8 if bigtiff else 4
    size = (8 + 20 * len(entries) + 8) if bigtiff else (2 + 12 * len(entries) + 4)
    for _, type_, count, _ in entries:
        nbytes = TYPE_SIZES[type_] * count
        if nbytes > inline:
            size = _align(size) + nbytes
    return _align(size)


def build_ifd(entries: Sequence[Entry], at: int, next_ifd: int, bigtiff: bool, order: str) -> bytes:
    """The IFD of ``entries`` (sorted here by tag) at file offset ``at``, its values
    after it, pointing to the IFD at ``next_ifd`` (0: the last)."""
    ordered = sorted(entries, key=lambda entry: entry[0])
    inline = 8 if bigtiff else 4
    if bigtiff:
        head, entry_format, tail = f"{order}Q", f"{order}HHQ", f"{order}Q"
    else:
        head, entry_format, tail = f"{order}H", f"{order}HHI", f"{order}I"
    table = bytearray(struct.pack(head, len(ordered)))
    values = bytearray()
    end = at + len(table) + (20 if bigtiff else 12) * len(ordered)
    end += struct.calcsize(tail)  # the next IFD's offset
    for tag, type_, count, raw in ordered:
        packed = pack_values(type_, raw, order)
        assert len(packed) == TYPE_SIZES[type_] * count, (tag, len(packed))
        table += struct.pack(entry_format, tag, type_, count)
        if len(packed) <= inline:
            table += packed.ljust(inline, b"\0")
            continue
        pad = _align(end + len(values)) - (end + len(values))
        values += b"\0" * pad
        offset = end + len(values)
        values += packed
        table += struct.pack(f"{order}Q" if bigtiff else f"{order}I", offset)
    table += struct.pack(tail, next_ifd)
    out = bytes(table + values)
    return out.ljust(_align(len(out)), b"\0")
