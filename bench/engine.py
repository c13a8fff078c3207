"""Benchmark the engine's hot paths against a private redis-server.

Prints jobs/s for enqueue and for claim+complete, from 1 and 2 processes, 10,000 jobs each
(no-op jobs, production log level). Run from the repository root: ``.venv/bin/python -m bench.engine`` (``--help``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import redis

from shared.engine.engine_types import Policy
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import validate_enqueue
from tests.support.redis_server import private_redis


def run_enqueue(url: str, count: int) -> None:
    """Enqueue `count` no-op jobs through the engine call."""
    scripts = Scripts(redis.Redis.from_url(url), Keys(), Policy())
    request = validate_enqueue({"type": "demo.noop", "payload": {}})
    for _ in range(count):
        scripts.enqueue(request, str(uuid.uuid4()))


def run_claim_complete(url: str, _count: int) -> None:
    """Claim and complete jobs until none is left: two round trips per job."""
    scripts = Scripts(redis.Redis.from_url(url), Keys(), Policy())
    worker_id = f"bench-{os.getpid()}"
    while (job := scripts.claim(worker_id)) is not None:
        scripts.complete(job.id, job.token, "null")


def run_complete_claiming_next(url: str, _count: int) -> None:
    """Claim once, then complete each job and claim the next in one call, as a worker does."""
    scripts = Scripts(redis.Redis.from_url(url), Keys(), Policy())
    worker_id = f"bench-{os.getpid()}"
    job = scripts.claim(worker_id)
    while job is not None:
        job = scripts.complete(job.id, job.token, "null", claim_next_for=worker_id).next_job


def in_processes(work: Callable[[str, int], None], url: str, total: int, processes: int) -> float:
    """Fork `processes` children that share `total` jobs; return the wall time they took."""
    read_fd, write_fd = os.pipe()
    children = []
    for _ in range(processes):
        pid = os.fork()
        if pid == 0:  # child: wait for the start signal so all begin together
            os.close(write_fd)
            os.read(read_fd, 1)
            try:
                work(url, total // processes)
            finally:
                os._exit(0)
        children.append(pid)
    os.close(read_fd)
    started = time.perf_counter()
    os.write(write_fd, b"x" * processes)
    for pid in children:
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"benchmark child {pid} failed")
    os.close(write_fd)
    return time.perf_counter() - started


def measure(url: str, jobs: int, processes: int, repeat: int) -> dict[str, float]:
    """Return median jobs/s of enqueue and claim+complete over `repeat` runs."""
    client = redis.Redis.from_url(url)
    rates: dict[str, list[float]] = {"enqueue": [], "claim_complete": [], "fused": []}
    for _ in range(repeat):
        for name, drain in (
            ("claim_complete", run_claim_complete),
            ("fused", run_complete_claiming_next),
        ):
            client.flushall()
            Scripts(client).load()
            seconds = in_processes(run_enqueue, url, jobs, processes)
            if client.zcard(Keys().pending) != jobs:
                raise RuntimeError("enqueue lost jobs")
            rates["enqueue"].append(jobs / seconds)
            rates[name].append(jobs / in_processes(drain, url, jobs, processes))
            if client.zcard(Keys().completed) != jobs:
                raise RuntimeError(f"{name} did not finish every job")
    return {f"{name}_per_s": statistics.median(values) for name, values in rates.items()}


def main() -> None:
    """Run the benchmark and print a table (and JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; median shown")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    results = {}
    with private_redis() as server:
        url = server.url
        for processes in (1, 2):
            results[processes] = measure(url, args.jobs, processes, args.repeat)
    print(f"commit {commit or '?'} · {platform.platform()} · {os.cpu_count()} cpus")
    print(f"{args.jobs} no-op jobs per run, median of {args.repeat}")
    print(
        f"{'processes':>9}  {'enqueue/s':>10}  {'claim+complete/s':>16}  "
        f"{'complete+claim next (1 call)/s':>30}"
    )
    for processes, figures in results.items():
        print(
            f"{processes:>9}  {figures['enqueue_per_s']:>10,.0f}  "
            f"{figures['claim_complete_per_s']:>16,.0f}  {figures['fused_per_s']:>30,.0f}"
        )
    if args.json:
        args.json.write_text(json.dumps({"commit": commit, "results": results}, indent=2))


if __name__ == "__main__":
    main()
