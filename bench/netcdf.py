"""``read-nc``: ``dd bs=1M`` of ``group.nc`` beside ``dd`` of ``array.raw`` of the same
array (little-endian float32, blosc-lz4, so every byte is turned big-endian), in
each layout of the ``layouts`` section (rows, tiles, v3 shards), each read on a fresh
mount, alternately, ROUNDS times: target >= 0.8x of the best rounds. The file holds
the array's bytes big-endian after its header, from a mebibyte on."""

from __future__ import annotations

import shutil

import netCDF4
import numpy as np

from bench import cpumeter
from bench.context import Bench
from bench.data import MiB, check_file, warm
from bench.layouts import LAYOUTS, create_store, layout_data
from bench.mounting import dd
from bench.profiling import profiled
from bench.results import BenchError, Result, cpu_per_mib, versus

READ_NC_TARGET = 0.8
ROUNDS = 3
CODEC = "blosc-lz4"


def read_nc(b: Bench) -> list[Result]:
    data = layout_data(b)
    mb = data.nbytes / MiB
    print(f"  float32 {data.shape} = {mb:.0f} MiB, {CODEC}; dd bs=1M of group.nc vs array.raw")
    results = []
    for layout in LAYOUTS:
        store = b.work / f"read-nc-{layout.name}.zarr"
        try:
            create_store(store, layout, CODEC, data)
            warm(store)
            raw, nc = [], []
            raw_cpu, nc_cpu = [], []  # the daemon's and dd's CPU seconds, each round
            for _ in range(ROUNDS):  # alternately: the machine's drift falls on both
                with b.mount(store) as m:
                    meter = cpumeter.Meter(pid=m.process.pid)
                    meter.start()
                    raw.append(mb / dd(m, m / "arr" / "array.raw", "/dev/null"))
                    raw_cpu.append(meter.stop())
                with b.mount(store) as m, profiled(m.process.pid, f"read-nc {layout.name}"):
                    meter = cpumeter.Meter(pid=m.process.pid)
                    meter.start()
                    nc.append(mb / dd(m, m / "group.nc", "/dev/null"))
                    nc_cpu.append(meter.stop())
                    check_netcdf(m / "group.nc", data, layout.name)
            with b.mount(store) as m:
                check_file(m / "arr" / "array.raw", data, "read-nc")
            rates = " ".join(f"{n:.0f}/{r:.0f}" for n, r in zip(nc, raw, strict=True))
            print(f"  {layout.describe()}: group.nc/array.raw MiB/s by round: {rates}")
            label = f"read-nc {layout.name} {CODEC}"
            best_nc, best_raw = nc_cpu[nc.index(max(nc))], raw_cpu[raw.index(max(raw))]
            bound = (
                f"{cpu_per_mib('group.nc', best_nc.watched + best_nc.children, mb)}, "
                f"{cpu_per_mib('array.raw', best_raw.watched + best_raw.children, mb)} "
                "(daemon + dd, best rounds)"
            )
            results.append(versus(label, max(nc), max(raw), "MiB/s", READ_NC_TARGET, bound))
        finally:
            shutil.rmtree(store, ignore_errors=True)
    return results


def check_netcdf(path: object, data: np.ndarray, name: str) -> None:
    with netCDF4.Dataset(path) as ds:
        variable = ds["arr"]
        variable.set_auto_mask(False)
        rows = min(len(data), 64)
        if not np.array_equal(variable[-rows:], data[-rows:]):
            raise BenchError(f"read-nc {name}: group.nc holds other values than were stored")
