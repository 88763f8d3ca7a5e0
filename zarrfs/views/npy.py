"""``array.npy``: an NPY header as numpy writes it, followed by ``array.raw``."""

from __future__ import annotations

import functools
import io
import logging
import struct
from typing import NoReturn

import numpy as np
from numpy.lib import format as npy_format

from zarrfs.core.arrays import ArrayState
from zarrfs.core.read.reading import Buffer
from zarrfs.core.write.writeback import WriteBack
from zarrfs.errors import InvalidArgumentError, PermissionDeniedError
from zarrfs.views.base import ArrayView

log = logging.getLogger(__name__)


# numpy itself refuses longer headers unless told otherwise (max_header_size): a
# header being written is held in memory until complete, so no more than this.
MAX_HEADER = 10000


@functools.lru_cache(maxsize=1024)  # a hierarchy has many arrays of one dtype and shape
def npy_header(dtype: np.dtype, shape: tuple[int, ...], fortran_order: bool = False) -> bytes:
    """The NPY header ``np.save`` writes for such an array: version 1.0, else 2.0
    (a header too long for 1.0), else 3.0 (field names outside latin-1)."""
    header = {
        "descr": npy_format.dtype_to_descr(dtype),
        "fortran_order": fortran_order,
        "shape": tuple(shape),
    }
    for writer in (npy_format.write_array_header_1_0, npy_format.write_array_header_2_0):
        buf = io.BytesIO()
        try:
            writer(buf, header)
            return buf.getvalue()
        except ValueError:
            continue  # header longer than 1.0 allows, or not latin-1: try 2.0
    return _header_3_0(header)


def _header_3_0(header: dict[str, object]) -> bytes:
    """Version 3.0 (version 2.0 with the header text in UTF-8), which numpy writes
    but has no public writer for, laid out as numpy's writers lay out 2.0."""
    text = "{" + "".join(f"'{key}': {value!r}, " for key, value in sorted(header.items())) + "}"
    # Room to grow the length of the growing axis in place, as numpy leaves.
    shape = header["shape"]
    assert isinstance(shape, tuple)
    if shape:
        growing = shape[-1 if header["fortran_order"] else 0]
        text += " " * (npy_format.GROWTH_AXIS_MAX_DIGITS - len(repr(growing)))
    encoded = text.encode("utf8")
    # The length takes 4 bytes; spaces and a newline pad the header to where the
    # data starts aligned (a whole ARRAY_ALIGN of them where it would be already).
    length = struct.Struct("<I")
    pad = npy_format.ARRAY_ALIGN - (
        (npy_format.MAGIC_LEN + length.size + len(encoded) + 1) % npy_format.ARRAY_ALIGN
    )
    prefix = npy_format.magic(3, 0) + length.pack(len(encoded) + 1 + pad)
    return prefix + encoded + b" " * pad + b"\n"


def parse_npy_header(data: bytes) -> tuple[int, np.dtype, tuple[int, ...], bool] | None:
    """(header length, dtype, shape, fortran_order) once ``data`` holds a whole header.

    ``None`` while more bytes are needed; ValueError if it is no NPY header.
    """
    if len(data) < 10:
        if not npy_format.MAGIC_PREFIX.startswith(bytes(data[:6])):
            raise ValueError("not an NPY file")
        return None
    buf = io.BytesIO(bytes(data))
    major, _ = npy_format.read_magic(buf)
    length_size = 2 if major == 1 else 4
    if len(data) < 8 + length_size:
        return None
    length = int.from_bytes(data[8 : 8 + length_size], "little")
    if length > MAX_HEADER:
        raise ValueError(f"header of {length} bytes (numpy reads at most {MAX_HEADER})")
    total = 8 + length_size + length
    if len(data) < total:
        return None
    buf.seek(0)
    npy_format.read_magic(buf)
    reader = npy_format.read_array_header_1_0 if major == 1 else npy_format.read_array_header_2_0
    shape, fortran_order, dtype = reader(buf)
    return total, dtype, tuple(shape), fortran_order


class NpyView(ArrayView):
    """``array.npy``: the header follows the array's shape; the data part is array.raw.

    The header of an existing file cannot be changed (EPERM), but after O_TRUNC the
    first bytes written form a new header, which may set a new ``shape[0]`` as long
    as dtype and trailing shape match (so ``np.save`` onto the file works). An open
    with O_TRUNC changes nothing until such a header is written: the truncate is
    held until then, and dropped if the header is refused or the file is closed
    before one is complete, so a refused ``np.save`` leaves the array as it was.
    A write to the array's bytes meanwhile (through array.raw) makes the file the
    array again: the header being written is dropped.
    """

    writable = True
    reads_counted = True

    def __init__(self, state: ArrayState, writeback: WriteBack | None = None) -> None:
        super().__init__(state, writeback)
        self._header_for: tuple[int, ...] | None = None
        self._header = b""
        self._pending: bytearray | None = None  # a new header after O_TRUNC, so far
        self._pending_since = 0  # the array's ``changes`` when it began
        self._truncate_held = False  # an O_TRUNC not applied until a header matches
        self._refused: str | None = None  # why the new header was refused

    @property
    def pending_header(self) -> bytearray | None:
        """The bytes of a new header written since O_TRUNC, while it is incomplete
        (None: the file is the array)."""
        if self._pending is not None and self.state.changes != self._pending_since:
            self._pending = None  # the array's bytes were written since
        return self._pending

    def _begin_header(self) -> None:
        self._pending = bytearray()
        self._pending_since = self.state.changes

    @property
    def header(self) -> bytes:
        shape = self.state.meta.shape
        if shape != self._header_for:
            self._header = npy_header(self.state.meta.dtype, shape)
            self._header_for = shape
        return self._header

    @property
    def size(self) -> int:
        pending = self.pending_header
        if pending is not None:
            return len(pending)
        return len(self.header) + self.state.size

    async def read(self, offset: int, size: int) -> Buffer:
        pending = self.pending_header
        if pending is not None:
            return bytes(pending[offset : offset + size])
        header = self.header
        end = min(offset + size, len(header) + self.state.size)
        if offset >= end:
            return b""
        hlen = len(header)
        head = header[offset:end] if offset < hlen else b""
        if end <= hlen:
            return head
        tail = await self.state.read(max(offset - hlen, 0), end - max(offset, hlen))
        return head + tail if head else tail

    def prefetch(self, offset: int) -> None:
        if self.pending_header is None:
            self.state.prefetch(max(offset - len(self.header), 0))

    async def write(self, offset: int, data: bytes) -> int:
        state = self.state
        if self.pending_header is not None:
            if self._refused is not None:
                # The rest of a refused np.save must not land in the array.
                raise InvalidArgumentError(
                    f"{state.meta.display_name}: the NPY header written after truncation "
                    f"was refused ({self._refused}); close the file and write a matching one"
                )
            return await self._write_new_header(offset, data)
        header = self.header
        hlen = len(header)
        view = memoryview(data)
        if offset < hlen:
            part = view[: hlen - offset]
            if bytes(part) != header[offset : offset + len(part)]:
                raise PermissionDeniedError(
                    f"{state.meta.display_name}: the NPY header follows the metadata; "
                    "truncate the file to write a new one"
                )
            view, offset = view[len(part) :], hlen
        if view:
            await state.write(offset - hlen, bytes(view))
        return len(data)

    async def _write_new_header(self, offset: int, data: bytes) -> int:
        state = self.state
        pending = self.pending_header
        assert pending is not None
        if offset > len(pending):
            # Held in memory until it parses: no gap may make it grow unasked.
            raise InvalidArgumentError(
                f"{state.meta.display_name}: after truncation the NPY header must be "
                f"written first (write at {offset}, {len(pending)} bytes so far)"
            )
        pending[offset : offset + len(data)] = data
        try:
            parsed = parse_npy_header(pending)
        except ValueError as e:
            self._refuse(f"invalid NPY header: {e}")
        if parsed is None:
            return len(data)
        length, dtype, shape, fortran_order = parsed
        meta = state.meta
        mismatch = header_mismatch(meta.dtype, meta.shape, dtype, shape, fortran_order)
        if mismatch is None and length != len(npy_header(dtype, shape)):
            mismatch = "its header is laid out unlike numpy's own for that array"
        if mismatch is not None:
            self._refuse(f"NPY header {dtype.str} {shape}: {mismatch}")
        rest = bytes(pending[length:])
        self._pending = None
        if self._truncate_held:
            state.truncate(0)  # what the O_TRUNC asked for, now that a header matches
            self._truncate_held = False
        if shape:
            state.resize(shape[0])
        if rest:
            await state.write(0, rest)
        return len(data)

    def _refuse(self, reason: str) -> NoReturn:
        """Refuse the new header: the array stays as it was when the file was opened
        (a held truncate is dropped at close), and so do further writes of this
        header's data, until the writer closes the file."""
        self._refused = reason
        name = self.state.meta.display_name
        unchanged = "; the array is unchanged" if self._truncate_held else ""
        log.warning("%s: refusing a new array.npy (np.save): %s%s", name, reason, unchanged)
        error = InvalidArgumentError(f"{name}: {reason}")
        error.logged = True  # type: ignore[attr-defined]
        raise error

    def open_truncated(self) -> None:
        """O_TRUNC: the following writes form a new header; held until they do."""
        self._begin_header()
        self._truncate_held = True
        self._refused = None

    def closed(self) -> None:
        """A handle that wrote was closed: a header it left incomplete or refused is
        dropped, so the file is the array again (an interrupted or refused
        ``np.save``, ``: > array.npy``), with its truncate if one was held."""
        pending = self.pending_header
        if pending is not None:
            if pending and self._refused is None:
                log.warning(
                    "%s: dropping %d bytes of an incomplete NPY header%s",
                    self.state.meta.display_name,
                    len(pending),
                    "; the array is unchanged" if self._truncate_held else "",
                )
            self._pending = None
        self._truncate_held = False
        self._refused = None

    def truncate(self, size: int) -> None:
        state = self.state
        if size == 0:
            state.truncate(0)
            self._begin_header()
            self._truncate_held = False
            self._refused = None
            return
        if self.pending_header is not None:
            raise InvalidArgumentError(f"{state.meta.display_name}: NPY header incomplete")
        row = state.row_nbytes
        if not row:
            if size != self.size:
                raise InvalidArgumentError(f"{state.meta.display_name}: size is fixed")
            return
        rows, rest = divmod(size - len(self.header), row)
        if (
            rest
            or rows < 0
            or len(npy_header(state.meta.dtype, (rows, *state.meta.shape[1:])))
            != (len(self.header))
        ):
            raise InvalidArgumentError(
                f"{state.meta.display_name}: size {size} is not header + whole rows"
            )
        state.truncate(rows * row)


def header_mismatch(
    dtype: np.dtype,
    shape: tuple[int, ...],
    new_dtype: np.dtype,
    new_shape: tuple[int, ...],
    fortran_order: bool,
) -> str | None:
    """Why a new NPY header cannot become an array of ``dtype`` and ``shape`` (only
    ``shape[0]`` may change), or None."""
    if new_dtype != dtype:
        return f"dtype {new_dtype.str} is not the array's {dtype.str}"
    if fortran_order:
        return "Fortran order (the array is C order)"
    if len(new_shape) != len(shape):
        return f"{len(new_shape)} dimensions, the array has {len(shape)}"
    if tuple(new_shape[1:]) != tuple(shape[1:]):
        return f"trailing shape {tuple(new_shape[1:])} is not the array's {tuple(shape[1:])}"
    return None
