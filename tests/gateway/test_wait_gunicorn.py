"""GET /jobs/<id>?wait= under real gunicorn (2 workers, default settings): 50 waits at once
hold no Redis connection each, and each ends when its job completes.

`.venv/bin/python -m pytest -s tests/gateway/test_wait_gunicorn.py` prints the figures.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import pytest
import redis

from gateway.app import POOL_SIZE
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from tests.support.gunicorn import Gunicorn
from tests.support.tools import wait_until

WAITERS = 50
WORKERS = 2  # tests.support.gunicorn's WEB_CONCURRENCY
WAIT = "30s"
READ_TIMEOUT = 40.0  # seconds a waiting client's socket allows: beyond WAIT
DEADLINE = 10.0  # seconds to reach a state the test waits for
PROMPT = 1.0  # seconds: a wait answers this soon after its job completes


@dataclass
class Waiter:
    """One client of GET /jobs/<id>?wait= on its own thread."""

    port: int
    job_id: str
    status: int | None = None
    doc: dict | None = None
    ended: float | None = None  # time.monotonic() when the answer arrived
    done: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=READ_TIMEOUT)
        try:
            conn.request("GET", f"/jobs/{self.job_id}?wait={WAIT}")
            response = conn.getresponse()
            body = response.read()
            self.ended = time.monotonic()
            self.status, self.doc = response.status, json.loads(body)
        finally:
            conn.close()
            self.done.set()


@pytest.fixture
def waiters() -> Iterator[list[threading.Thread]]:
    """Collect the waiters' threads; join each (bounded) after the test."""
    threads: list[threading.Thread] = []
    yield threads
    for thread in threads:
        thread.join(READ_TIMEOUT)


def gateway_connections(r: redis.Redis) -> list[dict]:
    """Return the connections the gateway's processes hold to Redis (by client name)."""
    return [c for c in r.client_list() if c.get("name", "").startswith("taskforge-gateway-")]


def blocked(connections: list[dict]) -> int:
    """Return how many of `connections` sit in a blocking command (XREAD BLOCK: the tails)."""
    return sum(1 for c in connections if "b" in c.get("flags", ""))


def waits_in_progress(gw: Gunicorn) -> float:
    """Return the gateway's taskforge_gateway_job_waits gauge, summed over its processes."""
    status, _, body = gw.request("GET", "/metrics")
    assert status == 200
    match = re.search(rb"^taskforge_gateway_job_waits ([0-9.e+]+)$", body, re.MULTILINE)
    return float(match[1]) if match else 0.0


def test_50_waits_hold_no_redis_connection_each_and_end_with_their_jobs(
    gw: Gunicorn, r: redis.Redis, waiters: list[threading.Thread]
) -> None:
    ids = []
    for _ in range(WAITERS):
        status, _, job = gw.request("POST", "/enqueue", {"type": "wait.load"})
        assert status == 201, job
        ids.append(job["id"])
    idle = len(gateway_connections(r))

    clients = [Waiter(gw.port, job_id) for job_id in ids]
    for client in clients:
        thread = threading.Thread(target=client.run, daemon=True)
        thread.start()
        waiters.append(thread)
    wait_until(lambda: waits_in_progress(gw) == WAITERS, DEADLINE, f"{WAITERS} waits")
    # Taken twice, 0.5 s apart: a pooled connection is busy only for a read, never for a wait.
    samples = [gateway_connections(r)]
    time.sleep(0.5)  # not synchronisation: a second look at a state that must not change
    samples.append(gateway_connections(r))
    print(
        f"\nRedis connections of the gateway ({WORKERS} workers, pool {POOL_SIZE} each): "
        f"{idle} with no wait; with {WAITERS} waits open "
        + ", ".join(f"{len(s)} ({blocked(s)} in XREAD BLOCK)" for s in samples)
    )
    for sample in samples:
        # Per process: its bounded pool, filled by the burst of reads as the waits began, and
        # its one tail. A connection per waiter would be 50 at least.
        assert len(sample) <= WORKERS * (POOL_SIZE + 1) < WAITERS
        assert blocked(sample) <= WORKERS

    scripts = Scripts(r, Keys())
    completed_at: dict[str, float] = {}
    for _ in ids:
        job = scripts.claim("worker-wait-test")
        assert job is not None
        scripts.complete(job.id, job.token, '"ok"')
        completed_at[job.id] = time.monotonic()
    for client in clients:
        assert client.done.wait(READ_TIMEOUT), f"the wait on {client.job_id} did not end"
    assert {(c.status, c.doc["status"]) for c in clients} == {(200, "completed")}
    lags = sorted(c.ended - completed_at[c.job_id] for c in clients)
    after = len(gateway_connections(r))
    print(
        f"each wait answered {lags[0] * 1000:.1f}–{lags[-1] * 1000:.1f} ms after its job "
        f"completed (median {lags[len(lags) // 2] * 1000:.1f} ms); "
        f"{after} gateway connections afterwards"
    )
    assert lags[-1] < PROMPT
    assert after <= WORKERS * (POOL_SIZE + 1)


def test_waits_whose_clients_hung_up_free_their_slots_at_once(
    start_gateway: Callable[..., AbstractContextManager[Gunicorn]], r: redis.Redis
) -> None:
    """A ?wait= slot used to free when the wait ended (up to 60 s)."""
    with start_gateway(WEB_CONCURRENCY="1", TASKFORGE_EVENTS_STREAMS="4") as gw:
        status, _, job = gw.request("POST", "/enqueue", {"type": "wait.load"})
        assert status == 201, job
        socks = []
        for _ in range(4):
            sock = socket.create_connection(("127.0.0.1", gw.port), timeout=READ_TIMEOUT)
            sock.sendall(f"GET /jobs/{job['id']}?wait=60s HTTP/1.1\r\nHost: t\r\n\r\n".encode())
            socks.append(sock)
        wait_until(lambda: waits_in_progress(gw) == 4, DEADLINE, "4 waits")
        assert gw.request("GET", f"/jobs/{job['id']}?wait=1s")[0] == 503  # every slot taken
        for sock in socks:
            sock.close()
        started = time.monotonic()
        status, _, body = gw.request("GET", f"/jobs/{job['id']}?wait=0.1s")
        assert status == 200, body  # admitted, not 503
        assert time.monotonic() - started < 3.0
        wait_until(lambda: waits_in_progress(gw) == 0, DEADLINE, "the gone waits to end")
