"""A shaping TCP proxy on 127.0.0.1: the network between a cloud VM and its object
store, put in front of a local S3 server. It runs as a process of its own
(``python -m bench.shaping HOST:PORT``), so that its work never holds the GIL of the
benchmark process, where zarr-python and tensorstore read.

What it does to every connection:

- **latency**: each direction is a delay line of ``rtt / 2`` (15 ms each way by
  default): a byte is passed on half a round trip after the proxy received it, so an
  answer's first byte comes one round trip after its request was sent, pipelined
  and concurrent requests overlap as on a network, and a body is delayed once, not
  per piece. A new connection also pays its TCP handshake: its first bytes leave a
  whole round trip after it was accepted (``connect()`` returns at once on loopback;
  on a network it returns a round trip later). TLS, slow start and loss are not
  modelled (a pool of kept-alive connections pays them rarely);
- **bandwidth**: the response direction passes a token bucket of ``rate`` bytes per
  second per connection (50 MB/s by default: the rate one S3 connection commonly
  reaches from a VM), so that a client's throughput grows with the connections it
  keeps busy, as it does from S3;
- **counting**: the HTTP requests (their heads found from Content-Length) and the
  connections, which the parent asks for on the proxy's stdin.

Protocol with the parent: the proxy prints its URL once it listens; every line
``count`` on its stdin is answered by ``REQUESTS CONNECTIONS BYTES_DOWN`` on its
stdout; end of stdin ends it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

RTT = 0.030  # seconds of a round trip between a VM and S3 in its region, or near it
RATE = 50e6  # bytes per second of one connection's responses
BURST = 1 << 16  # bytes the bucket may pass at once after an idle spell
PIECE = 1 << 17  # bytes read at a time
_MAX_HEAD = 1 << 16  # a longer request head: the counter stops counting that connection
_CONTENT_LENGTH = re.compile(rb"^content-length:[ \t]*(\d+)[ \t]*$", re.I | re.M)
_CHUNKED = re.compile(rb"^transfer-encoding:.*chunked", re.I | re.M)
STARTUP = 10.0  # seconds the proxy may take to listen


class TokenBucket:
    """``rate`` tokens (bytes) a second, at most ``burst`` saved up. Pure: the caller
    gives the time, and is told when a piece may go."""

    def __init__(self, rate: float, burst: float) -> None:
        if rate <= 0 or burst < 0:
            raise ValueError("rate must be > 0 and burst >= 0")
        self.rate = rate
        self.burst = burst
        self._tokens = burst
        self._time = float("-inf")  # when ``_tokens`` was right

    def take(self, now: float, nbytes: int) -> float:
        """The time ``nbytes`` offered at ``now`` have passed: ``now`` when the bucket
        holds them, else when it will have (pieces pass in the order offered, and a
        piece larger than the burst waits for the tokens it lacks)."""
        now = max(now, self._time)
        if self._time != float("-inf"):
            self._tokens = min(self.burst, self._tokens + (now - self._time) * self.rate)
        self._time = now
        self._tokens -= nbytes
        if self._tokens >= 0:
            return now
        done = now - self._tokens / self.rate
        self._time, self._tokens = done, 0.0
        return done


class RequestCounter:
    """Counts the HTTP/1.1 requests in a client's byte stream, fed as it comes: heads
    end at a blank line, bodies are skipped by their Content-Length. A chunked body
    (S3 clients reading send none) or an overlong head stops the count there."""

    def __init__(self) -> None:
        self.requests = 0
        self._head = b""
        self._body = 0  # bytes of the current request's body still to skip
        self._lost = False

    def feed(self, data: bytes) -> None:
        while data and not self._lost:
            if self._body:
                skipped = min(self._body, len(data))
                self._body -= skipped
                data = data[skipped:]
                continue
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                self._lost = len(self._head) > _MAX_HEAD
                return
            head, data = self._head[:end], self._head[end + 4 :]
            self._head = b""
            self.requests += 1
            if _CHUNKED.search(head):
                self._lost = True
                return
            length = _CONTENT_LENGTH.search(head)
            self._body = int(length.group(1)) if length else 0


class DelayLine:
    """Pieces of one direction, each with the time it may be passed on. At most
    ``window`` bytes wait in it (as a TCP window bounds what is in flight): the
    reader waits for room, which holds back the sender."""

    def __init__(self, window: int) -> None:
        self.window = window
        self._pieces: collections.deque[tuple[float, bytes]] = collections.deque()
        self._bytes = 0
        self._changed = asyncio.Event()

    async def put(self, due: float, piece: bytes) -> None:
        while self._bytes >= self.window:
            self._changed.clear()
            await self._changed.wait()
        self._pieces.append((due, piece))
        self._bytes += len(piece)
        self._changed.set()

    async def get(self) -> tuple[float, bytes]:
        while not self._pieces:
            self._changed.clear()
            await self._changed.wait()
        due, piece = self._pieces.popleft()
        self._bytes -= len(piece)
        self._changed.set()
        return due, piece


@dataclass
class Counts:
    requests: int = 0
    connections: int = 0
    bytes_down: int = 0


class Shaper:
    """The proxy's server: a connection to ``upstream`` per connection accepted."""

    def __init__(self, upstream: tuple[str, int], rtt: float, rate: float) -> None:
        self.upstream = upstream
        self.rtt = rtt
        self.rate = rate
        self.counts = Counts()
        self._counters: list[RequestCounter] = []

    def snapshot(self) -> Counts:
        requests = sum(c.requests for c in self._counters)
        return Counts(requests, self.counts.connections, self.counts.bytes_down)

    async def serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        accepted = loop.time()
        self.counts.connections += 1
        try:
            server_r, server_w = await asyncio.open_connection(*self.upstream, limit=2 * PIECE)
        except OSError:
            client_w.close()
            return
        for writer in (client_w, server_w):
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        counter = RequestCounter()
        self._counters.append(counter)
        # In flight at most: what the rate passes in a round trip, and some more.
        window = int(self.rate * self.rtt) + 4 * PIECE
        up = self._direction(client_r, server_w, DelayLine(window), accepted + self.rtt, counter)
        down = self._direction(server_r, client_w, DelayLine(window), accepted, None)
        try:
            await asyncio.gather(up, down, return_exceptions=True)
        except asyncio.CancelledError:
            pass  # the proxy is ending: the connection goes with it, quietly
        finally:
            for writer in (client_w, server_w):
                writer.close()

    async def _direction(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        line: DelayLine,
        not_before: float,
        counter: RequestCounter | None,
    ) -> None:
        """Everything from ``source`` to ``sink``, through the delay line (and the
        token bucket for responses, where ``counter`` is None); then ``sink``'s end."""
        loop = asyncio.get_running_loop()
        bucket = TokenBucket(self.rate, BURST) if counter is None else None
        half = self.rtt / 2

        async def receive() -> None:
            try:
                while piece := await source.read(PIECE):
                    now = max(loop.time(), not_before)
                    if counter is not None:
                        counter.feed(piece)
                    else:
                        self.counts.bytes_down += len(piece)
                    sent = bucket.take(now, len(piece)) if bucket is not None else now
                    await line.put(sent + half, piece)
            except OSError:
                pass
            await line.put(0.0, b"")  # the end

        async def deliver() -> None:
            while True:
                due, piece = await line.get()
                if not piece:
                    break
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                sink.write(piece)
                await sink.drain()
            if sink.can_write_eof():
                sink.write_eof()

        receiver = asyncio.ensure_future(receive())
        try:
            await deliver()
        except OSError:
            receiver.cancel()
        with contextlib.suppress(OSError, asyncio.CancelledError):
            await receiver


async def _serve(shaper: Shaper) -> None:
    server = await asyncio.start_server(shaper.serve, "127.0.0.1", 0, limit=2 * PIECE)
    port = server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{port}", flush=True)
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def commands() -> None:  # a thread: stdin blocks
        for line in sys.stdin:
            if line.strip() == "count":
                reply = asyncio.run_coroutine_threadsafe(_snapshot(shaper), loop).result()
                print(f"{reply.requests} {reply.connections} {reply.bytes_down}", flush=True)
        loop.call_soon_threadsafe(done.set_result, None)

    threading.Thread(target=commands, daemon=True).start()
    async with server:
        await done
    # Connections still open end here, each task awaited (none left pending).
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _snapshot(shaper: Shaper) -> Counts:
    return shaper.snapshot()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.shaping")
    parser.add_argument("upstream", help="HOST:PORT of the server behind the proxy")
    parser.add_argument("--rtt", type=float, default=RTT, help="seconds of a round trip")
    parser.add_argument("--rate", type=float, default=RATE, help="bytes/s of each connection")
    args = parser.parse_args()
    host, _, port = args.upstream.rpartition(":")
    asyncio.run(_serve(Shaper((host, int(port)), args.rtt, args.rate)))


# -- the parent's side ---------------------------------------------------------------------


@dataclass
class Proxy:
    """A running shaping proxy: its URL and PID, and its counts on demand."""

    url: str
    process: subprocess.Popen[str]

    def counts(self) -> Counts:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write("count\n")
        self.process.stdin.flush()
        requests, connections, down = self.process.stdout.readline().split()
        return Counts(int(requests), int(connections), int(down))


@contextmanager
def shaping_proxy(
    upstream: str, rtt: float = RTT, rate: float = RATE, cwd: str | None = None
) -> Iterator[Proxy]:
    """The proxy in front of ``upstream`` (http://host:port), a process of ours ended
    (by its PID) at the end."""
    import select

    hostport = upstream.removeprefix("http://").rstrip("/")
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.shaping", hostport, "--rtt", str(rtt), "--rate", str(rate)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], STARTUP)
        url = process.stdout.readline().strip() if ready else ""
        if not url.startswith("http://127.0.0.1:"):
            raise OSError(f"the shaping proxy did not come up (it said {url!r})")
        yield Proxy(url, process)
    finally:
        if process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()  # it ends at the end of its stdin
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


if __name__ == "__main__":
    main()
