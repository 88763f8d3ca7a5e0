"""Crash consistency of the write path: SIGKILL of the daemon.

After the daemon we started is killed (by its PID, SIGKILL) at any moment, the mount
answers ENOTCONN until ``fusermount3 -u`` removes it; then every chunk in the store
decodes (none is torn: each is the old or the new version of that chunk), everything
fsync'ed before the kill is present, and ``.zarray`` is valid. Temporary files left by
a killed run are removed at the next mount, and nothing else is.

The array is int64, chunks of 8 full rows (32 KiB, one contiguous range of
``array.raw`` written by one pwrite, so one FUSE write request). Every chunk write
stores a stamp: value = generation << 32 | chunk << 16 | position, so a decoded chunk
tells which write produced it, and a chunk mixing two writes or two chunks is caught.
"""

from __future__ import annotations

import errno
import json
import os
import random
import re
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr

import zarrfs.stores.directory
from tests.support.mounting import Mounted, mounted, unmount
from zarrfs.daemon import runstate

ROWS_PER_CHUNK = 8
COLUMNS = 512
CHUNK_ELEMENTS = ROWS_PER_CHUNK * COLUMNS
CHUNK_BYTES = CHUNK_ELEMENTS * 8
INITIAL_CHUNKS = 16
MAX_CHUNKS = 24
FILL = -1
POSITIONS = np.arange(CHUNK_ELEMENTS, dtype="<i8")


def stamp(chunk: int, generation: int) -> np.ndarray:
    return (np.int64(generation) << 32) | (np.int64(chunk) << 16) | POSITIONS


def generation_of(chunk: int, values: np.ndarray, where: str) -> int:
    """The generation a decoded chunk holds; fails if it is not one whole stamp."""
    flat = values.reshape(-1)
    generation = int(flat[0]) >> 32
    assert np.array_equal(flat, stamp(chunk, generation)), (
        f"{where}: chunk {chunk} is not one whole write (torn or mixed): "
        f"first values {flat[:4].tolist()}, generations {sorted(set((flat >> 32).tolist()))}"
    )
    return generation


def create_store(path: Path) -> Path:
    """Shape (16 chunks of 8 rows, 512), every chunk written with generation 0."""
    z = zarr.create_array(
        store=str(path),
        shape=(INITIAL_CHUNKS * ROWS_PER_CHUNK, COLUMNS),
        chunks=(ROWS_PER_CHUNK, COLUMNS),
        dtype="<i8",
        zarr_format=2,
        compressors=numcodecs.Zlib(level=1),
        fill_value=FILL,
    )
    z[...] = np.concatenate([stamp(c, 0) for c in range(INITIAL_CHUNKS)]).reshape(z.shape)
    return path


def kill_daemon(m: Mounted) -> None:
    """SIGKILL the daemon this test started (by PID) and wait for it."""
    os.kill(m.process.pid, signal.SIGKILL)
    m.process.wait(timeout=30)
    # What zarrfs umount would read about it: say it died, and leave no file behind.
    record = runstate.collect(m.process.pid, os.getuid())
    assert record is not None and runstate.explain(record, m.process.pid), record


def remove_dead_mount(m: Mounted) -> None:
    """A mount whose daemon died answers ENOTCONN until ``fusermount3 -u``."""
    with pytest.raises(OSError) as info:
        os.listdir(m.path)
    assert info.value.errno == errno.ENOTCONN, info.value
    complaint = unmount(m.path)
    assert complaint is None, f"fusermount3 -u of the dead mount: {complaint}"
    assert not os.path.ismount(m.path)


@dataclass
class StoredState:
    chunks: int  # shape[0] in .zarray, in chunks
    generations: dict[int, int | None]  # chunk index -> generation, None = no chunk file


def read_store(store: Path, where: str) -> StoredState:
    """Decode every chunk: inside the shape with zarr-python, beyond it with numcodecs
    (a chunk file left beyond the end is what a later grow would find)."""
    meta = json.loads((store / ".zarray").read_text())  # valid JSON: never torn
    rows = meta["shape"][0]
    assert meta["shape"][1:] == [COLUMNS] and rows % ROWS_PER_CHUNK == 0, f"{where}: {meta}"
    state = StoredState(rows // ROWS_PER_CHUNK, {})
    z = zarr.open_array(str(store), mode="r")
    for chunk in range(MAX_CHUNKS):
        key = store / f"{chunk}.0"
        if not key.exists():
            state.generations[chunk] = None
            continue
        try:
            if chunk < state.chunks:
                values = z[chunk * ROWS_PER_CHUNK : (chunk + 1) * ROWS_PER_CHUNK]
            else:
                values = np.frombuffer(numcodecs.Zlib().decode(key.read_bytes()), "<i8")
        except Exception as e:
            raise AssertionError(f"{where}: chunk {key.name} does not decode: {e!r}") from e
        state.generations[chunk] = generation_of(chunk, np.asarray(values), where)
    return state


def check_state(
    state: StoredState,
    allowed: dict[int, list[int | None]],
    chunks: tuple[int, int],
    where: str,
) -> None:
    """``allowed``: the versions each chunk may hold; ``chunks``: the shape[0] (in
    chunks) fsync'ed last and the largest one written."""
    low, high = chunks
    assert low <= state.chunks <= high, (
        f"{where}: .zarray has {state.chunks} chunks of rows; {low} were fsync'ed, "
        f"at most {high} written"
    )
    for chunk in range(state.chunks):
        got = state.generations[chunk]
        assert got in allowed[chunk], (
            f"{where}: chunk {chunk} holds generation {got}, allowed: {allowed[chunk]} "
            "(None = no chunk file)"
        )


def test_sigkill_keeps_what_was_fsynced(tmp_path: Path) -> None:
    store = create_store(tmp_path / "a.zarr")
    with mounted(store) as m:
        fd = os.open(m / "array.raw", os.O_RDWR)
        try:
            # Generation 1: chunks 0-7 rewritten, chunks 16 and 17 appended; fsync'ed.
            for chunk in [*range(8), 16, 17]:
                os.pwrite(fd, stamp(chunk, 1).tobytes(), chunk * CHUNK_BYTES)
            os.fsync(fd)
            # Generation 2, not fsync'ed: chunks 4-11 and an appended chunk 18.
            for chunk in [*range(4, 12), 18]:
                os.pwrite(fd, stamp(chunk, 2).tobytes(), chunk * CHUNK_BYTES)
            assert os.fstat(fd).st_size == 19 * CHUNK_BYTES
            kill_daemon(m)
        finally:
            with suppress(OSError):  # the connection is gone: close may report it
                os.close(fd)
            if m.process.poll() is None:
                kill_daemon(m)
        remove_dead_mount(m)

    state = read_store(store, "after SIGKILL")
    allowed: dict[int, list[int | None]] = {c: [0] for c in range(INITIAL_CHUNKS)}
    for c in range(4):
        allowed[c] = [1]
    for c in range(4, 8):
        allowed[c] = [1, 2]
    for c in range(8, 12):
        allowed[c] = [0, 2]
    allowed |= {16: [1], 17: [1], 18: [None, 2]}
    check_state(state, allowed, (18, 19), "after SIGKILL")


# --- SIGKILL at random moments of a stream of writes and fsyncs -------------------------


@dataclass
class Stream:
    """What the writer thread did, for the checks after the kill."""

    rng: random.Random
    chunks: int  # current shape[0] in chunks, as the writer sees it
    next_generation: int
    history: dict[int, list[int | None]]  # every version a chunk went through
    fsynced: dict[int, int]  # index into history[chunk] current at the last fsync
    fsynced_chunks: int
    writes: int = 0
    fsyncs: int = 0
    error: OSError | None = None
    error_time: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)

    def write_one(self, fd: int) -> None:
        if self.chunks < MAX_CHUNKS and self.rng.random() < 0.05:
            chunk = self.chunks  # append one chunk of rows
        else:
            chunk = self.rng.randrange(self.chunks)
        generation = self.next_generation
        self.next_generation += 1
        # Recorded before the write: the kill may land while it is in flight.
        self.history[chunk].append(generation)
        os.pwrite(fd, stamp(chunk, generation).tobytes(), chunk * CHUNK_BYTES)
        self.chunks = max(self.chunks, chunk + 1)
        self.writes += 1

    def fsync(self, fd: int) -> None:
        snapshot = {c: len(h) - 1 for c, h in self.history.items()}
        chunks = self.chunks
        os.fsync(fd)
        self.fsynced, self.fsynced_chunks = snapshot, chunks
        self.fsyncs += 1

    def run(self, path: Path) -> None:
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as e:
            self.error, self.error_time = e, time.monotonic()
            return
        try:
            while not self.stop.is_set():
                self.write_one(fd)
                if self.rng.random() < 0.15:
                    self.fsync(fd)
        except OSError as e:
            self.error, self.error_time = e, time.monotonic()
        finally:
            with suppress(OSError):
                os.close(fd)

    def allowed(self) -> dict[int, list[int | None]]:
        """A chunk may hold the version current at the last fsync or any later one."""
        return {c: h[self.fsynced[c] :] for c, h in self.history.items()}


@contextmanager
def writer_thread(stream: Stream, path: Path) -> Iterator[threading.Thread]:
    thread = threading.Thread(target=stream.run, args=(path,), daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        stream.stop.set()
        thread.join(timeout=30)


def test_sigkill_at_random_moments(tmp_path: Path) -> None:
    seed = random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    store = create_store(tmp_path / "a.zarr")
    state = read_store(store, "initial store")
    generation = 1
    for iteration in range(5):
        where = f"seed {seed}, iteration {iteration}"
        # Half the runs flush in the background all the time (budget of two chunks,
        # interval 1 s), so that the kill often lands in the middle of storing a chunk.
        options = ("--write-cache-size", "64K", "--flush-interval", "1") if iteration % 2 else ()
        # Where a chunk starts: also beyond the end, where a stale chunk file left by
        # an earlier kill is what an append that is cut short may leave in view.
        history: dict[int, list[int | None]] = {
            c: [state.generations[c]] for c in range(MAX_CHUNKS)
        }
        stream = Stream(
            rng=random.Random(rng.randrange(2**32)),
            chunks=state.chunks,
            next_generation=generation,
            history=history,
            fsynced=dict.fromkeys(range(MAX_CHUNKS), 0),
            fsynced_chunks=state.chunks,
        )
        with mounted(store, *options) as m:
            try:
                with writer_thread(stream, m / "array.raw") as thread:
                    time.sleep(rng.uniform(0.05, 2.0))
                    killed_at = time.monotonic()
                    kill_daemon(m)
                    stream.stop.set()
                    thread.join(timeout=30)
                    assert not thread.is_alive(), f"{where}: the writer hangs on the dead mount"
            finally:
                if m.process.poll() is None:
                    kill_daemon(m)
            remove_dead_mount(m)
        if stream.error is not None and stream.error_time < killed_at:
            raise AssertionError(f"{where}: writing failed before the kill: {stream.error!r}")
        assert stream.writes > 0, f"{where}: nothing was written before the kill"
        print(f"{where}: {stream.writes} writes, {stream.fsyncs} fsyncs before the kill")

        state = read_store(store, f"{where}, after SIGKILL")
        after = f"{where}, after SIGKILL"
        check_state(state, stream.allowed(), (stream.fsynced_chunks, stream.chunks), after)
        generation = stream.next_generation

    # A clean mount after the kills: it reads what zarr-python reads, and when it is
    # unmounted nothing but metadata and chunk files is left in the store.
    expected = np.asarray(zarr.open_array(str(store), mode="r")[...])
    with mounted(store) as m:
        data = (m / "array.raw").read_bytes()
    assert data == expected.tobytes(), f"seed {seed}: mount after the kills reads other data"
    leftovers = [
        name
        for name in os.listdir(store)
        if name not in (".zarray", ".zattrs") and not re.fullmatch(r"\d+\.0", name)
    ]
    assert not leftovers, f"seed {seed}: left in the store after a clean mount: {leftovers}"


# --- temporary files of a killed run ----------------------------------------------------


def temp_marker() -> str:
    marker = getattr(zarrfs.stores.directory, "TEMP_MARKER", None)
    assert isinstance(marker, str) and marker, (
        "zarrfs.stores.directory.TEMP_MARKER is not defined: this test needs the string "
        "that marks the directory store's temporary files (named '.<key name><marker>"
        "<random>' in the chunk's own directory, e.g. '.0.0.zarrfs-tmp-abc') to create "
        "the files a killed run leaves behind"
    )
    return marker


def test_leftover_temp_files_are_removed_at_mount(tmp_path: Path) -> None:
    marker = temp_marker()
    flat = create_store(tmp_path / "s.zarr" / "flat")
    nested = tmp_path / "s.zarr" / "nested"
    z = zarr.create_array(
        store=str(nested),
        shape=(10, 6),
        chunks=(4, 4),
        dtype="<i4",
        zarr_format=2,
        compressors=numcodecs.Zlib(level=1),
        chunk_key_encoding={"name": "v2", "separator": "/"},
        fill_value=-1,
    )
    z[...] = np.arange(60, dtype="<i4").reshape(10, 6)
    zarr.open_group(str(tmp_path / "s.zarr"), mode="a", zarr_format=2)
    expected = {
        "flat": np.asarray(zarr.open_array(str(flat))[...]).tobytes(),
        "nested": np.asarray(zarr.open_array(str(nested))[...]).tobytes(),
    }
    zarray = (flat / ".zarray").read_bytes()

    chunk = (flat / "3.0").read_bytes()
    leftovers = [
        flat / f".3.0{marker}a1b2c3",  # half of a chunk: a store cut short by the kill
        flat / f".0.0{marker}x",  # empty
        flat / f"..zarray{marker}q9",  # a metadata rewrite cut short
        nested / "1" / f".0{marker}zz",  # nested keys: the chunk's own directory
    ]
    leftovers[0].write_bytes(chunk[: len(chunk) // 2])
    leftovers[1].write_bytes(b"")
    leftovers[2].write_bytes(zarray[:10])
    leftovers[3].write_bytes(b"\x78\x01garbage")
    unrelated = [flat / "notes.txt", flat / ".hidden", nested / "1" / "0.bak"]
    for path in unrelated:
        path.write_bytes(b"not ours")

    with mounted(tmp_path / "s.zarr") as m:
        for name in ("flat", "nested"):
            names = os.listdir(m / name)
            assert not [n for n in names if marker in n], f"{name}: temp files shown: {names}"
            assert (m / name / "array.raw").read_bytes() == expected[name], name

    for path in leftovers:
        assert not path.exists(), f"{path} (leftover temporary file) survived a mount"
    for path in unrelated:
        assert path.read_bytes() == b"not ours", f"{path} is not zarrfs's to remove"
    assert (flat / ".zarray").read_bytes() == zarray
    for name, path in (("flat", flat), ("nested", nested)):
        got = np.asarray(zarr.open_array(str(path), mode="r")[...]).tobytes()
        assert got == expected[name], name
