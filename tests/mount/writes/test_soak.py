"""A soak of the write path: several threads exercise one mount at once, each on
arrays of its own (so each has an exact model), with the resize mix of the fsx
exerciser (tests/support/fsx.py: streams stored behind the writer, truncates and grows,
a write racing a truncate, fsync, ``.zarrfs/flush``, reopen) while the periodic
flush and a small write cache store the same arrays. The daemon must not crash
or log an internal error, every thread's model must hold, and after unmounting
the store must hold exactly what the models say.

The flush interval (0.02-0.1 s) and write cache (32-256K) are drawn from the seed.
ZARRFS_SOAK_OPS sets the operations per thread (default 2500); ZARRFS_FSX_SEED
replays a run.
"""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

from tests.support.fsx import (
    SHARDED_SPECS,
    SPECS,
    ArraySpec,
    Exerciser,
    ZarrfsMount,
    build_store,
    choose_seed,
    zarrfs_models,
)

THREADS = 2


def soak(tmp_path: Path, specs: tuple[ArraySpec, ...]) -> None:
    seed = choose_seed()
    count = int(os.environ.get("ZARRFS_SOAK_OPS", "2500"))
    rng = random.Random(seed)
    interval = rng.choice(["0.02", "0.05", "0.1"])
    cache = rng.choice(["32K", "64K", "256K"])
    print(f"soak seed {seed}: flush interval {interval} s, write cache {cache}")
    store = build_store(tmp_path / "store.zarr", seed, specs)
    models = zarrfs_models(store, specs)
    options = ("--flush-interval", interval, "--write-cache-size", cache)
    target = ZarrfsMount(store, options, {spec.name: spec for spec in specs})
    names = sorted(models)
    exercisers = [
        Exerciser(
            seed + number,
            target,
            {name: models[name] for name in names[number::THREADS]},
            resizes=True,
            partial_rows=False,
        )
        for number in range(THREADS)
    ]
    errors: list[BaseException] = []

    def run(exerciser: Exerciser) -> None:
        try:
            exerciser.run(count, own_target=False)
        except BaseException as e:
            errors.append(e)

    target.start()
    try:
        threads = [threading.Thread(target=run, args=(e,)) for e in exercisers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
    except BaseException as e:
        target.abort(e)
        raise
    target.stop()
    target.verify(models, lambda name: f"\nsoak seed {seed} (ZARRFS_FSX_SEED={seed})")
    done = sum(sum(e.counts.values()) for e in exercisers)
    assert done == THREADS * count
    print(f"soak seed {seed}: {done} operations: {[e.counts for e in exercisers]}")


def test_soak_v2(tmp_path: Path) -> None:
    soak(tmp_path, SPECS)


def test_soak_sharded(tmp_path: Path) -> None:
    soak(tmp_path, SHARDED_SPECS)
