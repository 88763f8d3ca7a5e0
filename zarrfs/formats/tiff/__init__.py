"""``array.tif``: the layout of an uncompressed TIFF over an array's own bytes (pure).

The file is a header computed from metadata, then exactly the bytes of
``array.raw``: every image's strips point into that data region, so no byte is
converted (a big-endian array gives a big-endian ``MM`` TIFF).

- ``layout``: which images, strips and tags a dtype and shape give, where each
  IFD lies, the file's size; classic TIFF below 4 GiB, BigTIFF from there;
- ``geo``: the GeoTIFF and GDAL tags a ``Conventions`` gives (fixed sizes);
- ``ifd``: one IFD's size and bytes; ``header``: any range of the header, built
  IFD by IFD.
"""

from __future__ import annotations

from zarrfs.formats.tiff.geo import GeoTags, geo_tags
from zarrfs.formats.tiff.header import header_bytes
from zarrfs.formats.tiff.layout import TiffLayout, tiff_layout, tiff_sample

__all__ = ["GeoTags", "TiffLayout", "geo_tags", "header_bytes", "tiff_layout", "tiff_sample"]
