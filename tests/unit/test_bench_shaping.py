"""The benchmark's shaping proxy (bench/shaping.py): its token bucket's arithmetic,
its request counter, and that bytes pass through it unchanged. Nothing here is
timed: the delays are only checked as the times the pure parts compute."""

from __future__ import annotations

import asyncio
import os

import pytest

from bench.shaping import DelayLine, RequestCounter, Shaper, TokenBucket

RATE = 1000.0  # bytes per second, for round numbers


def test_bucket_passes_a_burst_at_once_then_paces_at_the_rate() -> None:
    bucket = TokenBucket(RATE, burst=100)
    assert bucket.take(10.0, 100) == 10.0  # full at first: the burst goes now
    assert bucket.take(10.0, 50) == pytest.approx(10.05)  # 50 bytes lacking
    assert bucket.take(10.05, 1000) == pytest.approx(11.05)  # a second of tokens


def test_bucket_refills_while_idle_up_to_the_burst() -> None:
    bucket = TokenBucket(RATE, burst=100)
    bucket.take(0.0, 100)
    assert bucket.take(0.05, 50) == 0.05  # 50 tokens came back in 50 ms
    # Idle for long: no more than the burst saved up.
    assert bucket.take(100.0, 100) == 100.0
    assert bucket.take(100.0, 100) == pytest.approx(100.1)


def test_bucket_keeps_order_and_long_run_rate() -> None:
    bucket = TokenBucket(RATE, burst=10)
    times = [bucket.take(0.0, 100) for _ in range(50)]
    assert times == sorted(times)
    # 5000 bytes at 1000/s, 10 of them free: 4.99 s after the first offer.
    assert times[-1] == pytest.approx(4.99)


def test_bucket_offer_in_the_past_goes_after_the_last_release() -> None:
    bucket = TokenBucket(RATE, burst=0)
    assert bucket.take(1.0, 500) == pytest.approx(1.5)
    assert bucket.take(1.2, 500) == pytest.approx(2.0)  # not before the previous one


def test_bucket_rejects_a_zero_rate() -> None:
    with pytest.raises(ValueError):
        TokenBucket(0.0, 10)


def test_counter_counts_heads_split_anywhere_and_skips_bodies() -> None:
    stream = (
        b"GET /b/k HTTP/1.1\r\nHost: h\r\n\r\n"
        b"PUT /b/k HTTP/1.1\r\nContent-Length: 10\r\n\r\n"
        b"\r\n\r\nGET / x"  # a body that looks like a head's end
        b"HEAD /b/k HTTP/1.1\r\n\r\n"
    )
    for size in (1, 3, 7, len(stream)):
        counter = RequestCounter()
        for start in range(0, len(stream), size):
            counter.feed(stream[start : start + size])
        assert counter.requests == 3


def test_counter_stops_at_a_chunked_body() -> None:
    counter = RequestCounter()
    counter.feed(b"PUT /k HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n")
    counter.feed(b"GET /k HTTP/1.1\r\n\r\n")
    assert counter.requests == 1


def test_delay_line_keeps_order_and_bounds_its_bytes() -> None:
    async def run() -> list[bytes]:
        line = DelayLine(window=10)
        got: list[bytes] = []

        async def take() -> None:
            while True:
                _, piece = await line.get()
                if not piece:
                    return
                got.append(piece)

        taker = asyncio.ensure_future(take())
        for n in range(20):
            await line.put(float(n), bytes([n]) * 6)  # waits once 10 bytes wait
            assert line._bytes <= 12
        await line.put(0.0, b"")
        await taker
        return got

    assert asyncio.run(run()) == [bytes([n]) * 6 for n in range(20)]


def test_bytes_pass_through_unchanged_both_ways() -> None:
    """Two pipelined requests through the proxy (no delay, a fast rate): the server
    sees the request bytes as sent, the client the answers as served."""
    body = os.urandom(3 << 20)
    seen: list[bytes] = []

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(2):
            head = await reader.readuntil(b"\r\n\r\n")
            seen.append(head)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            await writer.drain()
        writer.close()

    async def run() -> tuple[bytes, Shaper]:
        server = await asyncio.start_server(upstream, "127.0.0.1", 0)
        shaper = Shaper(server.sockets[0].getsockname()[:2], rtt=0.0, rate=1e12)
        proxy = await asyncio.start_server(shaper.serve, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection(*proxy.sockets[0].getsockname()[:2])
        requests = b"GET /b/one HTTP/1.1\r\n\r\nGET /b/two HTTP/1.1\r\nX: y\r\n\r\n"
        writer.write(requests)
        await writer.drain()
        received = await reader.read()  # the server ends after two answers
        writer.close()
        for s in (proxy, server):
            s.close()
        return received, shaper

    received, shaper = asyncio.run(run())
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    assert received == answer * 2
    assert seen == [b"GET /b/one HTTP/1.1\r\n\r\n", b"GET /b/two HTTP/1.1\r\nX: y\r\n\r\n"]
    counts = shaper.snapshot()
    assert (counts.requests, counts.connections, counts.bytes_down) == (2, 1, len(answer) * 2)
