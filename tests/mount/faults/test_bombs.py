"""Decompression bombs through a real mount: EIO for each, in little memory.

Requirement (hostile input): a chunk that decodes to more than its size fails
as soon as the decoder passes that size, so a store of bombs costs the daemon no
more memory than a few chunks. Each array here has 31 chunks of 4 KiB (a chunk
per page of array.raw, so the kernel's reads of the good chunk touch no bomb): 30
bombs, each a stream of hundreds of MiB of zeros, and one good chunk. The daemon
runs with its address space capped at 2 GiB: decoders without a bound would
allocate 1 GiB for one bz2 bomb alone, and 30 of them would kill it.
"""

from __future__ import annotations

import bz2
import errno
import functools
import json
import lzma
import os
import re
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.mounting import expect_eio, mounted, peak_rss, read_range

CHUNK = 4096
N_CHUNKS = 31
GOOD = 15  # between bombs
MEMORY_CAP = 2 << 30
RSS_BOUND = 300 << 20
ZEROS = bytes(1 << 20)


def stream(compressor: Any, mib: int) -> bytes:
    """``mib`` MiB of zeros through ``compressor``, a megabyte at a time."""
    return b"".join(compressor.compress(ZEROS) for _ in range(mib)) + compressor.flush()


# codec id: (compressor config, a bomb of it, a compressor of the good chunk)
CODECS: dict[str, tuple[dict[str, Any], Callable[[], bytes], Callable[[bytes], bytes]]] = {
    "bz2": (
        {"id": "bz2", "level": 1},
        lambda: stream(bz2.BZ2Compressor(9), 1024),  # 1 GiB in under a kilobyte
        lambda data: bz2.compress(data, 1),
    ),
    "zlib": (
        {"id": "zlib", "level": 1},
        lambda: stream(zlib.compressobj(9), 256),
        lambda data: zlib.compress(data, 1),
    ),
    "lzma": (
        {"id": "lzma", "format": lzma.FORMAT_XZ, "check": -1, "preset": None, "filters": None},
        lambda: stream(lzma.LZMACompressor(lzma.FORMAT_XZ, preset=1), 256),
        lambda data: lzma.compress(data, lzma.FORMAT_XZ),
    ),
}


@functools.cache
def bomb(codec_id: str) -> bytes:
    return CODECS[codec_id][1]()


GOOD_DATA = (np.arange(CHUNK) * 7 % 251).astype(np.uint8).tobytes()


def bomb_store(root: Path, codec_id: str) -> Path:
    """A v2 group holding one array ``codec_id``: 30 bombs and the good chunk."""
    compressor, _, compress = CODECS[codec_id]
    root.mkdir()
    (root / ".zgroup").write_text('{"zarr_format": 2}')
    array = root / codec_id
    array.mkdir()
    doc = {
        "zarr_format": 2,
        "shape": [N_CHUNKS * CHUNK],
        "chunks": [CHUNK],
        "dtype": "|u1",
        "compressor": compressor,
        "fill_value": 0,
        "order": "C",
        "filters": None,
    }
    (array / ".zarray").write_text(json.dumps(doc))
    for i in range(N_CHUNKS):
        (array / str(i)).write_bytes(compress(GOOD_DATA) if i == GOOD else bomb(codec_id))
    return root


def test_the_bombs_are_bombs() -> None:
    """Control: each stream is hundreds of MiB, in a few hundred KiB at most."""
    for codec_id in CODECS:
        stored = bomb(codec_id)
        assert len(stored) < 300 * 1024, codec_id
        sizes = {"bz2": 1 << 30, "zlib": 256 << 20, "lzma": 256 << 20}
        decompressor = {"bz2": bz2.BZ2Decompressor, "zlib": zlib.decompressobj}.get(
            codec_id, lzma.LZMADecompressor
        )()
        total = 0
        pending = stored
        while not decompressor.eof:  # in pieces: the test process need not hold it all
            total += len(decompressor.decompress(pending, 64 << 20))
            pending = getattr(decompressor, "unconsumed_tail", b"")
        assert total == sizes[codec_id], codec_id


@pytest.mark.parametrize("codec_id", list(CODECS))
def test_bombs_are_eio_in_little_memory(tmp_path: Path, codec_id: str) -> None:
    store = bomb_store(tmp_path / "bombs.zarr", codec_id)
    bad = [i for i in range(N_CHUNKS) if i != GOOD]
    with mounted(store, "--read-only", log_dir=tmp_path, memory_limit=MEMORY_CAP) as m:
        raw = m / codec_id / "array.raw"
        assert os.stat(raw).st_size == N_CHUNKS * CHUNK
        with pytest.raises(OSError) as info:
            raw.read_bytes()  # cat
        assert info.value.errno == errno.EIO
        for i in bad:
            expect_eio(raw, i * CHUNK, CHUNK)
            expect_eio(raw, i * CHUNK + 100, 10)
        assert read_range(raw, GOOD * CHUNK, CHUNK) == GOOD_DATA
        assert m.process.poll() is None, "the daemon keeps serving"
        peak = peak_rss(m.process)
        log = m.log()
    assert peak < RSS_BOUND, f"peak RSS {peak >> 20} MiB"
    for i in bad:
        key = re.compile(rf"chunk '{codec_id}/{i}'")
        lines = [line for line in log.splitlines() if key.search(line)]
        assert lines and all(f"more than {CHUNK} bytes" in line for line in lines), (i, log)
    assert f"'{codec_id}/{GOOD}'" not in log
