"""Whole-file reads land in pooled buffers: a buffer is used again only once no view
of it is left, files that grew or shrank are read as they are, small and huge files
get new memory, and the pool keeps at most its bound of buffers."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from zarrfs.stores.readbuffers import MAX_POOLED, MIN_POOLED, ReadBuffers


def read(pool: ReadBuffers, path: Path, size: int | None = None) -> bytes | memoryview:
    fd = os.open(path, os.O_RDONLY)
    try:
        return pool.read(fd, path.stat().st_size if size is None else size)
    finally:
        os.close(fd)


@pytest.fixture
def files(tmp_path: Path) -> list[Path]:
    out = []
    for n in range(3):
        path = tmp_path / f"f{n}"
        path.write_bytes(bytes([n]) * (MIN_POOLED * 2))
        out.append(path)
    return out


def test_a_buffer_is_used_again_once_no_view_of_it_is_left(files: list[Path]) -> None:
    pool = ReadBuffers()
    first = read(pool, files[0])
    assert isinstance(first, memoryview) and first.readonly
    second = read(pool, files[1])  # the first view lives: another buffer
    assert pool.reused == 0
    assert bytes(first) == files[0].read_bytes() and bytes(second) == files[1].read_bytes()
    part = first[10:20]
    del first
    read(pool, files[2])  # a slice of the first lives on: still not free
    assert pool.reused == 0 and bytes(part) == bytes([0]) * 10
    del part, second
    again = read(pool, files[2])
    assert pool.reused == 1
    assert bytes(again) == files[2].read_bytes()


def test_a_file_that_grew_reads_one_byte_more_and_one_that_shrank_fewer(
    files: list[Path],
) -> None:
    pool = ReadBuffers()
    size = files[0].stat().st_size
    assert len(read(pool, files[0], size - 1)) == size  # the caller sees it grew
    assert len(read(pool, files[0], size + 100)) == size


@pytest.mark.parametrize("size", [MIN_POOLED - 2, MAX_POOLED])
def test_small_and_huge_files_get_new_memory(tmp_path: Path, size: int) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * size)
    pool = ReadBuffers()
    for _ in range(2):
        value = read(pool, path)
        assert isinstance(value, bytes) and len(value) == size
        del value
    assert pool.reused == 0


def test_the_pool_keeps_at_most_its_bound(files: list[Path]) -> None:
    pool = ReadBuffers(max_buffers=2)
    held = [read(pool, files[n % 3]) for n in range(5)]  # every view kept: 5 buffers
    assert [bytes(v[:1]) for v in held] == [bytes([n % 3]) for n in range(5)]
    del held
    for _ in range(3):
        read(pool, files[0])
    # Only the two the pool kept are used again; the others were forgotten.
    assert pool.reused == 3
    fresh = [read(pool, files[0]) for _ in range(3)]
    assert pool.reused == 5 and len({id(v.obj) for v in fresh}) == 3


def test_threads_never_share_a_buffer_in_use(files: list[Path]) -> None:
    pool = ReadBuffers(max_buffers=4)
    wrong: list[int] = []

    def reader(n: int) -> None:
        want = files[n].read_bytes()
        for _ in range(200):
            value = read(pool, files[n])
            if bytes(value) != want:
                wrong.append(n)
            del value

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong
    assert pool.reused > 0


def test_a_slightly_larger_file_fits_a_buffer_made_for_a_smaller_one(tmp_path: Path) -> None:
    # The runs of one stream differ by a few per cent of their size.
    small, larger = tmp_path / "small", tmp_path / "larger"
    small.write_bytes(b"s" * MIN_POOLED * 4)
    larger.write_bytes(b"L" * (MIN_POOLED * 4 + MIN_POOLED // 2))  # an eighth more
    pool = ReadBuffers()
    value = read(pool, small)
    del value
    value = read(pool, larger)
    assert pool.reused == 1 and bytes(value) == larger.read_bytes()
