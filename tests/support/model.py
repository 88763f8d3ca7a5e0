"""The reference the write tests check a mount against: the bytes ``array.raw`` must
hold, as a bytearray of whole rows in C order that a write past the end or a resize
grows with rows of the fill value."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass
class Rows:
    data: bytearray
    row: int  # bytes in one row (the array's size without its first axis)
    fill_row: bytes  # one row of fill value

    @property
    def rows(self) -> int:
        return len(self.data) // self.row

    def resize(self, size: int) -> None:
        """Shrink, or grow with fill rows (``size`` is a whole number of rows)."""
        assert size % self.row == 0, size
        if size <= len(self.data):
            del self.data[size:]
        else:
            self.data += self.fill_row * ((size - len(self.data)) // self.row)

    def write(self, offset: int, payload: bytes) -> None:
        """``payload`` at ``offset``; past the end, whole rows of fill first."""
        end = offset + len(payload)
        if end > len(self.data):
            self.resize(math.ceil(end / self.row) * self.row)
        self.data[offset:end] = payload


class ArrayModel(Rows):
    """Rows that know their array: dtype and the shape after the first axis (a 0-d
    array is one element that never changes size)."""

    def __init__(self, initial: np.ndarray, fill: bytes) -> None:
        self.dtype = initial.dtype
        self.zero_d = initial.ndim == 0
        self.inner = initial.shape[1:]
        row = math.prod(self.inner) * self.dtype.itemsize
        data = bytearray(np.ascontiguousarray(initial).tobytes())
        super().__init__(data, row, fill * (row // self.dtype.itemsize))

    def __len__(self) -> int:
        return len(self.data)

    def bytes(self) -> bytes:
        return bytes(self.data)

    def resize(self, size: int) -> None:
        assert not self.zero_d, "a 0-d array has no rows"
        super().resize(size)

    def array(self) -> np.ndarray:
        if self.zero_d:
            return np.frombuffer(self.bytes(), self.dtype).reshape(())
        return np.frombuffer(self.bytes(), self.dtype).reshape((self.rows, *self.inner))
