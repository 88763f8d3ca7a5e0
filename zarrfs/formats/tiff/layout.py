"""Which images, strips and tags an array's dtype and shape give as a TIFF, and
where each part of the file lies (pure).

The rule: a 2-D array is one image (rows: axis 0, columns: axis 1). An array of 3
or more dimensions is one image per 2-D plane of its last two axes, in C order
(pages: what ImageJ opens as a stack, tifffile as a series) — except a 3-D array
whose conventions name axis 0 as bands, which is one image of ``shape[0]``
samples per pixel stored plane by plane (PlanarConfiguration 2, extra samples
unspecified: what GDAL and QGIS show as bands). Each image is cut into strips of
at most ``MAX_STRIP`` bytes (one row at least), so GDAL reads a block, not a
plane. The IFDs lie one after another after the first 8 (16) bytes, every IFD but
the first of the same size, then the data, at a 64-byte boundary: so every offset
and the file's size follow from dtype and shape arithmetically.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from zarrfs.formats.sidecars import is_big_endian
from zarrfs.formats.tiff.geo import LONG, LONG8, SHORT, Entry, GeoTags
from zarrfs.formats.tiff.ifd import ifd_size

# A strip holds at most this many bytes, and one row at least.
MAX_STRIP = 1 << 20
# No file when its header would be larger (one IFD per plane of a long stack).
MAX_HEADER = 64 << 20
# Classic TIFF's offsets are 32-bit: BigTIFF from here on.
CLASSIC_LIMIT = 1 << 32
DATA_ALIGN = 64
_LONG_MAX = (1 << 32) - 1

# SampleFormat: unsigned, signed, IEEE float, complex IEEE float.
_FORMATS = {"u": 1, "i": 2, "f": 3, "c": 6}
_SIZES = {"u": (1, 2, 4, 8), "i": (1, 2, 4, 8), "f": (2, 4, 8), "c": (8, 16)}

NO_GEO = GeoTags()


def tiff_sample(dtype: np.dtype) -> tuple[int, int] | None:
    """(SampleFormat, BitsPerSample) of ``dtype``; None where TIFF has no such
    sample (bool, strings, datetimes, structured dtypes)."""
    if dtype.fields is not None or dtype.subdtype is not None:
        return None
    if dtype.itemsize not in _SIZES.get(dtype.kind, ()):
        return None
    return _FORMATS[dtype.kind], dtype.itemsize * 8


@dataclass(frozen=True)
class TiffLayout:
    order: str  # "<" (II) or ">" (MM)
    bigtiff: bool
    width: int
    height: int
    pages: int  # images, one IFD each
    samples: int  # samples per pixel: bands, each a plane of its own
    itemsize: int
    sample_format: int
    rows_per_strip: int
    geo: GeoTags
    first_ifd: int = 0  # bytes reserved for IFD 0 (its geo tags)
    ifd: int = 0  # bytes of every further IFD
    data_offset: int = 0

    @property
    def prefix_size(self) -> int:
        return 16 if self.bigtiff else 8

    @property
    def plane_bytes(self) -> int:
        return self.width * self.height * self.itemsize

    @property
    def strips_per_plane(self) -> int:
        return -(-self.height // self.rows_per_strip)

    @property
    def data_size(self) -> int:
        return self.pages * self.samples * self.plane_bytes

    @property
    def file_size(self) -> int:
        return self.data_offset + self.data_size

    def ifd_offset(self, index: int) -> int:
        """Where IFD ``index`` starts (``pages``: where the last one ends)."""
        if index == 0:
            return self.prefix_size
        return self.prefix_size + self.first_ifd + (index - 1) * self.ifd

    def ifd_index(self, offset: int) -> int:
        """The IFD holding file offset ``offset``: -1 before the first, ``pages``
        past the last."""
        if offset < self.prefix_size:
            return -1
        if offset < self.prefix_size + self.first_ifd:
            return 0
        return min(1 + (offset - self.ifd_offset(1)) // max(self.ifd, 1), self.pages)


def image_entries(layout: TiffLayout, index: int) -> list[Entry]:
    """The entries of image ``index`` but its geo tags; its strips' offsets point
    into the data region."""
    samples = layout.samples
    row = layout.width * layout.itemsize
    strips = layout.strips_per_plane
    first_row = np.arange(strips, dtype=np.uint64) * np.uint64(layout.rows_per_strip)
    counts = np.minimum(
        np.uint64(layout.rows_per_strip), np.uint64(layout.height) - first_row
    ) * np.uint64(row)
    plane = layout.plane_bytes
    start = layout.data_offset + index * samples * plane
    planes = np.arange(samples, dtype=np.uint64) * np.uint64(plane)
    offsets = (np.uint64(start) + planes[:, None] + first_row[None, :] * np.uint64(row)).ravel()
    counts = np.tile(counts, samples)
    order = layout.order
    offset_type = LONG8 if layout.bigtiff else LONG
    offset_dtype = f"{order}u8" if layout.bigtiff else f"{order}u4"
    entries: list[Entry] = [
        (256, LONG, 1, (layout.width,)),  # ImageWidth
        (257, LONG, 1, (layout.height,)),  # ImageLength
        (258, SHORT, samples, (layout.itemsize * 8,) * samples),  # BitsPerSample
        (259, SHORT, 1, (1,)),  # Compression: none
        (262, SHORT, 1, (1,)),  # PhotometricInterpretation: min is black
        (273, offset_type, len(offsets), offsets.astype(offset_dtype).tobytes()),
        (277, SHORT, 1, (samples,)),  # SamplesPerPixel
        (278, LONG, 1, (layout.rows_per_strip,)),  # RowsPerStrip
        (279, LONG, len(counts), counts.astype(f"{order}u4").tobytes()),  # StripByteCounts
        (284, SHORT, 1, (2 if samples > 1 else 1,)),  # PlanarConfiguration
        (339, SHORT, samples, (layout.sample_format,) * samples),  # SampleFormat
    ]
    if samples > 1:
        entries.append((338, SHORT, samples - 1, (0,) * (samples - 1)))  # ExtraSamples
    return entries


def _sized(layout: TiffLayout) -> TiffLayout:
    """``layout`` with its IFD sizes and data offset."""
    first_entries = image_entries(layout, 0)
    first = max(ifd_size(first_entries + geo, layout.bigtiff) for geo in layout.geo.variants())
    further = ifd_size(first_entries, layout.bigtiff) if layout.pages > 1 else 0
    sized = replace(layout, first_ifd=first, ifd=further)
    end = sized.ifd_offset(layout.pages)
    return replace(sized, data_offset=-(-end // DATA_ALIGN) * DATA_ALIGN)


def tiff_layout(
    dtype: np.dtype,
    shape: tuple[int, ...],
    *,
    bands: bool = False,
    geo: GeoTags = NO_GEO,
    bigtiff: bool | None = None,
) -> TiffLayout | str:
    """The layout of ``array.tif`` for an array of ``dtype`` and ``shape``, or why
    there is none. ``bands``: a 3-D array's axis 0 is bands (one image); ``bigtiff``
    forces the variant (None: BigTIFF only where classic TIFF's offsets end)."""
    sample = tiff_sample(dtype)
    if sample is None:
        return f"TIFF has no sample type for {dtype.str}"
    if len(shape) < 2:
        return "fewer than 2 dimensions"
    if 0 in shape:
        return "an axis of length 0"
    height, width = shape[-2], shape[-1]
    lead = math.prod(shape[:-2])
    samples, pages = (lead, 1) if bands and len(shape) == 3 else (1, lead)
    row = width * dtype.itemsize
    if height > _LONG_MAX or row > _LONG_MAX:
        return f"planes of {height} x {width} are larger than TIFF's 32-bit sizes"
    if samples > 0xFFFF:
        return f"{samples} bands, more than TIFF's 65535"
    rows_per_strip = max(1, min(height, MAX_STRIP // row))
    strips = samples * -(-height // rows_per_strip)
    # The header's size grows with the strips and the pages: refused before making it.
    estimate = pages * (256 + 16 * strips)
    if estimate > 2 * MAX_HEADER:
        return f"its header would exceed {MAX_HEADER} bytes ({pages} images)"
    layout = TiffLayout(
        order=">" if is_big_endian(dtype) and dtype.itemsize > 1 else "<",
        bigtiff=bool(bigtiff),
        width=width,
        height=height,
        pages=pages,
        samples=samples,
        itemsize=dtype.itemsize,
        sample_format=sample[0],
        rows_per_strip=rows_per_strip,
        geo=geo,
    )
    layout = _sized(layout)
    if bigtiff is None and layout.file_size >= CLASSIC_LIMIT:
        layout = _sized(replace(layout, bigtiff=True))
    if layout.data_offset > MAX_HEADER:
        return f"its header would take {layout.data_offset} bytes, more than {MAX_HEADER}"
    if not layout.bigtiff and layout.file_size >= CLASSIC_LIMIT:
        return "too large for classic TIFF"
    return layout
