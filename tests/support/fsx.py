"""An fsx-style exerciser for writes through ``array.raw`` (used by
tests/mount/writes/test_fsx.py and tests/mount/writes/test_soak.py).

Seeded random operations run against a real zarrfs mount and an in-memory model: one
``bytearray`` per array (the whole array in C order, in the declared dtype) plus its
row size. Every read is checked against the model, ``st_size`` after every operation,
and at every remount the store itself is checked with zarr-python (values, ``shape[0]``
in ``.zarray``, no chunk left beyond the end, nothing but metadata and chunk keys).

Operations: pwrite inside the file (any offset, any length, element boundaries
ignored), two threads writing disjoint bytes of the same elements at once through
``array.raw`` and ``array.npy``, pwrite straddling the end, pwrite past the end
leaving a gap (the gap reads as the fill value, like a grown truncate), pwrite of the
fill value (chunks may be deleted), append of whole rows (pwrite at the end or an
``O_APPEND`` handle), pread (also past the end, sometimes after dropping the page
cache so that the daemon answers), fsync / fdatasync, ftruncate to a random multiple
of the row size (grown rows read as the fill value), close and reopen, and a full
unmount + check + mount every ``REMOUNT_EVERY`` operations. Writes never leave a
partial row pending except one explicit check per array that fsync fails with EINVAL
while one is, after which the row is completed.

The exerciser is validated against plain local files (which behave like an array whose
fill value is zero bytes as long as sizes stay whole rows) and against deliberately
broken file targets that it must catch.

The seed is random; set ZARRFS_FSX_SEED to replay a failure. Every assertion message
names the seed and the last operations.
"""

from __future__ import annotations

import errno
import json
import math
import os
import random
import re
import threading
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import zarr

from tests.support.model import Rows
from tests.support.mounting import Mounted, mounted

REMOUNT_EVERY = 2000
HISTORY = 2000  # operations remembered for failure messages


def choose_seed() -> int:
    text = os.environ.get("ZARRFS_FSX_SEED")
    seed = int(text) if text else random.SystemRandom().randrange(2**32)
    print(f"fsx seed {seed} (replay with ZARRFS_FSX_SEED={seed})")
    return seed


# --- the arrays ----------------------------------------------------------------------


@dataclass(frozen=True)
class ArraySpec:
    name: str
    dtype: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    compressor: str  # "blosc-lz4", "zlib" or "none"
    order: str
    fill: float | int
    written_rows: int  # leading rows written at creation; the rest is missing chunks
    shards: tuple[int, ...] | None = None  # a sharded Zarr v3 array (inner chunks: chunks)

    @property
    def row_elements(self) -> int:
        return math.prod(self.shape[1:])

    @property
    def row_size(self) -> int:
        return self.row_elements * np.dtype(self.dtype).itemsize

    def fill_row(self) -> bytes:
        return np.full(self.row_elements, self.fill, dtype=self.dtype).tobytes()

    @property
    def zarr_format(self) -> int:
        return 2 if self.shards is None else 3

    def codec(self) -> Any:
        if self.shards is not None:
            return self.v3_codec()
        if self.compressor == "blosc-lz4":
            return numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
        if self.compressor == "zlib":
            return numcodecs.Zlib(level=1)
        assert self.compressor == "none", self.compressor
        return None

    def v3_codec(self) -> Any:
        if self.compressor == "blosc-lz4":
            return zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")
        if self.compressor == "zlib":
            return zarr.codecs.GzipCodec(level=1)
        assert self.compressor == "none", self.compressor
        return None


# Small chunks so that almost every operation crosses chunk boundaries; edge chunks
# overhang on every axis; fill values that are not zero bytes (byte-swapped, NaN).
SPECS = (
    ArraySpec("f4_lz4", "<f4", (40, 7), (3, 4), "blosc-lz4", "C", -1.5, 30),
    ArraySpec("i2_zlib", ">i2", (20, 5, 3), (2, 2, 2), "zlib", "C", 1234, 13),
    ArraySpec("u1_none", "u1", (30, 13), (5, 6), "none", "C", 0, 22),
    ArraySpec("f8_order_f", "<f8", (25, 3), (4, 2), "zlib", "F", float("nan"), 17),
    ArraySpec("i4_1d", "<i4", (100,), (7,), "blosc-lz4", "C", 7, 60),
)


# Sharded Zarr v3 arrays: shards of several inner chunks along every axis, edge
# shards and edge inner chunks that overhang; v3 data types carry no byte order
# (array.raw is little-endian), so these are all little-endian.
SHARDED_SPECS = (
    ArraySpec("sh_f4", "<f4", (40, 12), (3, 4), "blosc-lz4", "C", -1.5, 30, (6, 8)),
    ArraySpec("sh_i2", "<i2", (20, 5, 3), (2, 2, 2), "zlib", "C", 1234, 13, (4, 4, 2)),
    ArraySpec("sh_u1", "u1", (30, 13), (5, 6), "none", "C", 0, 22, (10, 12)),
    ArraySpec("sh_i4_1d", "<i4", (100,), (7,), "blosc-lz4", "C", 7, 60, (21,)),
)


def random_values(spec: ArraySpec, rows: int, rng: np.random.Generator) -> np.ndarray:
    shape = (rows, *spec.shape[1:])
    dtype = np.dtype(spec.dtype)
    if dtype.kind == "f":
        return rng.normal(0, 1000, size=shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)


def build_store(root: Path, seed: int, specs: tuple[ArraySpec, ...] = SPECS) -> Path:
    """A group holding every array of ``specs`` (all of one Zarr format), their
    leading rows written by zarr-python."""
    rng = np.random.default_rng(seed)
    (zarr_format,) = {spec.zarr_format for spec in specs}
    zarr.open_group(str(root), mode="w", zarr_format=zarr_format)
    for spec in specs:
        extra: dict[str, Any] = {"order": spec.order} if spec.shards is None else {}
        z = zarr.create_array(
            store=str(root / spec.name),
            shape=spec.shape,
            chunks=spec.chunks,
            shards=spec.shards,
            dtype=spec.dtype,
            zarr_format=zarr_format,
            compressors=spec.codec(),
            fill_value=spec.fill,
            **extra,
        )
        z[: spec.written_rows] = random_values(spec, spec.written_rows, rng)
    return root


def store_bytes(array_dir: Path, dtype: str) -> bytes:
    values = zarr.open_array(str(array_dir), mode="r")[...]
    return np.asarray(values).astype(dtype, copy=False).tobytes(order="C")


# --- file access, replaceable to test the exerciser ------------------------------------


class FileIO:
    """The system calls the exerciser makes; subclasses break them on purpose."""

    def open(self, path: Path, flags: int) -> int:
        return os.open(path, flags)

    def close(self, fd: int) -> None:
        os.close(fd)

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        return os.pwrite(fd, data, offset)

    def write(self, fd: int, data: bytes) -> int:
        return os.write(fd, data)

    def pread(self, fd: int, length: int, offset: int) -> bytes:
        return os.pread(fd, length, offset)

    def ftruncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def fdatasync(self, fd: int) -> None:
        os.fdatasync(fd)

    def size(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def drop_cache(self, fd: int) -> None:
        # Clean page-cache pages go, so the next read is answered by the filesystem.
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


# --- targets: where the files live ------------------------------------------------------


class Target:
    """A place holding one file per array; ``start``/``stop`` bracket a mount."""

    enforces_rows = True  # fsync with a pending partial row is EINVAL

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def abort(self, error: BaseException) -> None: ...

    def file(self, name: str) -> Path:
        raise NotImplementedError

    def npy_file(self, name: str) -> Path:
        """A second file holding the same bytes after a header (array.npy)."""
        return self.file(name)

    def verify(self, models: dict[str, Model], context: Callable[[str], str]) -> None:
        """Check the stored state (called while stopped) against the models."""

    def control_flush(self) -> None:
        """Store everything written so far, as ``echo 1 > .zarrfs/flush`` does."""

    def diagnostics(self) -> str:
        return ""


class LocalFiles(Target):
    """Plain files: the same semantics as long as sizes stay whole rows; fill is zero."""

    def __init__(self, root: Path, enforces_rows: bool = False) -> None:
        self.root = root
        self.enforces_rows = enforces_rows

    def file(self, name: str) -> Path:
        return self.root / f"{name}.raw"

    def verify(self, models: dict[str, Model], context: Callable[[str], str]) -> None:
        for name, model in models.items():
            data = self.file(name).read_bytes()
            assert data == bytes(model.data), f"{name}: file differs from model{context(name)}"


class ZarrfsMount(Target):
    def __init__(self, store: Path, options: tuple[str, ...], specs: dict[str, ArraySpec]):
        self.store = store
        self.options = options
        self.specs = specs
        self._cm: AbstractContextManager[Mounted] | None = None
        self.mount: Mounted | None = None

    def start(self) -> None:
        self._cm = mounted(self.store, *self.options)
        self.mount = self._cm.__enter__()

    def stop(self) -> None:
        cm, self._cm = self._cm, None
        assert cm is not None
        cm.__exit__(None, None, None)  # its log is checked (tests/support/daemon_logs.py)

    def control_flush(self) -> None:
        assert self.mount is not None
        fd = os.open(self.mount.path / ".zarrfs" / "flush", os.O_WRONLY)
        try:
            os.write(fd, b"1")
        finally:
            os.close(fd)

    def abort(self, error: BaseException) -> None:
        cm, self._cm = self._cm, None
        if cm is not None:
            cm.__exit__(type(error), error, error.__traceback__)

    def file(self, name: str) -> Path:
        assert self.mount is not None
        return self.mount.path / name / "array.raw"

    def npy_file(self, name: str) -> Path:
        assert self.mount is not None
        return self.mount.path / name / "array.npy"

    def diagnostics(self) -> str:
        if self.mount is None:
            return ""
        try:
            lines = self.mount.log().splitlines()[-25:]
        except OSError:
            return ""
        return "\nlast lines of the zarrfs log:\n" + "\n".join(lines)

    def verify(self, models: dict[str, Model], context: Callable[[str], str]) -> None:
        for name, model in models.items():
            spec = self.specs[name]
            array_dir = self.store / name
            rows = len(model.data) // spec.row_size
            document = ".zarray" if spec.shards is None else "zarr.json"
            meta = json.loads((array_dir / document).read_text())
            assert meta["shape"] == [rows, *spec.shape[1:]], (
                f"{name}: .zarray shape {meta['shape']}, model has {rows} rows{context(name)}"
            )
            got = store_bytes(array_dir, spec.dtype)
            assert got == bytes(model.data), (
                f"{name}: zarr-python reads something else than the model "
                f"({first_difference(got, model.data)}){context(name)}"
            )
            self._check_keys(name, array_dir, (rows, *spec.shape[1:]), context)

    def _check_keys(
        self, name: str, array_dir: Path, shape: tuple[int, ...], context: Callable[[str], str]
    ) -> None:
        spec = self.specs[name]
        unit = spec.chunks if spec.shards is None else spec.shards
        grid = [math.ceil(n / c) for n, c in zip(shape, unit)]
        if spec.shards is None:
            entries = sorted(os.listdir(array_dir))
            pattern, separator = r"\d+(\.\d+)*", "."
        else:  # v3 default keys: c/0/1
            entries = sorted(
                str(p.relative_to(array_dir)) for p in array_dir.rglob("*") if p.is_file()
            )
            pattern, separator = r"c(/\d+)+", "/"
        for entry in entries:
            if entry in (".zarray", ".zattrs", "zarr.json"):
                continue
            assert re.fullmatch(pattern, entry), (
                f"{name}: unexpected file {entry!r} in the store after a clean unmount"
                + context(name)
            )
            index = [int(part) for part in entry.removeprefix("c/").split(separator)]
            assert len(index) == len(shape) and all(i < g for i, g in zip(index, grid)), (
                f"{name}: chunk {entry} lies beyond shape {list(shape)}{context(name)}"
            )


def npy_header_length(start: bytes) -> int:
    """Bytes before the data in a file that starts with ``start`` (0: no NPY header)."""
    if not start.startswith(b"\x93NUMPY"):
        return 0
    if start[6] == 1:
        return 10 + int.from_bytes(start[8:10], "little")
    return 12 + int.from_bytes(start[8:12], "little")


def first_difference(got: bytes, want: bytes | bytearray, base: int = 0) -> str:
    """Where two byte strings part (``base`` = file offset of their first byte)."""
    if len(got) != len(want):
        return f"{len(got)} bytes instead of {len(want)}"
    at = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
    got_hex, want_hex = got[at : at + 8].hex(), want[at : at + 8].hex()
    return f"first difference at file offset {base + at}: {got_hex} instead of {want_hex}"


# --- the model and the exerciser ----------------------------------------------------


@dataclass
class Model(Rows):
    itemsize: int
    max_rows: int
    partial_row_checked: bool = False


@dataclass
class Exerciser:
    seed: int
    target: Target
    models: dict[str, Model]
    io: FileIO = field(default_factory=FileIO)
    remount_every: int = REMOUNT_EVERY
    rng: random.Random = field(init=False)
    fds: dict[str, int] = field(default_factory=dict)
    history: deque[tuple[str, str]] = field(default_factory=lambda: deque(maxlen=HISTORY))
    counts: dict[str, int] = field(default_factory=dict)
    op_number: int = 0
    # Weigh streams, resizes racing them and the flushes that store them: the mix
    # that drives truncates and grows into the background writer.
    resizes: bool = False
    # Leave a partial row pending once per array (fsync must be EINVAL meanwhile).
    # False while other exercisers share the mount: then .zarrfs/flush may be
    # EINVAL for their partial rows, and this one's would fail theirs.
    partial_rows: bool = True

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.partial_row_at = {name: self.rng.randrange(50, 1000) for name in sorted(self.models)}

    # Weighted operations: (weight, method).
    def operations(self) -> list[tuple[int, Callable[[str], None]]]:
        more = 4 if self.resizes else 1  # the resize mix
        return [
            (28, self.op_read),
            (5, self.op_read_uncached),
            (24, self.op_write_inside),
            (3, self.op_write_raw_and_npy),
            (3, self.op_write_fill),
            (6, self.op_write_end),
            (2, self.op_write_gap),
            (4 * more, self.op_append),
            (1, self.op_append_o_append),
            (2 * more, self.op_stream),
            (4, self.op_fsync),
            (1 * more, self.op_control_flush),
            (5 * more, self.op_truncate),
            (1 * more, self.op_race_truncate),
            (4, self.op_reopen),
        ]

    def context(self, name: str = "") -> str:
        """Seed, the last operations, and the last ones on array ``name`` (with remounts)."""
        recent = [text for _, text in self.history][-20:]
        text = (
            f"\nseed {self.seed} (replay with ZARRFS_FSX_SEED={self.seed}), "
            f"operation {self.op_number}; last operations:\n  " + "\n  ".join(recent)
        )
        if name:
            mine = [t for n, t in self.history if n in (name, "")][-40:]
            text += f"\nlast operations on {name}:\n  " + "\n  ".join(mine)
        return text + self.target.diagnostics()

    def fail(self, message: str, name: str = "") -> AssertionError:
        return AssertionError(message + self.context(name))

    def run(self, count: int, *, own_target: bool = True) -> dict[str, int]:
        """``count`` operations; with ``own_target``, start and stop the target (and
        remount it every ``remount_every``) and check the store at the end; without,
        the caller does, and several exercisers may share it from threads."""
        names = sorted(self.models)
        ops = self.operations()
        weights = [w for w, _ in ops]
        if own_target:
            self.target.start()
        try:
            self.open_all()
            for self.op_number in range(1, count + 1):
                if own_target and self.op_number % self.remount_every == 0:
                    self.remount()
                name = self.rng.choice(names)
                model = self.models[name]
                if (
                    self.target.enforces_rows
                    and self.partial_rows
                    and not model.partial_row_checked
                    and self.op_number >= self.partial_row_at[name]
                    and model.row > 1
                ):
                    self.guard(name, self.op_partial_row)
                else:
                    (op,) = self.rng.choices([o for _, o in ops], weights)
                    self.guard(name, op)
                self.check_size(name)
            self.close_all()
            if own_target:
                self.target.stop()
                self.history.append(("", "final unmount and check of the store"))
                self.target.verify(self.models, self.context)
        except BaseException as e:
            for fd in self.fds.values():
                with suppress(OSError):
                    self.io.close(fd)
            self.fds.clear()
            if own_target:
                self.target.abort(e)
            raise
        return self.counts

    def guard(self, name: str, op: Callable[[str], None]) -> None:
        label = op.__name__.removeprefix("op_")
        self.counts[label] = self.counts.get(label, 0) + 1
        try:
            op(name)
        except OSError as e:
            raise self.fail(f"{name}: {label} failed: {e!r}", name) from e
        assert len(self.models[name].data) % self.models[name].row == 0

    def log(self, name: str, text: str) -> None:
        self.history.append((name, f"#{self.op_number} {name}: {text}"))

    def open_all(self) -> None:
        for name in sorted(self.models):
            try:
                self.fds[name] = self.io.open(self.target.file(name), os.O_RDWR)
            except OSError as e:
                raise self.fail(f"{name}: opening array.raw read-write: {e!r}", name) from e

    def close_all(self) -> None:
        for name in sorted(self.fds):
            self.io.close(self.fds.pop(name))

    def remount(self) -> None:
        self.history.append(("", f"#{self.op_number} close all, unmount, check the store, mount"))
        try:
            self.close_all()
        except OSError as e:
            raise self.fail(f"close before remount failed: {e!r}") from e
        self.target.stop()
        self.target.verify(self.models, self.context)
        self.target.start()
        self.open_all()

    def check_size(self, name: str) -> None:
        try:
            size = self.io.size(self.fds[name])
        except OSError as e:
            raise self.fail(f"{name}: fstat failed: {e!r}", name) from e
        want = len(self.models[name].data)
        if size != want:
            raise self.fail(f"{name}: st_size is {size}, model has {want} bytes", name)

    # --- random choices ---

    def max_length(self, model: Model) -> int:
        return max(model.row * 4, 64)

    def payload(self, length: int) -> bytes:
        return self.rng.randbytes(length)

    # --- operations ---

    def op_read(self, name: str) -> None:
        model = self.models[name]
        size = len(model.data)
        offset = self.rng.randrange(0, size + model.row + 1)
        length = self.rng.randrange(1, self.max_length(model) * 2)
        self.log(name, f"pread {length} @ {offset}")
        got = self.io.pread(self.fds[name], length, offset)
        want = bytes(model.data[offset : offset + length])
        if got != want:
            raise self.fail(
                f"{name}: pread {length} @ {offset} of {size} bytes: "
                f"{first_difference(got, want, offset)}",
                name,
            )

    def op_read_uncached(self, name: str) -> None:
        self.log(name, "drop page cache")
        self.io.drop_cache(self.fds[name])
        self.op_read(name)

    def op_write_inside(self, name: str) -> None:
        model = self.models[name]
        size = len(model.data)
        if size == 0:
            self.op_append(name)
            return
        offset = self.rng.randrange(0, size)
        length = self.rng.randint(1, min(self.max_length(model), size - offset))
        self.write(name, offset, self.payload(length))

    def op_write_raw_and_npy(self, name: str) -> None:
        """Two threads write disjoint bytes of the same elements at once, one through
        array.raw and one through array.npy (element boundaries ignored): both land."""
        model = self.models[name]
        size = len(model.data)
        if size < 2:
            self.op_write_inside(name)
            return
        offset = self.rng.randrange(0, size - 1)
        split = self.rng.randint(1, min(model.itemsize * 2, size - offset - 1))
        length = self.rng.randint(split + 1, min(split + model.itemsize * 3, size - offset))
        first, second = self.payload(split), self.payload(length - split)
        npy = self.io.open(self.target.npy_file(name), os.O_RDWR)
        try:
            header = npy_header_length(self.io.pread(npy, 16, 0))
            self.log(
                name,
                f"at once: npy pwrite {split} @ {offset}, raw pwrite "
                f"{length - split} @ {offset + split} (header {header})",
            )
            barrier = threading.Barrier(2)
            results: list[int | BaseException] = []

            def write(fd: int, data: bytes, at: int) -> None:
                barrier.wait(5)
                try:
                    results.append(self.io.pwrite(fd, data, at))
                except OSError as e:
                    results.append(e)

            threads = [
                threading.Thread(target=write, args=(npy, first, header + offset)),
                threading.Thread(target=write, args=(self.fds[name], second, offset + split)),
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
        finally:
            self.io.close(npy)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        if sorted(results) != sorted([split, length - split]):
            raise self.fail(f"{name}: concurrent pwrites returned {results}", name)
        model.write(offset, first + second)

    def op_write_fill(self, name: str) -> None:
        """Element-aligned fill value: chunks that become all fill are deleted."""
        model = self.models[name]
        size = len(model.data)
        if size == 0:
            return
        start_row = self.rng.randrange(0, model.rows)
        rows = self.rng.randint(1, min(model.rows - start_row, 12))
        pattern = model.fill_row * rows
        # Trim whole elements at both ends so the write is not always row-aligned.
        elements = len(pattern) // model.itemsize
        head = self.rng.randrange(0, max(1, elements // 3)) * model.itemsize
        tail = self.rng.randrange(0, max(1, elements // 3)) * model.itemsize
        if head + tail >= len(pattern):
            head = tail = 0
        self.write(name, start_row * model.row + head, pattern[head : len(pattern) - tail])

    def op_write_end(self, name: str) -> None:
        """A write straddling the end; it ends on a row boundary 1 to 3 rows further."""
        model = self.models[name]
        if model.rows >= model.max_rows:
            self.op_truncate(name)
            return
        size = len(model.data)
        end = size + model.row * self.rng.randint(1, 3)
        offset = self.rng.randint(max(0, size - self.max_length(model)), size)
        self.write(name, offset, self.payload(end - offset))

    def op_write_gap(self, name: str) -> None:
        """A write past the end: the gap between the old end and it reads as fill."""
        model = self.models[name]
        if model.rows >= model.max_rows:
            self.op_truncate(name)
            return
        size = len(model.data)
        offset = size + self.rng.randint(1, 2 * model.row)
        end = (math.ceil((offset + 1) / model.row) + self.rng.randint(0, 1)) * model.row
        self.write(name, offset, self.payload(end - offset))

    def op_append(self, name: str) -> None:
        model = self.models[name]
        if model.rows >= model.max_rows:
            self.op_truncate(name)
            return
        rows = self.rng.randint(1, 4)
        self.write(name, len(model.data), self.payload(rows * model.row))

    def op_append_o_append(self, name: str) -> None:
        """Whole rows through a second handle opened with O_APPEND, then closed."""
        model = self.models[name]
        if model.rows >= model.max_rows:
            self.op_truncate(name)
            return
        payload = self.payload(self.rng.randint(1, 3) * model.row)
        self.log(name, f"O_APPEND write {len(payload)} at the end ({len(model.data)})")
        fd = self.io.open(self.target.file(name), os.O_WRONLY | os.O_APPEND)
        try:
            written = self.io.write(fd, payload)
        finally:
            self.io.close(fd)
        if written != len(payload):
            raise self.fail(f"{name}: O_APPEND write wrote {written} of {len(payload)} bytes", name)
        model.write(len(model.data), payload)

    def write(self, name: str, offset: int, payload: bytes) -> None:
        model = self.models[name]
        self.log(name, f"pwrite {len(payload)} @ {offset} (size {len(model.data)})")
        written = self.io.pwrite(self.fds[name], payload, offset)
        if written != len(payload):
            raise self.fail(f"{name}: pwrite wrote {written} of {len(payload)} bytes", name)
        model.write(offset, payload)

    def op_stream(self, name: str) -> None:
        """A sequential writer (cp, dd, an appending logger): pieces of any size that
        continue each other from a row boundary to a row boundary, so zarrfs stores
        the chunks behind it while it writes (write-behind)."""
        model = self.models[name]
        if model.rows >= model.max_rows:
            self.op_truncate(name)
            return
        start = self.rng.randint(max(0, model.rows - 6), model.rows) * model.row
        end = min(model.max_rows, model.rows + self.rng.randint(1, 8)) * model.row
        end = max(end, start + model.row)
        self.log(name, f"stream {end - start} bytes @ {start} in pieces")
        offset = start
        while offset < end:
            length = min(end - offset, self.rng.randint(1, 3 * model.row))
            payload = self.payload(length)
            written = self.io.pwrite(self.fds[name], payload, offset)
            if written != length:
                raise self.fail(f"{name}: pwrite wrote {written} of {length} bytes", name)
            model.write(offset, payload)
            offset += length

    def op_control_flush(self, name: str) -> None:
        self.log(name, "write .zarrfs/flush")
        try:
            self.target.control_flush()
        except OSError as e:
            # Another exerciser sharing the mount may be between the pieces of a
            # stream: its partial row makes the flush EINVAL, as documented.
            if self.partial_rows or e.errno != errno.EINVAL:
                raise

    def op_race_truncate(self, name: str) -> None:
        """At once, through two handles: a write that starts inside an element and
        ends on a row boundary, and a truncate. Either order is right; nothing else
        is (an error, a torn write, old bytes)."""
        model = self.models[name]
        size = len(model.data)
        offset = self.rng.randrange(0, size + 2 * model.row)
        end = (math.ceil((offset + 1) / model.row) + self.rng.randint(0, 2)) * model.row
        payload = self.payload(end - offset)
        rows = self.rng.randint(0, model.max_rows)
        self.log(
            name,
            f"at once: pwrite {len(payload)} @ {offset} and ftruncate to {rows} rows (size {size})",
        )
        write_first, truncate_first = Model(**vars(model)), Model(**vars(model))
        write_first.data, truncate_first.data = bytearray(model.data), bytearray(model.data)
        write_first.write(offset, payload)
        write_first.resize(rows * model.row)
        truncate_first.resize(rows * model.row)
        truncate_first.write(offset, payload)
        other = self.io.open(self.target.file(name), os.O_RDWR)
        barrier = threading.Barrier(2)
        results: list[BaseException] = []

        def run(action: Callable[[], object]) -> None:
            try:
                barrier.wait(5)
                action()
            except BaseException as e:
                results.append(e)

        threads = [
            threading.Thread(target=run, args=(lambda: self.io.pwrite(other, payload, offset),)),
            threading.Thread(
                target=run, args=(lambda: self.io.ftruncate(self.fds[name], rows * model.row),)
            ),
        ]
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
        finally:
            self.io.close(other)
        if results:
            raise self.fail(f"{name}: racing write and truncate: {results[0]!r}", name)
        got_size = self.io.size(self.fds[name])
        got = self.io.pread(self.fds[name], got_size + 1, 0) if got_size else b""
        for outcome in (write_first, truncate_first):
            if got == bytes(outcome.data):
                model.data = outcome.data
                return
        raise self.fail(
            f"{name}: after a racing write and truncate, {got_size} bytes that are neither "
            f"order ({len(write_first.data)} or {len(truncate_first.data)} bytes; "
            f"{first_difference(got, truncate_first.data)})",
            name,
        )

    def op_fsync(self, name: str) -> None:
        if self.rng.random() < 0.3:
            self.log(name, "fdatasync")
            self.io.fdatasync(self.fds[name])
        else:
            self.log(name, "fsync")
            self.io.fsync(self.fds[name])

    def op_truncate(self, name: str) -> None:
        model = self.models[name]
        rows = self.rng.randint(0, model.max_rows)
        if self.rng.random() < 0.3:  # small steps too, not only big jumps
            rows = max(0, min(model.max_rows, model.rows + self.rng.randint(-3, 3)))
        self.log(name, f"ftruncate to {rows} rows ({rows * model.row}) from {model.rows}")
        self.io.ftruncate(self.fds[name], rows * model.row)
        model.resize(rows * model.row)

    def op_reopen(self, name: str) -> None:
        self.log(name, "close and reopen")
        self.io.close(self.fds.pop(name))
        self.fds[name] = self.io.open(self.target.file(name), os.O_RDWR)

    def op_partial_row(self, name: str) -> None:
        """fsync with a trailing partial row pending is EINVAL; completing it fixes that."""
        model = self.models[name]
        model.partial_row_checked = True
        fd = self.fds[name]
        size = len(model.data)
        first = self.payload(self.rng.randint(1, model.row - 1))
        rest = self.payload(model.row - len(first))
        self.log(name, f"partial row: pwrite {len(first)} @ {size}, fsync must be EINVAL")
        written = self.io.pwrite(fd, first, size)
        if written != len(first):
            raise self.fail(f"{name}: pwrite wrote {written} of {len(first)} bytes", name)
        try:
            self.io.fsync(fd)
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise self.fail(f"{name}: fsync with a partial row pending: {e!r}", name) from e
        else:
            raise self.fail(f"{name}: fsync succeeded with a partial row pending", name)
        self.log(name, f"complete the row: pwrite {len(rest)} @ {size + len(first)}, fsync")
        written = self.io.pwrite(fd, rest, size + len(first))
        if written != len(rest):
            raise self.fail(f"{name}: pwrite wrote {written} of {len(rest)} bytes", name)
        model.write(size, first + rest)
        self.io.fsync(fd)


def zarrfs_models(store: Path, specs: tuple[ArraySpec, ...] = SPECS) -> dict[str, Model]:
    return {
        spec.name: Model(
            data=bytearray(store_bytes(store / spec.name, spec.dtype)),
            row=spec.row_size,
            fill_row=spec.fill_row(),
            itemsize=np.dtype(spec.dtype).itemsize,
            max_rows=spec.shape[0] * 2,
        )
        for spec in specs
    }


def run_on_zarrfs(
    tmp_path: Path,
    options: tuple[str, ...],
    count: int,
    specs: tuple[ArraySpec, ...] = SPECS,
    *,
    resizes: bool = False,
) -> None:
    seed = choose_seed()
    store = build_store(tmp_path / "store.zarr", seed, specs)
    models = zarrfs_models(store, specs)
    target = ZarrfsMount(store, options, {spec.name: spec for spec in specs})
    counts = Exerciser(seed, target, models, resizes=resizes).run(count)
    print(f"fsx seed {seed}: {count} operations: {counts}")
    assert sum(counts.values()) == count


def local_models(root: Path, seed: int) -> dict[str, Model]:
    rng = random.Random(seed)
    models = {}
    for spec in SPECS:
        data = bytearray(rng.randbytes(spec.written_rows * spec.row_size))
        (root / f"{spec.name}.raw").write_bytes(data)
        models[spec.name] = Model(
            data=data,
            row=spec.row_size,
            fill_row=bytes(spec.row_size),  # a plain file grows with zero bytes
            itemsize=np.dtype(spec.dtype).itemsize,
            max_rows=spec.shape[0] * 2,
        )
    return models


class RowsEnforced(FileIO):
    """Plain files plus zarrfs's one rule they lack: fsync is EINVAL on a partial row."""

    def __init__(self) -> None:
        self.rows: dict[int, int] = {}

    def open(self, path: Path, flags: int) -> int:
        fd = os.open(path, flags)
        self.rows[fd] = next(s.row_size for s in SPECS if path.name == f"{s.name}.raw")
        return fd

    def fsync(self, fd: int) -> None:
        if os.fstat(fd).st_size % self.rows[fd]:
            raise OSError(errno.EINVAL, "partial row pending")
        os.fsync(fd)
