"""Measure pausing and quieting on the real workerd: what idle workers cost, and how fast a
resume (or a quiet) takes effect.

Runs ``python -m workerd`` (WORKER_QUEUES=a,b, WORKER_COUNT 2) against a private redis-server:

1. Redis commands per second of each idle worker (MONITOR, by connection name) with nothing
   paused, with queue b paused, with every queue paused, and with the host quiet;
2. how long after ``resume_queue`` the paused queue's jobs are done;
3. how long after SIGTSTP, and after the API's quiet request, the host claims nothing more
   (what /health reports), and after SIGCONT / the API's resume a job is done.

Run from the repository root: ``.venv/bin/python -m bench.pause`` (``--help``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from shared.engine.keys import Keys
from shared.engine.queries import get_job
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState, validate_enqueue
from tests.support.monitor import commands_by_connection
from tests.support.redis_server import private_redis
from tests.support.tools import free_port, wait_until
from tests.support.workerd import Workerd, running_workerd

WORKERS = 2


@contextmanager
def workerd(url: str) -> Iterator[Workerd]:
    """Run `python -m workerd` serving queues a then b until the block ends."""
    settings = {
        "REDIS_URL": url,
        "WORKER_COUNT": str(WORKERS),
        "WORKER_QUEUES": "a,b",
        "PORT_WORKER": str(free_port()),
        "LOG_LEVEL": "INFO",
        "TASKFORGE_HANDLERS": "workerd.demo",
    }
    with running_workerd(settings, "taskforge-bench-pause-") as supervisor:
        yield supervisor


class Bench:
    def __init__(self, url: str, supervisor: Workerd) -> None:
        self.url = url
        self.supervisor = supervisor
        self.scripts = Scripts(redis.Redis.from_url(url), Keys())
        for queue in ("a", "b"):
            self.scripts.register_queue(queue)

    def enqueue(self, queue: str) -> str:
        job_id = str(uuid.uuid4())
        self.scripts.enqueue(validate_enqueue({"type": "demo.noop", "queue": queue}), job_id)
        return job_id

    def done(self, job_ids: list[str], queue: str) -> bool:
        keys = self.scripts.keys
        jobs = [get_job(self.scripts.redis, keys, job_id, [queue]) for job_id in job_ids]
        return all(job is not None and job.status is JobState.COMPLETED for job in jobs)

    def rate(self, seconds: float) -> dict[str, float]:
        """Return the commands per second of the busiest idle worker, by command."""
        per_worker = commands_by_connection(self.url, "taskforge-worker-", seconds)
        claim = self.scripts.transport.shas["claim"]
        busiest = max(per_worker.values(), key=lambda counts: sum(counts.values()))
        named = {k.replace(f"evalsha {claim}", "claim"): v for k, v in busiest.items()}
        return {"total": sum(named.values()) / seconds} | {k: v / seconds for k, v in named.items()}

    def quiet(self) -> bool:
        return json.loads(self.supervisor.http("/health")[2])["quiet"]

    def timed(self, act: Callable[[], object], until: Callable[[], bool]) -> float:
        """Return the seconds from `act` until `until()` holds (polled every 5 ms)."""
        started = time.monotonic()
        act()
        wait_until(until, 10, "the effect", interval=0.005)
        return time.monotonic() - started


def idle_rates(bench: Bench, seconds: float) -> dict[str, dict[str, float]]:
    rates = {"nothing paused": bench.rate(seconds)}
    bench.scripts.pause_queue("b")
    held = [bench.enqueue("b") for _ in range(WORKERS)]  # wakes each worker into PAUSED
    time.sleep(0.5)
    rates["b paused"] = bench.rate(seconds)
    bench.scripts.pause_queue("a")
    held.append(bench.enqueue("a"))
    time.sleep(0.5)
    rates["every queue paused"] = bench.rate(seconds)
    bench.scripts.resume_queue("a")
    bench.scripts.resume_queue("b")
    wait_until(lambda: bench.done(held[:-1], "b") and bench.done(held[-1:], "a"), 10, "drained")
    bench.supervisor.signal(signal.SIGTSTP)
    wait_until(bench.quiet, 5, "quiet")
    rates["host quiet"] = bench.rate(seconds)
    bench.supervisor.signal(signal.SIGCONT)
    wait_until(lambda: not bench.quiet(), 5, "resumed")
    return rates


def one_round(bench: Bench, name: str) -> dict[str, float]:
    """Time each resume and quiet once."""
    took = {}
    bench.scripts.pause_queue("b")
    held = [bench.enqueue("b") for _ in range(WORKERS)]
    time.sleep(1.5)  # the workers ask b and drop it; their next recheck is anywhere in 1 s
    took["queue resume"] = bench.timed(
        lambda: bench.scripts.resume_queue("b"), lambda: bench.done(held, "b")
    )
    took["SIGTSTP"] = bench.timed(lambda: bench.supervisor.signal(signal.SIGTSTP), bench.quiet)
    first = [bench.enqueue("a")]
    took["SIGCONT"] = bench.timed(
        lambda: bench.supervisor.signal(signal.SIGCONT), lambda: bench.done(first, "a")
    )
    took["API quiet"] = bench.timed(lambda: bench.scripts.quiet_host(name, True), bench.quiet)
    time.sleep(0.5)  # past the heartbeat that reports it back: the resume waits a whole one
    second = [bench.enqueue("a")]
    took["API resume"] = bench.timed(
        lambda: bench.scripts.quiet_host(name, False), lambda: bench.done(second, "a")
    )
    return took


def latencies(bench: Bench, rounds: int) -> dict[str, dict[str, float]]:
    name = bench.scripts.redis.zrange(bench.scripts.keys.workers, 0, -1)[0].decode()
    found: dict[str, list[float]] = {}
    for _ in range(rounds):
        for what, seconds in one_round(bench, name).items():
            found.setdefault(what, []).append(seconds)
    return {
        what: {"median_s": statistics.median(values), "max_s": max(values)}
        for what, values in found.items()
    }


def main() -> None:
    """Run both measurements and print (and optionally save) the results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="MONITOR window per phase")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each latency")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    with private_redis() as server, workerd(server.url) as supervisor:
        bench = Bench(server.url, supervisor)
        time.sleep(2.0)  # past start-up: the workers are blocked on their wake lists
        results = {
            "idle_commands_per_s_per_worker": idle_rates(bench, args.seconds),
            "latency": latencies(bench, args.rounds),
            "cpus": os.cpu_count(),
        }
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
