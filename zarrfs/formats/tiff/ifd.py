"""One IFD (image file directory) of a TIFF: its size and its bytes (pure)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

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


@dataclass
class Placed:
    """An IFD's bytes and where, in them, values lie: the values of each tag, and
    the file offsets an IFD moved elsewhere would change (its pointers to its
    out-of-line values; ``next_at``, its pointer to the next IFD)."""

    data: bytes
    values_at: dict[int, int] = field(default_factory=dict)
    pointers_at: list[int] = field(default_factory=list)
    next_at: int = 0


def build_ifd(entries: Sequence[Entry], at: int, next_ifd: int, bigtiff: bool, order: str) -> bytes:
    """The IFD of ``entries`` (sorted here by tag) at file offset ``at``, its values
    after it, pointing to the IFD at ``next_ifd`` (0: the last)."""
    return place_ifd(entries, at, next_ifd, bigtiff, order).data


def place_ifd(
    entries: Sequence[Entry], at: int, next_ifd: int, bigtiff: bool, order: str
) -> Placed:
    """``build_ifd``, saying where its values and pointers lie."""
    ordered = sorted(entries, key=lambda entry: entry[0])
    inline = 8 if bigtiff else 4
    if bigtiff:
        head, entry_format, tail = f"{order}Q", f"{order}HHQ", f"{order}Q"
    else:
        head, entry_format, tail = f"{order}H", f"{order}HHI", f"{order}I"
    placed = Placed(b"")
    table = bytearray(struct.pack(head, len(ordered)))
    values = bytearray()
    values_start = len(table) + (20 if bigtiff else 12) * len(ordered) + struct.calcsize(tail)
    for tag, type_, count, raw in ordered:
        packed = pack_values(type_, raw, order)
        assert len(packed) == TYPE_SIZES[type_] * count, (tag, len(packed))
        table += struct.pack(entry_format, tag, type_, count)
        if len(packed) <= inline:
            placed.values_at[tag] = len(table)
            table += packed.ljust(inline, b"\0")
            continue
        position = _align(at + values_start + len(values)) - at
        values += b"\0" * (position - values_start - len(values))
        placed.values_at[tag] = position
        placed.pointers_at.append(len(table))
        values += packed
        table += struct.pack(f"{order}Q" if bigtiff else f"{order}I", at + position)
    placed.next_at = len(table)
    table += struct.pack(tail, next_ifd)
    out = bytes(table + values)
    placed.data = out.ljust(_align(len(out)), b"\0")
    return placed
