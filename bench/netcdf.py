"""``read-nc``: ``dd bs=1M`` of ``group.nc`` beside ``dd`` of ``array.raw`` of the same
array (little-endian float32, so every byte is swapped), each on a fresh mount:
target >= 0.8x. The file holds the array's bytes big-endian after its header."""

from __future__ import annotations

import netCDF4
import numpy as np

from bench.context import Bench
from bench.data import MiB, check_file, warm
from bench.mounting import dd
from bench.results import BenchError, Result, versus

READ_NC_TARGET = 0.8


def read_nc(b: Bench) -> list[Result]:
    data = b.data()
    mb = data.nbytes / MiB
    store = b.read_store("blosc-lz4")
    print(f"  float32 {data.shape} = {mb:.0f} MiB; dd bs=1M of group.nc vs array.raw")
    warm(store)
    with b.mount(store) as m:
        raw_time = dd(m, m / "arr" / "array.raw", "/dev/null")
        check_file(m / "arr" / "array.raw", data, "read-nc")
    with b.mount(store) as m:
        nc_time = dd(m, m / "group.nc", "/dev/null")
        with netCDF4.Dataset(m / "group.nc") as ds:
            variable = ds["arr"]
            variable.set_auto_mask(False)
            rows = min(len(data), 64)
            if not np.array_equal(variable[-rows:], data[-rows:]):
                raise BenchError("read-nc: group.nc holds other values than were stored")
    return [versus("read-nc blosc-lz4", mb / nc_time, mb / raw_time, "MiB/s", READ_NC_TARGET)]
