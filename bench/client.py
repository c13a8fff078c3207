"""Benchmark the Python client against the default gateway (real gunicorn, private Redis).

Prints jobs/s of ``Client.enqueue`` from one thread and from 8 threads sharing one client, and of
``Client.enqueue_many`` in batches of 100 and 1,000 (each job named by the client's own id). For
scale, the same loops over bare keep-alive ``http.client`` connections (one thread without and
with an Idempotency-Key, which costs the gateway a second script call; 8 threads with it). Run
from the repository root: ``python -m bench.client`` (``--help``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from taskforge import Client, JobSpec
from tests.support.gunicorn import run_gunicorn
from tests.support.redis_server import private_redis

PAYLOAD = {"to": "user@example.com", "n": 1}
WARM_UP = 200  # enqueues before measuring: connections, scripts, the directory of queues


def timed(seconds: float, threads: int, work: Callable[[], int]) -> tuple[float, int]:
    """Run ``work`` (returns jobs made per call) in ``threads`` threads for ``seconds``;
    return jobs/s and the jobs made."""
    made = [0] * threads
    stop = time.monotonic() + seconds

    def loop(slot: int) -> None:
        while time.monotonic() < stop:
            made[slot] += work()

    started = time.perf_counter()
    pool = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(timeout=seconds + 60)
    elapsed = time.perf_counter() - started
    return sum(made) / elapsed, sum(made)


def raw_enqueue(port: int, with_key: bool) -> Callable[[], int]:
    """Return a bare http.client enqueue (keep-alive, one connection per thread), optionally
    with a key."""
    local = threading.local()
    body = json.dumps({"type": "bench", "payload": PAYLOAD})

    def work() -> int:
        if not hasattr(local, "conn"):
            local.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        headers = {"Content-Type": "application/json"}
        if with_key:
            headers["Idempotency-Key"] = uuid.uuid4().hex
        local.conn.request("POST", "/enqueue", body=body, headers=headers)
        response = local.conn.getresponse()
        response.read()
        assert response.status == 201, response.status
        return 1

    return work


def measure(url: str, port: int, seconds: float, rounds: int) -> tuple[dict[str, list[float]], int]:
    """Return jobs/s per case over ``rounds`` rounds (the cases interleaved within each round)
    and the jobs made in all."""
    client = Client(url, pool_size=8)

    def one() -> int:
        client.enqueue("bench", PAYLOAD)
        return 1

    batch100 = [JobSpec("bench", PAYLOAD) for _ in range(100)]
    batch1000 = [JobSpec("bench", PAYLOAD) for _ in range(1000)]
    cases: dict[str, tuple[int, Callable[[], int]]] = {
        "http.client, 1 thread, no key": (1, raw_enqueue(port, with_key=False)),
        "http.client, 1 thread, with key": (1, raw_enqueue(port, with_key=True)),
        "Client.enqueue, 1 thread": (1, one),
        "http.client, 8 threads, with key": (8, raw_enqueue(port, with_key=True)),
        "Client.enqueue, 8 threads": (8, one),
        "Client.enqueue_many, 100 a call": (1, lambda: len(client.enqueue_many(batch100))),
        "Client.enqueue_many, 1,000 a call": (1, lambda: len(client.enqueue_many(batch1000))),
    }
    figures: dict[str, list[float]] = {name: [] for name in cases}
    total = 0
    for _ in range(rounds):
        for name, (threads, work) in cases.items():
            rate, made = timed(seconds, threads, work)
            figures[name].append(rate)
            total += made
    client.close()
    return figures, total


def main() -> None:
    """Start Redis and the default gateway, measure, print a table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per case and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with (
        private_redis() as server,
        tempfile.TemporaryDirectory() as tmp,
        run_gunicorn(server.url, Path(tmp)) as gw,
    ):
        client = Client(gw.url)
        for _ in range(WARM_UP):
            client.enqueue("bench", PAYLOAD)
        figures, made = measure(gw.url, gw.port, args.seconds, args.rounds)
        stored = client.stats().total
    print(
        f"# default gateway (2 gunicorn workers x gthread), {args.rounds} rounds x {args.seconds:g} s"
    )
    print(f"{'case':38} {'median jobs/s':>14} {'min':>8} {'max':>8}")
    for name, rates in figures.items():
        print(f"{name:38} {statistics.median(rates):14,.0f} {min(rates):8,.0f} {max(rates):8,.0f}")
    # Every job acknowledged is in Redis once: a mismatch would be a lost or doubled enqueue.
    print(f"# jobs acknowledged {made + WARM_UP:,}, jobs in Redis {stored:,}")


if __name__ == "__main__":
    main()
