"""``array.npy``: an NPY header from ``numpy.lib.format`` followed by ``array.raw``."""

from __future__ import annotations

import io

import numpy as np
from numpy.lib import format as npy_format

from zarrfs.formats.model import ArrayMeta

try:  # numpy >= 2 keeps the implementation in a private module
    from numpy.lib._format_impl import _write_array_header
except ImportError:  # numpy 1.x
    _write_array_header = npy_format._write_array_header
from zarrfs.views.base import View
from zarrfs.views.raw import RawView


def npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """The NPY header numpy itself would write for a C-order array (1.0, else 2.0/3.0)."""
    header = {
        "descr": npy_format.dtype_to_descr(dtype),
        "fortran_order": False,
        "shape": tuple(shape),
    }
    for writer in (npy_format.write_array_header_1_0, npy_format.write_array_header_2_0):
        buf = io.BytesIO()
        try:
            writer(buf, header)
            return buf.getvalue()
        except ValueError:
            continue  # header longer than 1.0 allows: try 2.0
        except UnicodeEncodeError:
            break  # field names outside latin-1: only 3.0 will do
    # numpy picks 3.0 itself but has no public writer for it.
    buf = io.BytesIO()
    _write_array_header(buf, header, (3, 0))
    return buf.getvalue()


class NpyView(View):
    def __init__(self, raw: RawView, meta: ArrayMeta) -> None:
        self.raw = raw
        self.header = npy_header(meta.dtype, meta.shape)

    @property
    def size(self) -> int:
        return len(self.header) + self.raw.size

    async def read(self, offset: int, size: int) -> bytes:
        end = min(offset + size, self.size)
        if offset >= end:
            return b""
        hlen = len(self.header)
        head = self.header[offset:end] if offset < hlen else b""
        if end <= hlen:
            return head
        tail = await self.raw.read(max(offset - hlen, 0), end - max(offset, hlen))
        return head + tail
