"""Worker pools stopped before the daemon exits (core/pool.py): a job under way runs
to its end, the jobs still queued are dropped, and the threads are gone."""

from __future__ import annotations

import threading

import trio

from zarrfs.core.pool import WorkerPool, stop_all


def test_a_job_under_way_ends_and_the_queued_ones_are_dropped() -> None:
    # Pools earlier tests left: their threads, ending at once below, would hold up
    # this stop past the release of the job under way.
    assert stop_all(10)
    pool = WorkerPool(1, "zarrfs-test-stop")
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def slow() -> None:
        started.set()
        release.wait(10)
        ran.append("slow")

    async def submit() -> None:
        pool.submit(slow, on_done=lambda _: None)
        pool.submit(ran.append, "queued", on_done=lambda _: None)

    trio.run(submit)
    assert started.wait(10)
    threads = [t for t in threading.enumerate() if t.name.startswith("zarrfs-test-stop")]
    assert len(threads) == 1
    timer = threading.Timer(0.2, release.set)
    timer.start()
    assert stop_all(10)
    timer.join()
    assert ran == ["slow"] and not threads[0].is_alive()


def test_a_stopped_pool_starts_again_when_given_work() -> None:
    pool = WorkerPool(2, "zarrfs-test-again")

    async def twice() -> int:
        return await pool.run(lambda: 2) + await pool.run(lambda: 3)

    assert trio.run(twice) == 5
    assert stop_all(10)
    assert trio.run(twice) == 5
    assert stop_all(10)
