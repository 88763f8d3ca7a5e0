"""The registry of sections, in the order a full run takes them.

Each section is a function of the ``Bench`` that returns its ``Result`` rows (or
raises ``BenchError`` with those it measured before failing); ``--only`` picks
sections by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bench import (
    layouts,
    listings,
    netcdf,
    network,
    random_access,
    remote,
    remote_writes,
    sequential,
    sharded,
    writes,
)
from bench.context import Bench
from bench.results import Result


@dataclass(frozen=True)
class Section:
    name: str
    run: Callable[[Bench], list[Result]]
    summary: str


SECTIONS = {
    s.name: s
    for s in (
        Section("read-seq", sequential.read_seq, "dd of array.raw vs z[:], v2 row chunks"),
        Section("read-npy", sequential.read_npy, "array.npy mapped and summed vs z[:].sum()"),
        Section("read-nc", netcdf.read_nc, "dd of group.nc vs array.raw of one array, per layout"),
        Section("read-random", random_access.read_random, "4 KiB preads vs a memory-served file"),
        Section("memory", sequential.memory, "the daemon's peak RSS reading 4x --size-mb"),
        Section("metadata", listings.metadata, "ls -R and stat of 10 000 arrays"),
        Section("readers", sequential.readers, "4 readers at once vs one alone"),
        Section("write-seq", writes.write_seq, "dd into array.raw vs z[:] = data"),
        Section("write-random", random_access.write_random, "4 KiB pwrites into a hot array"),
        Section("sharded", sharded.sharded, "v3 shards: read and rewrite vs zarr-python"),
        Section("layouts", layouts.layouts, "rows, tiles, shards vs zarr-python, tensorstore"),
        Section("s3", remote.s3, "S3 on loopback vs zarr-python over obstore"),
        Section("s3-flush", remote_writes.s3_flush, "fsync of 64 chunks, 0.3 s per request"),
        Section("network", network.network, "S3 at 30 ms, 50 MB/s a connection: 3 readers"),
    )
}
