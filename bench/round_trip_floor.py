"""The most a drain can do when its jobs cost nothing but their Redis round trips.

Each process runs a loop of "jobs" that do no work but a job's Redis traffic in one of four
shapes, against one private redis-server, and the rate of all processes together is the
ceiling of any queue that talks to Redis that way on this machine:

- ``ack-each``: the body's GET, and one script call per job that is sent before the body and
  read after it (as a TaskForge worker holding its next job sends its completion, which claims
  the next job, and reads the reply when the job in hand ends: workerd/prefetch.py);
- ``ack-each-wait``: the same call, its reply awaited before the body (``WORKER_PREFETCH=off``);
- ``ack-per-8``: the body's GET, and one script call per 8 jobs (``WORKER_BATCH=8``, or
  Dramatiq's fetch of a prefetched batch with the acks queued until it);
- ``body-only``: the body's GET alone (no queue at all);
- ``ack-only``: the script call alone, awaited (a no-op drain's own traffic: its jobs make no
  round trip of their own, so one call a job is all a queue of one round trip a job can make).

The script is ``return 1``: a real queue's script costs Redis more, so these are upper
bounds. On 2 cores, 4 such processes are CPU-bound (the processes and Redis share the two),
so the ceiling at 4 is CPU per round trip, which no Python below the round trip can cut.

    .venv/bin/python -m bench.round_trip_floor --procs 1 2 4 --jobs 20000 --rounds 3
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from typing import Any

import redis

from bench.peers.harness import redis_cost, redis_info
from tests.support.redis_server import private_redis

SHAPES = ("ack-each", "ack-each-wait", "ack-per-8", "body-only", "ack-only")
SCRIPT = "return 1"
START_TIMEOUT = 30.0
RUN_TIMEOUT = 600.0


def _loop(url: str, shape: str, jobs: int, start: Any, out: Any) -> None:
    """One process's jobs; puts (first start, last end) on `out` (perf_counter, one clock)."""
    client = redis.Redis.from_url(url)
    sha = client.script_load(SCRIPT)
    client.set("body", "x")
    # The call in flight goes out on a connection of its own, as the worker's held call does.
    ack = client.connection_pool.make_connection()
    ack.connect()
    every = 8 if shape == "ack-per-8" else 1
    if not start.wait(START_TIMEOUT):
        raise SystemExit("the start signal never came")
    began = time.perf_counter()
    for i in range(jobs):
        if shape == "ack-each":
            ack.send_command("EVALSHA", sha, 0)
            client.get("body")
            ack.read_response()
        elif shape == "body-only":
            client.get("body")
        elif shape == "ack-only":
            client.evalsha(sha, 0)
        else:
            if i % every == 0:
                client.evalsha(sha, 0)
            client.get("body")
    out.put((began, time.perf_counter()))


def rate(url: str, shape: str, procs: int, jobs: int) -> float:
    """Jobs per second of `procs` processes running `jobs` jobs each in `shape`."""
    ctx = multiprocessing.get_context("fork")
    start, out = ctx.Event(), ctx.Queue()
    children = [
        ctx.Process(target=_loop, args=(url, shape, jobs, start, out)) for _ in range(procs)
    ]
    for child in children:
        child.start()
    try:
        # Let every child connect and load the script before the clock starts.
        time.sleep(0.5)
        start.set()
        spans = [out.get(timeout=RUN_TIMEOUT) for _ in children]
    finally:
        for child in children:
            child.join(timeout=RUN_TIMEOUT)
            if child.is_alive():
                child.kill()
    return procs * jobs / (max(end for _, end in spans) - min(begin for begin, _ in spans))


Figures = dict[str, dict[int, list[float]]]


def measure(
    shapes: list[str], procs: list[int], jobs: int, rounds: int
) -> tuple[Figures, Figures, Figures]:
    """Interleaved rounds: every shape at every process count once per round. Returns the
    rates (jobs/s), Redis's CPU µs and the requests Redis read, per job, by shape and process
    count (start-up's few requests included: under 0.1 % of a run's)."""
    rates: Figures = {s: {p: [] for p in procs} for s in shapes}
    redis_us: Figures = {s: {p: [] for p in procs} for s in shapes}
    requests: Figures = {s: {p: [] for p in procs} for s in shapes}
    with private_redis() as server:
        client = server.client()
        for round_ in range(rounds):
            for shape in shapes:
                for count in procs:
                    before = redis_info(client)
                    rates[shape][count].append(rate(server.url, shape, count, jobs))
                    cost = redis_cost(before, redis_info(client), count * jobs)
                    redis_us[shape][count].append(cost["redis_cpu_us_per_job"])  # type: ignore[arg-type]
                    requests[shape][count].append(cost["round_trips_per_job"])  # type: ignore[arg-type]
                    print(
                        f"round {round_ + 1}, {shape}, {count} process(es): "
                        f"{rates[shape][count][-1]:,.0f} jobs/s, "
                        f"Redis {redis_us[shape][count][-1]:.1f} µs and "
                        f"{requests[shape][count][-1]:.3f} requests a job",
                        flush=True,
                    )
    return rates, redis_us, requests


def _table(title: str, figures: Figures, procs: list[int], unit: str) -> None:
    print(
        f"\n| {title} | " + " | ".join(f"{p} process{'es' if p > 1 else ''}" for p in procs) + " |"
    )
    print("|---|" + "---|" * len(procs))
    for shape, by_count in figures.items():
        cells = [
            f"{statistics.median(v):{unit}} ({min(v):{unit}}–{max(v):{unit}})"
            for v in by_count.values()
        ]
        print(f"| {shape} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    parser.add_argument("--procs", nargs="+", type=int, default=[1, 2, 4])
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per process per run")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rates, redis_us, _ = measure(args.shapes, args.procs, args.jobs, args.rounds)
    _table(f"jobs/s, median of {args.rounds} (range)", rates, args.procs, ",.0f")
    _table("Redis CPU µs per job", redis_us, args.procs, ".1f")


if __name__ == "__main__":
    main()
