"""The bytes of a TIFF's header: its first 8 (classic) or 16 (BigTIFF) bytes and
its IFDs, each built on its own, so a read of part of a large header builds only
the IFDs it covers (pure)."""

from __future__ import annotations

import struct

import numpy as np

from zarrfs.formats.conventions import GeoTransform
from zarrfs.formats.tiff.ifd import build_ifd, place_ifd
from zarrfs.formats.tiff.layout import TiffLayout, image_entries

STRIP_OFFSETS = 273


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
    if index == 0 and position < end:
        block = ifd_bytes(layout, 0, geotransform)
        parts.append(block)
        position += len(block)
        index += 1
    if position < end and index < layout.pages:
        count = min(layout.pages - index, -(-(end - position) // layout.ifd))
        parts.append(further_ifds(layout, index, count))
        position += count * layout.ifd
    if position < end:
        parts.append(b"\0" * (layout.data_offset - position))
    return b"".join(parts)[offset - base : end - base]


def further_ifds(layout: TiffLayout, first: int, count: int) -> bytes:
    """IFDs ``first`` to ``first + count`` (not IFD 0), made at once: each is the
    first of them moved by whole IFDs, its file offsets moved with it and its strips
    by whole images (a header of a hundred thousand IFDs is read in a few tenths of
    a second)."""
    assert first >= 1 and count >= 1 and first + count <= layout.pages
    size = layout.ifd
    at = layout.ifd_offset(first)
    following = layout.ifd_offset(first + 1) if first + 1 < layout.pages else 0
    placed = place_ifd(image_entries(layout, first), at, following, layout.bigtiff, layout.order)
    template = np.frombuffer(placed.data.ljust(size, b"\0"), dtype=np.uint8)
    out = np.tile(template, (count, 1))
    steps = np.arange(count, dtype=np.uint64)
    word = np.dtype(f"{layout.order}u8" if layout.bigtiff else f"{layout.order}u4")

    def shift(position: int, n: int, stride: int) -> None:
        """Add ``stride`` per IFD to the ``n`` offsets at ``position``."""
        columns = out[:, position : position + n * word.itemsize]
        old = np.ascontiguousarray(columns).view(word).astype(np.uint64)
        new = old + steps[:, None] * np.uint64(stride)
        columns[:] = new.astype(word).view(np.uint8).reshape(count, -1)

    for pointer in placed.pointers_at:
        shift(pointer, 1, size)
    strips = layout.strips_per_plane * layout.samples
    shift(placed.values_at[STRIP_OFFSETS], strips, layout.samples * layout.plane_bytes)
    shift(placed.next_at, 1, size)
    if first + count == layout.pages:
        out[-1, placed.next_at : placed.next_at + word.itemsize] = 0
    return out.tobytes()
