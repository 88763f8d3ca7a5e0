"""The bytes of a TIFF's header: its first 8 (classic) or 16 (BigTIFF) bytes and
its IFDs, each built on its own, so a read of part of a large header builds only
the IFDs it covers (pure)."""

from __future__ import annotations

import struct

from zarrfs.formats.conventions import GeoTransform
from zarrfs.formats.tiff.ifd import build_ifd
from zarrfs.formats.tiff.layout import TiffLayout, image_entries


def prefix(layout: TiffLayout) -> bytes:
    """The byte order mark, the version and the offset of the first IFD."""
    order = layout.order
    mark = b"II" if order == "<" else b"MM"
    first = layout.ifd_offset(0)
    if layout.bigtiff:
        return mark + struct.pack(f"{order}HHHQ", 43, 8, 0, first)
    return mark + struct.pack(f"{order}HI", 42, first)


def ifd_bytes(layout: TiffLayout, index: int, geotransform: GeoTransform | None) -> bytes:
    """IFD ``index`` as it lies in the file, padded to its reserved size."""
    entries = image_entries(layout, index)
    if index == 0:
        entries += layout.geo.entries(geotransform)
    at = layout.ifd_offset(index)
    following = layout.ifd_offset(index + 1) if index + 1 < layout.pages else 0
    out = build_ifd(entries, at, following, layout.bigtiff, layout.order)
    reserved = layout.ifd_offset(index + 1) - at
    assert len(out) <= reserved, (index, len(out), reserved)
    return out.ljust(reserved, b"\0")


def header_bytes(
    layout: TiffLayout, offset: int, size: int, geotransform: GeoTransform | None = None
) -> bytes:
    """The bytes ``[offset, offset + size)`` of the header (clipped to it);
    ``geotransform``: what the coordinates gave, where the layout's geo tags wait
    for them."""
    end = min(offset + size, layout.data_offset)
    if offset >= end:
        return b""
    index = layout.ifd_index(offset)
    if index < 0:
        head = prefix(layout)
        parts = [head, b"\0" * (layout.ifd_offset(0) - len(head))]
        base, index = 0, 0
    else:
        parts, base = [], layout.ifd_offset(index)
    position = base + sum(len(part) for part in parts)
    while position < end and index < layout.pages:
        block = ifd_bytes(layout, index, geotransform)
        parts.append(block)
        position += len(block)
        index += 1
    if position < end:
        parts.append(b"\0" * (layout.data_offset - position))
    return b"".join(parts)[offset - base : end - base]
