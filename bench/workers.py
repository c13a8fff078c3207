"""Benchmark workerd end to end: drain rate, enqueue-to-start latency, promotion lateness.

Runs the real supervisor (``python -m workerd``) against a private redis-server:

1. drain 10,000 pre-enqueued ``demo.noop`` jobs with WORKER_COUNT 1, 2 and 4 (jobs/s, measured from
   the first job's start to the last job's finish, as Redis recorded them);
2. enqueue-to-start latency with idle workers: 300 jobs, 10 ms apart, p50/p99;
3. promotion lateness: 1,000 jobs due at one moment, how late each became claimable.

Run from the repository root: ``.venv/bin/python -m bench.workers`` (``--help``).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from shared.engine.keys import Keys
from shared.engine.queries import get_job
from shared.engine.scripts import Scripts
from shared.model.jobs import format_ms, validate_enqueue
from tests.support.redis_server import private_redis
from tests.support.stats import percentile
from tests.support.tools import free_port, wait_until
from tests.support.workerd import Workerd, start_workerd, stop_all

READY_TIMEOUT = 20.0
DRAIN_TIMEOUT = 300.0
POLL = 0.05  # seconds between two ZCARDs while workers drain: little load on Redis


@contextmanager
def workerd(url: str, workers: int, log_level: str) -> Iterator[Workerd]:
    """Run `python -m workerd` until the block ends; wait for /ready first."""
    settings = {
        "REDIS_URL": url,
        "WORKER_COUNT": str(workers),
        "PORT_WORKER": str(free_port()),
        "LOG_LEVEL": log_level,
        "TASKFORGE_HANDLERS": "workerd.demo,bench.handlers",
    }
    # Its log lines are part of the cost measured, and nobody reads them; stderr is kept to
    # say why, should it not start.
    with tempfile.TemporaryDirectory(prefix="taskforge-bench-workerd-") as tmp:
        err_path = Path(tmp) / "workerd.err"
        supervisor = start_workerd(
            settings, Path(os.devnull), err_path, ready_timeout=READY_TIMEOUT
        )
        try:
            yield supervisor
        finally:
            stop_all([supervisor])


def drain_rate(url: str, jobs: int, workers: int, log_level: str) -> float:
    """Return jobs/s for `workers` processes draining `jobs` pre-enqueued demo.noop jobs."""
    client = redis.Redis.from_url(url)
    client.flushall()
    scripts = Scripts(client)
    request = validate_enqueue({"type": "demo.noop"})
    ids = [str(uuid.uuid4()) for _ in range(jobs)]
    for start in range(0, jobs, 1000):
        scripts.enqueue_many([(request, job_id) for job_id in ids[start : start + 1000]])
    with workerd(url, workers, log_level):
        wait_until(lambda: client.zcard(Keys().completed) == jobs, DRAIN_TIMEOUT, "the drain", POLL)
    return run_rate(client, ids)


def run_rate(client: redis.Redis, ids: list[str]) -> float:
    """Return jobs/s from the first job's start to the last job's finish, as Redis recorded."""
    pipe = client.pipeline(transaction=False)
    for job_id in ids:
        pipe.hmget(Keys().job(job_id), "started_at", "finished_at")
    times = pipe.execute()
    first = min(int(started) for started, _ in times)
    last = max(int(finished) for _, finished in times)
    return len(ids) / max(0.001, (last - first) / 1000)


def start_latency(url: str, count: int, log_level: str) -> list[float]:
    """Return enqueue-to-start latencies (ms) of `count` jobs sent 10 ms apart to idle workers."""
    client = redis.Redis.from_url(url)
    client.flushall()
    scripts = Scripts(client)
    request = validate_enqueue({"type": "stamp"})
    sent: dict[str, float] = {}
    with workerd(url, 2, log_level):
        for _ in range(count):
            job_id = str(uuid.uuid4())
            sent[job_id] = time.time()
            scripts.enqueue(request, job_id)
            time.sleep(0.01)
        wait_until(lambda: client.zcard(Keys().completed) == count, 30, "the latency jobs", POLL)
    latencies = []
    for job_id, at in sent.items():
        job = get_job(client, Keys(), job_id)
        assert job is not None and job.result_json is not None
        latencies.append((json.loads(job.result_json)["started"] - at) * 1000)
    return latencies


def promotion_lateness(url: str, count: int, log_level: str) -> list[int]:
    """Return how late (ms) each of `count` jobs due at one moment became claimable."""
    client = redis.Redis.from_url(url)
    client.flushall()
    scripts = Scripts(client)
    with workerd(url, 2, log_level):
        seconds, micros = client.time()
        due_ms = seconds * 1000 + micros // 1000 + 2000
        request = validate_enqueue({"type": "demo.noop", "scheduled_at": format_ms(due_ms)})
        ids = [str(uuid.uuid4()) for _ in range(count)]
        scripts.enqueue_many([(request, job_id) for job_id in ids])
        wait_until(lambda: client.zcard(Keys().completed) == count, 30, "the scheduled jobs", POLL)
    pipe = client.pipeline(transaction=False)
    for job_id in ids:
        pipe.hget(Keys().job(job_id), "eligible_at")
    return [int(eligible) - due_ms for eligible in pipe.execute()]


def main() -> None:
    """Run every workload and print the figures (and JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--log-level", default="INFO", help="INFO is the production default")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, object] = {"log_level": args.log_level}
    with private_redis() as server:
        url = server.url
        results["drain_jobs_per_s"] = {
            n: drain_rate(url, args.jobs, n, args.log_level) for n in args.workers
        }
        latency = start_latency(url, 300, args.log_level)
        results["start_latency_ms"] = {
            "p50": percentile(latency, 0.5),
            "p99": percentile(latency, 0.99),
        }
        lateness = promotion_lateness(url, 1000, args.log_level)
        results["promotion_lateness_ms"] = {
            "p50": percentile(lateness, 0.5),
            "p99": percentile(lateness, 0.99),
            "max": max(lateness),
        }
    print(f"workerd at LOG_LEVEL={args.log_level}, {os.cpu_count()} cpus")
    for workers, rate in results["drain_jobs_per_s"].items():  # type: ignore[union-attr]
        print(f"drain {args.jobs} demo.noop jobs, {workers} worker(s): {rate:,.0f} jobs/s")
    lat = results["start_latency_ms"]
    print(f"enqueue→start latency, idle workers: p50 {lat['p50']:.2f} ms, p99 {lat['p99']:.2f} ms")  # type: ignore[index]
    late = results["promotion_lateness_ms"]
    print(
        f"promotion lateness, 1,000 jobs due at once: p50 {late['p50']} ms, "  # type: ignore[index]
        f"p99 {late['p99']} ms, max {late['max']} ms"  # type: ignore[index]
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
