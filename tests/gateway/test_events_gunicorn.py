"""GET /events under real gunicorn: 50 streams at once while enqueues are answered, the bound,
streams that end when their worker stops, and a client that stops reading is dropped.

Each enqueue's `enqueued` event is written by enqueue.lua itself (docs/EVENTS.md, "Writing").
"""

from __future__ import annotations

import http.client
import json
import socket
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass, field

import pytest
import redis

from shared.engine.keys import Keys
from tests.support.gunicorn import Gunicorn
from tests.support.tools import wait_until

K = Keys()
STREAMS = 50
JOBS = 20
READ_TIMEOUT = 30.0  # seconds a stream's socket waits (keep-alives come every 15 s)


@dataclass
class Listener:
    """One client of GET /events on its own thread: the job ids it received."""

    port: int
    status: int | None = None
    ready: threading.Event = field(default_factory=threading.Event)
    job_ids: set[str] = field(default_factory=set)
    ended: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    conn: http.client.HTTPConnection | None = None

    def run(self) -> None:
        try:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=READ_TIMEOUT)
            self.conn.request("GET", "/events")
            response = self.conn.getresponse()
            self.status = response.status
            if response.status != 200:
                response.read()
                return
            while line := response.readline():
                if line.startswith(b"id: "):
                    self.ready.set()  # the first message: the cursor of the moment it opened
                elif line.startswith(b"data: "):
                    job_id = json.loads(line[6:]).get("job_id")
                    if job_id:
                        self.job_ids.add(job_id)
        except OSError as exc:  # a closed socket when the test ends is no failure
            self.error = exc
        finally:
            self.ready.set()
            self.ended.set()

    def close(self) -> None:
        if self.conn is not None and self.conn.sock is not None:
            self.conn.sock.shutdown(2)  # the reader thread sees the end at once


@pytest.fixture
def listen() -> Iterator[Callable[[int, int], list[Listener]]]:
    """Return an opener of `n` streams on a port, each on its thread; all closed afterwards."""
    opened: list[tuple[Listener, threading.Thread]] = []

    def start(port: int, n: int) -> list[Listener]:
        listeners = [Listener(port) for _ in range(n)]
        for listener in listeners:
            thread = threading.Thread(target=listener.run, daemon=True)
            thread.start()
            opened.append((listener, thread))
        for listener in listeners:
            assert listener.ready.wait(READ_TIMEOUT), "a stream did not open"
        return listeners

    yield start
    for listener, _ in opened:
        with suppress(OSError):
            listener.close()
    for _, thread in opened:
        thread.join(READ_TIMEOUT)


def enqueue(gw: Gunicorn, r: redis.Redis) -> tuple[str, float]:
    """POST one job (enqueue.lua writes its event); return its id and the latency (s)."""
    started = time.perf_counter()
    status, _, job = gw.request("POST", "/enqueue", {"type": "events.load"})
    latency = time.perf_counter() - started
    assert status == 201, job
    return job["id"], latency


def latencies(gw: Gunicorn, r: redis.Redis, n: int) -> tuple[list[str], list[float]]:
    ids, times = [], []
    for _ in range(n):
        job_id, latency = enqueue(gw, r)
        ids.append(job_id)
        times.append(latency)
    return ids, times


def stream_reads(r: redis.Redis) -> int:
    """Return how many XREAD and XINFO calls Redis has served so far."""
    stats = r.info("commandstats")
    return sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("xread", "xinfo"))


def ms(values: list[float]) -> str:
    ordered = sorted(values)
    return (
        f"median {statistics.median(ordered) * 1000:.1f} ms, "
        f"max {ordered[-1] * 1000:.1f} ms over {len(ordered)}"
    )


def test_50_streams_get_every_event_while_enqueues_are_answered(
    gw: Gunicorn, r: redis.Redis, listen: Callable[[int, int], list[Listener]]
) -> None:
    _, before = latencies(gw, r, JOBS)
    listeners = listen(gw.port, STREAMS)
    assert [listener.status for listener in listeners] == [200] * STREAMS
    reads_before = stream_reads(r)
    sent = time.monotonic()
    job_ids, during = latencies(gw, r, JOBS)
    wait_until(
        lambda: all(listener.job_ids >= set(job_ids) for listener in listeners),
        15.0,
        "every stream to receive every job's event",
    )
    delivered = time.monotonic() - sent
    reads = stream_reads(r) - reads_before
    print(  # the figures bench/MEASUREMENTS.md quotes (run with -s to see them)
        f"\nPOST /enqueue latency, no stream open: {ms(before)}"
        f"\nPOST /enqueue latency, {STREAMS} streams open: {ms(during)}"
        f"\n{JOBS} events to all {STREAMS} streams: {delivered:.2f} s from the first enqueue"
        f"\nXREAD + XINFO calls: {reads / JOBS:.1f} per event for {STREAMS} streams"
    )
    # The tails read for the readers: a few calls per event and process, not one per stream.
    assert reads < JOBS * STREAMS / 2
    # Answered, and not starved: far under the gateway's own 1 s Redis deadline.
    assert max(during) < 1.0


def test_one_stream_over_the_bound_is_503_and_streams_end_with_their_worker(
    start_gateway: Callable[..., AbstractContextManager[Gunicorn]],
    r: redis.Redis,
    listen: Callable[[int, int], list[Listener]],
) -> None:
    with start_gateway(WEB_CONCURRENCY="1", TASKFORGE_EVENTS_STREAMS="3") as gw:
        listeners = listen(gw.port, 3)
        assert [listener.status for listener in listeners] == [200] * 3
        status, headers, body = gw.request("GET", "/events")
        assert status == 503 and headers["retry-after"] == "5"
        assert "TASKFORGE_EVENTS_STREAMS" in body["error"]
        job_id, _ = enqueue(gw, r)  # the other threads still answer
        wait_until(
            lambda: all(job_id in listener.job_ids for listener in listeners),
            10.0,
            "the streams to get the job",
        )
        # SIGTERM: the streams end at once instead of holding the worker for its 25 s grace.
        started = time.monotonic()
        gw.stop()
        stopped = time.monotonic() - started
        assert gw.process.returncode == 0
        assert all(listener.ended.wait(1.0) for listener in listeners)
        assert stopped < 5.0, f"gunicorn took {stopped:.1f} s to stop with streams open"


def test_a_client_that_stops_reading_is_dropped_and_frees_its_slot(
    start_gateway: Callable[..., AbstractContextManager[Gunicorn]], r: redis.Redis
) -> None:
    """A client that keeps its connection open but reads nothing would block its stream's
    writes forever once the socket buffers fill; the write times out after two keep-alive
    intervals instead, and the one slot serves a new stream."""
    env = {"WEB_CONCURRENCY": "1", "TASKFORGE_EVENTS_STREAMS": "1"}
    with start_gateway(**env, TASKFORGE_EVENTS_KEEPALIVE="0.5s") as gw:
        stalled = socket.socket()
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fills at once
        try:
            stalled.connect(("127.0.0.1", gw.port))
            stalled.sendall(b"GET /events HTTP/1.1\r\nHost: test\r\n\r\n")
            assert stalled.recv(12) == b"HTTP/1.1 200"  # open; never read again
            assert gw.request("GET", "/events")[0] == 503  # its one slot is taken
            # Far more than loopback's socket buffers hold, so the stream's writes block.
            big = "x" * 8192
            for _ in range(4):
                pipe = r.pipeline(transaction=False)
                for _ in range(250):
                    entry = {"q": "default", "e": "enqueued", "j": "0" * 8, "t": big}
                    pipe.xadd(K.fleet_events, entry)
                pipe.execute()

            def slot_free() -> bool:
                conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=5)
                try:
                    conn.request("GET", "/events")
                    return conn.getresponse().status == 200
                finally:
                    conn.close()

            wait_until(slot_free, 15.0, "the stalled stream to be dropped")
        finally:
            stalled.close()


def open_stream(port: int, headers: str = "") -> socket.socket:
    """Open GET /events on a raw socket; return it once the 200 status line came."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT)
    sock.sendall(f"GET /events HTTP/1.1\r\nHost: test\r\n{headers}\r\n".encode())
    status = sock.recv(12)
    assert status == b"HTTP/1.1 200", status
    return sock


def test_128_streams_opened_and_closed_free_their_slots_at_once(
    start_gateway: Callable[..., AbstractContextManager[Gunicorn]],
) -> None:
    """A slot used to free at the next keep-alive (15 s), so 128 clients
    that opened and closed a stream gave everyone 503. Now a stream notices its client hung up
    within gateway.hangup.POLL_SECONDS, and a newcomer waits that moment rather than a 503."""
    with start_gateway(WEB_CONCURRENCY="1", TASKFORGE_EVENTS_STREAMS="128") as gw:
        for _ in range(2):  # twice: every slot the first round took came back
            socks = [open_stream(gw.port) for _ in range(128)]
            for sock in socks:
                sock.close()
            started = time.monotonic()
            open_stream(gw.port).close()  # admitted: a 200, not a 503
            admitted = time.monotonic() - started
            print(f"\na stream after 128 opened and closed: admitted in {admitted * 1000:.0f} ms")
            assert admitted < 3.0


def test_a_resume_with_many_queues_sends_a_small_id_gunicorn_accepts(
    gw: Gunicorn, r: redis.Redis
) -> None:
    """With 650 queues the id used to be 14,408 bytes and a reconnect got 431."""
    r.sadd(K.queues, *(f"q{i}" for i in range(2000)))
    sock = open_stream(gw.port)
    reader = sock.makefile("rb")
    first_id = None
    while first_id is None:
        line = reader.readline()
        assert line, "the stream ended"
        if line.startswith(b"id: "):
            first_id = line[4:].strip().decode()
    sock.close()
    assert len(first_id) <= 41
    job_id, _ = enqueue(gw, r)
    again = open_stream(gw.port, f"Last-Event-ID: {first_id}\r\n")
    again_reader = again.makefile("rb")
    try:
        deadline = time.monotonic() + READ_TIMEOUT
        while True:
            assert time.monotonic() < deadline, "the resumed stream did not send the job"
            line = again_reader.readline()
            assert line, "the resumed stream ended"
            if line.startswith(b"data: "):
                assert json.loads(line[6:])["job_id"] == job_id  # the first event after it
                break
    finally:
        again.close()
