"""Worker threads for chunk loads, fed from a queue, answering the trio loop.

``trio.to_thread.run_sync`` wakes a sleeping thread for every call and waits for
it; on a small VM that wake-up alone costs a few hundred microseconds, as much
as decoding a megabyte. Here the threads take jobs from one queue and go on to
the next without sleeping while read-ahead keeps it full, and each result is
handed back with ``run_sync_soon`` (no round trip). Requests a reader waits for
go before read-ahead: the queue is ordered by priority, then by arrival.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import outcome
import trio

T = TypeVar("T")

URGENT = 0  # a reader waits for it
BACKGROUND = 1  # read-ahead

# Requests in flight to a remote store (threads that mostly wait on the network):
# reads in the fetch pool, writes in write-back's put pool. obstore itself caps no
# connections: one request per thread, so these are the bound. A stream of chunks
# of a MiB or so over a network is bound by how many are in flight (a request waits
# a round trip, and a connection carries some 50 MB/s): 64 at once read tiles from
# a cloud VM's distance a third faster than 32 (docs/benchmarks.md, network).
FETCH_THREADS = 64
PUT_THREADS = 32


def _name_native_thread(name: str) -> None:
    """Give the OS thread the pool's name (15 bytes at most), so that ``top -H``,
    ``ps -L`` and /proc/PID/task/*/comm tell decoders from fetchers; best effort."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None)
        libc.pthread_self.restype = ctypes.c_ulong  # a pointer-sized handle
        libc.pthread_setname_np.argtypes = [ctypes.c_ulong, ctypes.c_char_p]
        libc.pthread_setname_np(libc.pthread_self(), name.encode()[:15])


# Every pool made, so that the daemon can let their threads end before it exits.
_POOLS: weakref.WeakSet[WorkerPool] = weakref.WeakSet()
# A stop goes before every job still queued (those are dropped: nobody waits for
# them once the loop has ended).
_STOP = -1


class WorkerPool:
    def __init__(self, threads: int, name: str = "zarrfs-worker") -> None:
        _POOLS.add(self)
        self.threads = threads
        self._name = name
        self._queue: queue.PriorityQueue[tuple[int, int, Callable[[], None]]] = (
            queue.PriorityQueue()
        )
        self._order = itertools.count()
        self._started: list[threading.Thread] = []
        self._lock = threading.Lock()

    def _ensure_started(self) -> None:
        if len(self._started) == self.threads:
            return
        with self._lock:
            while len(self._started) < self.threads:
                thread = threading.Thread(
                    target=self._work, name=f"{self._name}-{len(self._started)}", daemon=True
                )
                thread.start()
                self._started.append(thread)

    def _work(self) -> None:
        _name_native_thread(threading.current_thread().name)
        while True:
            _, _, job = self._queue.get()
            if job is None:  # stop
                return
            job()
            # An idle worker must not keep its last job (its arguments, its result
            # or a traceback holding a decoded buffer) alive until the next one.
            del job

    def submit(
        self,
        fn: Callable[..., T],
        *args: Any,
        priority: int = URGENT,
        on_done: Callable[[outcome.Outcome], None],
    ) -> None:
        """Queue ``fn(*args)``; ``on_done(outcome)`` is then called in the trio thread.

        Call from the trio thread. If the loop has ended by then, the result is dropped.
        """
        self.submit_from_thread(
            trio.lowlevel.current_trio_token(), fn, *args, priority=priority, on_done=on_done
        )

    def submit_from_thread(
        self,
        token: trio.lowlevel.TrioToken,
        fn: Callable[..., T],
        *args: Any,
        priority: int = URGENT,
        on_done: Callable[[outcome.Outcome], None],
    ) -> None:
        """``submit`` from any thread: ``on_done`` is called in the thread of the trio
        loop that ``token`` names (a worker hands its result on to another pool's
        worker without a round trip through the loop)."""
        self._ensure_started()

        def job() -> None:
            value = outcome.capture(fn, *args)
            # RunFinishedError: the loop is gone (unmounted), nobody waits any more
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(on_done, value)

        self._queue.put((priority, next(self._order), job))

    def stop(self) -> list[threading.Thread]:
        """Each thread ends after the job it is on (the jobs queued are dropped); the
        threads, to join."""
        with self._lock:
            threads, self._started = self._started, []
        for _ in threads:
            self._queue.put((_STOP, next(self._order), None))  # type: ignore[arg-type]
        return threads

    async def run(self, fn: Callable[..., T], *args: Any, priority: int = URGENT) -> T:
        """``fn(*args)`` in a worker thread; its result or exception, in the trio thread.

        If the caller is cancelled the job still runs to its end; its result is dropped.
        """
        done = trio.Event()
        result: list[outcome.Outcome] = []

        def deliver(value: outcome.Outcome) -> None:
            result.append(value)
            done.set()

        self.submit(fn, *args, priority=priority, on_done=deliver)
        await done.wait()
        return result[0].unwrap()


def stop_all(timeout: float) -> bool:
    """Let every pool's threads end, waiting up to ``timeout`` seconds; whether all did.

    Worker threads are daemon threads: at exit the interpreter would tear down what
    a thread still decoding refers to while its C code (a decompressor, with the GIL
    released) writes into it, corrupting the heap. A daemon that has unmounted (every
    flush done, the loop ended) stops them first.
    """
    threads = [thread for pool in list(_POOLS) for thread in pool.stop()]
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(deadline - time.monotonic(), 0))
    return not any(thread.is_alive() for thread in threads)


def default_threads() -> int:
    """Threads of a CPU-bound pool (decoding, encoding): one per core, at least two."""
    return max(2, os.cpu_count() or 2)


@dataclass(frozen=True)
class LoadPools:
    """The threads chunk loads run in: ``decoders``, and for a remote store
    ``fetchers`` of their own (its requests mostly wait on the network: many at
    once, and the decoders take each as it arrives)."""

    decoders: WorkerPool
    fetchers: WorkerPool | None = None

    @classmethod
    def create(cls, *, remote: bool, threads: int | None = None) -> LoadPools:
        decoders = WorkerPool(threads or default_threads(), "zarrfs-decode")
        return cls(decoders, WorkerPool(FETCH_THREADS, "zarrfs-fetch") if remote else None)
