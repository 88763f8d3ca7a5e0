"""Concurrent writers of one chunk both land, a concurrent reader never sees a torn
element, and fio's verifying random-write jobs pass."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.support.mounting import mounted
from tests.support.writes import (
    NO_FLUSH,
    SPECS,
    Template,
    assert_mount_shows,
    assert_store_holds,
    assert_zarray_kept,
    model_of,
    opened,
    read_store,
    same_bytes,
)

# -- concurrency ---------------------------------------------------------------------------

PIECE_WRITER = r"""
import json, os, sys
path, pieces = sys.argv[1], json.load(open(sys.argv[2]))
fd = os.open(path, os.O_WRONLY)
print("ready", flush=True)
sys.stdin.readline()
for i, (offset, hexdata) in enumerate(pieces):
    data = bytes.fromhex(hexdata)
    assert os.pwrite(fd, data, offset) == len(data)
    if i % 97 == 96:
        os.fsync(fd)
os.close(fd)
"""


def test_two_processes_write_disjoint_parts_of_one_chunk(
    template: Template, tmp_path: Path
) -> None:
    """Bytes of the same chunks cut in pieces of 1..20 bytes (element boundaries ignored),
    alternately dealt to two processes that write them in random order at the same time."""
    spec = SPECS["shared_f4"]
    store = template.copy(tmp_path)
    model = model_of(template, spec.name)
    rng = np.random.default_rng(51)
    size = len(model)
    dealt: list[list[tuple[int, str]]] = [[], []]
    offset = 0
    while offset < size:
        length = min(int(rng.integers(1, 21)), size - offset)
        data = rng.bytes(length)
        dealt[len(dealt[0]) > len(dealt[1])].append((offset, data.hex()))
        model.write(offset, data)
        offset += length
    for i, pieces in enumerate(dealt):
        order = rng.permutation(len(pieces))
        (tmp_path / f"pieces{i}.json").write_text(json.dumps([pieces[j] for j in order]))
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m:
        raw = str(m / spec.name / "array.raw")
        writers = [
            subprocess.Popen(
                [sys.executable, "-c", PIECE_WRITER, raw, str(tmp_path / f"pieces{i}.json")],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(2)
        ]
        try:
            for w in writers:
                assert w.stdout.readline().strip() == "ready", w.stderr.read()
            for w in writers:
                w.stdin.write("go\n")
                w.stdin.flush()
            for w in writers:
                _, err = w.communicate(timeout=120)
                assert w.returncode == 0, err
        finally:
            for w in writers:
                if w.poll() is None:
                    w.kill()
                    w.wait()
        assert_mount_shows(m, spec.name, model)
        assert_store_holds(store / spec.name, model.array(), "after both writers closed")
    assert_store_holds(store / spec.name, model.array(), "after unmount")


TORN_WRITER = r"""
import os, random, sys
path, size, generations = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(5)
n = size // 8
fd = os.open(path, os.O_WRONLY)
for gen in range(1, generations + 1):
    value = bytes([gen % 250 + 1]) * 8
    for _ in range(6):
        a = rng.randrange(n)
        b = min(n, a + rng.randrange(1, n // 3))
        os.pwrite(fd, value * (b - a), a * 8)
    os.fsync(fd)
os.close(fd)
"""


def torn_elements(data: bytes) -> int:
    """Elements of 8 bytes that are not 8 copies of one byte."""
    elements = np.frombuffer(data, np.uint8).reshape(-1, 8)
    return int((elements != elements[:, :1]).any(axis=1).sum())


def test_reader_never_sees_a_torn_element(template: Template, tmp_path: Path) -> None:
    """Every element ever written is 8 equal bytes; a writer rewrites element-aligned
    ranges across chunk boundaries and fsyncs after each round, while this process reads
    the whole file (page cache dropped first, so reads reach the daemon) and the store."""
    spec = SPECS["torn_u8"]
    store = template.copy(tmp_path)
    size = math.prod(spec.shape) * 8
    with mounted(store, *NO_FLUSH, log_dir=tmp_path) as m:
        raw = m / spec.name / "array.raw"
        writer = subprocess.Popen(
            [sys.executable, "-c", TORN_WRITER, str(raw), str(size), "40"],
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        reads = 0
        try:
            with opened(raw, os.O_RDONLY) as fd:
                while writer.poll() is None:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    data = os.pread(fd, size, 0)
                    assert len(data) == size
                    assert torn_elements(data) == 0, f"torn elements in read {reads}"
                    if reads % 5 == 0:
                        stored = read_store(store / spec.name).tobytes()
                        assert torn_elements(stored) == 0, "torn elements in the store"
                    reads += 1
            _, err = writer.communicate(timeout=120)
            assert writer.returncode == 0, err
        finally:
            if writer.poll() is None:
                writer.kill()
                writer.wait()
        assert reads >= 3, "the reader hardly overlapped the writer"
        final = raw.read_bytes()
        assert torn_elements(final) == 0
        assert final != bytes(size), "the writer wrote"
        same_bytes(read_store(store / spec.name).tobytes(), final, "store after the writer")
    same_bytes(read_store(store / spec.name).tobytes(), final, "store after unmount")


# -- fio -----------------------------------------------------------------------------------


def run_fio(raw: Path, size: int, cwd: Path, *job: str) -> None:
    assert size % 65536 == 0 and os.stat(raw).st_size == size
    command = [
        "fio",
        f"--filename={raw}",
        f"--size={size}",
        f"--filesize={size}",
        "--ioengine=psync",
        "--direct=0",
        "--verify=crc32c",
        "--do_verify=1",
        "--verify_fatal=1",
        "--create_on_open=0",
        "--allow_file_create=0",
        "--overwrite=1",
        "--fallocate=none",
        "--randseed=20250101",
        "--verify_state_save=0",  # no <job>-verify.state file left in the working directory
        *job,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=cwd)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "verify" not in output.lower(), output
    assert "err= 0" in output, output


FIO_JOBS = {
    "randwrite-4k": ("fio_f4", ("--name=randwrite", "--rw=randwrite", "--bs=4k")),
    "randrw-bssplit": (
        "fio_i2_f",
        ("--name=randrw", "--rw=randrw", "--bssplit=512/20:4k/40:64k/40"),
    ),
}


@pytest.mark.parametrize("job", FIO_JOBS.values(), ids=FIO_JOBS.keys())
def test_fio_verify(
    fio_template: Template, tmp_path: Path, job: tuple[str, tuple[str, ...]]
) -> None:
    name, options = job
    store = fio_template.copy(tmp_path)
    initial = np.ascontiguousarray(fio_template.initial[name]).tobytes()
    with mounted(store, log_dir=tmp_path) as m:
        raw = m / name / "array.raw"
        run_fio(raw, len(initial), tmp_path, *options)
        assert os.stat(raw).st_size == len(initial)
        after = raw.read_bytes()
        assert after != initial, "fio wrote"
        assert_store_holds(
            store / name,
            np.frombuffer(after, SPECS[name].np_dtype).reshape(SPECS[name].shape),
            "after fio closed the file",
        )
    assert_zarray_kept(store / name, fio_template.zarrays[name], SPECS[name].shape)
    same_bytes(read_store(store / name).tobytes(), after, f"{name} after unmount")
