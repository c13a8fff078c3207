"""The Go original's benchmark table ("Task 12" in its README), reproduced for TaskForge's engine.

The Go version of TaskForge measured 48 jobs (16 for retry-then-DLQ, 32 for scheduled promotion).
Here every workload runs at that size and at 10,000 jobs, against a private redis-server,
through the engine calls workers and the gateway make (shared.engine.scripts), no-op jobs:

- concurrent enqueue: PROCESSES producer processes share the jobs, one engine call per job;
- concurrent priority claims: jobs of priorities 0..9 pre-filled, PROCESSES processes claim
  until the queue is empty (claim only); each process checks it saw priorities never rise;
- retry then DLQ: every job fails each execution (max_retries 3 → three executions, two
  retries, then dead); the retry backoff is skipped by promoting with a clock an hour ahead,
  so the figure is the engine's cost, not the configured wait; one process;
- scheduled promotion: jobs scheduled 1 s ahead; once due, time the promote calls until all
  are claimable ("promotion"), then claim + complete each ("through completion"); one process.

Worker scaling (1/4/8 workerd workers) comes from bench.workers. Run:
``.venv/bin/python -m bench.peers.task12 --json out.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import redis

from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import format_ms, validate_enqueue
from tests.support.redis_server import private_redis

PROCESSES = 4
CHILD_TIMEOUT = 300.0


def in_processes(work: Callable[[int], None], processes: int) -> float:
    """Fork `processes` children running work(index); return the wall time they took."""
    read_fd, write_fd = os.pipe()
    children = []
    for index in range(processes):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(write_fd)
                os.read(read_fd, 1)
                work(index)
                code = 0
            finally:
                os._exit(code)
        children.append(pid)
    os.close(read_fd)
    started = time.perf_counter()
    os.write(write_fd, b"x" * processes)
    os.close(write_fd)
    deadline = time.monotonic() + CHILD_TIMEOUT
    failed = False
    for pid in children:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                failed |= os.waitstatus_to_exitcode(status) != 0
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
            time.sleep(0.001)
    elapsed = time.perf_counter() - started
    if failed:
        raise RuntimeError("a benchmark child failed")
    return elapsed


def figure(jobs: int, seconds: float) -> dict[str, float]:
    """Return the Go table's two columns: jobs/s and average time per job (ns)."""
    return {"jobs": jobs, "jobs_per_s": jobs / seconds, "ns_per_job": seconds / jobs * 1e9}


def fresh(url: str) -> tuple[redis.Redis, Scripts]:
    client = redis.Redis.from_url(url)
    client.flushall()
    scripts = Scripts(client)
    scripts.load()
    return client, scripts


def concurrent_enqueue(url: str, jobs: int) -> dict[str, float]:
    client, _ = fresh(url)
    request = validate_enqueue({"type": "demo.noop", "payload": {}})

    def work(index: int) -> None:
        scripts = Scripts(redis.Redis.from_url(url))
        share = jobs // PROCESSES + (1 if index < jobs % PROCESSES else 0)
        for _ in range(share):
            scripts.enqueue(request, str(uuid.uuid4()))

    seconds = in_processes(work, PROCESSES)
    if client.zcard(Keys().pending) != jobs:
        raise RuntimeError("concurrent enqueue lost jobs")
    return figure(jobs, seconds)


def concurrent_claims(url: str, jobs: int) -> dict[str, float]:
    client, scripts = fresh(url)
    for start in range(0, jobs, 1000):
        batch = []
        for i in range(start, min(jobs, start + 1000)):
            request = validate_enqueue({"type": "demo.noop", "priority": i % 10, "payload": {}})
            batch.append((request, str(uuid.uuid4())))
        scripts.enqueue_many(batch)

    def work(index: int) -> None:
        own = Scripts(redis.Redis.from_url(url))
        last = None
        while (job := own.claim(f"bench-claim-{index}")) is not None:
            if last is not None and job.priority > last:
                raise RuntimeError("a claim returned a higher priority after a lower one")
            last = job.priority

    seconds = in_processes(work, PROCESSES)
    if client.zcard(Keys().pending) != 0:
        raise RuntimeError("claims left jobs pending")
    return figure(jobs, seconds)


def retry_then_dlq(url: str, jobs: int) -> dict[str, float]:
    client, scripts = fresh(url)
    request = validate_enqueue({"type": "demo.noop", "max_retries": 3, "payload": {}})
    for start in range(0, jobs, 1000):
        scripts.enqueue_many([(request, str(uuid.uuid4())) for _ in range(min(1000, jobs - start))])
    started = time.perf_counter()
    while client.zcard(Keys().dead) < jobs:
        while (job := scripts.claim("bench-retry")) is not None:
            scripts.fail(job.id, job.token, "RuntimeError: bench")
        ahead = int(time.time() * 1000) + 3_600_000
        while scripts.promote(now_ms=ahead).retrying:
            pass
        if time.perf_counter() - started > CHILD_TIMEOUT:
            raise RuntimeError("retry-then-DLQ did not finish")
    return figure(jobs, time.perf_counter() - started)


def scheduled_promotion(url: str, jobs: int) -> dict[str, object]:
    client, scripts = fresh(url)
    seconds, micros = client.time()
    due_ms = seconds * 1000 + micros // 1000 + 1000
    request = validate_enqueue(
        {"type": "demo.noop", "scheduled_at": format_ms(due_ms), "payload": {}}
    )
    for start in range(0, jobs, 1000):
        scripts.enqueue_many([(request, str(uuid.uuid4())) for _ in range(min(1000, jobs - start))])
    while True:
        seconds, micros = client.time()
        if seconds * 1000 + micros // 1000 > due_ms:
            break
        time.sleep(0.01)
    started = time.perf_counter()
    while client.zcard(Keys().scheduled):
        scripts.promote()
    promoted = time.perf_counter() - started
    if client.zcard(Keys().pending) != jobs:
        raise RuntimeError("promotion lost jobs")
    while (job := scripts.claim("bench-sched")) is not None:
        scripts.complete(job.id, job.token, "null")
    total = time.perf_counter() - started
    return {"promotion": figure(jobs, promoted), "through_completion": figure(jobs, total)}


def run(sizes: dict[str, list[int]]) -> dict[str, dict[str, object]]:
    """Run every workload at each of its sizes; return {workload: {size: figures}}."""
    workloads = {
        "concurrent_enqueue": concurrent_enqueue,
        "concurrent_priority_claims": concurrent_claims,
        "retry_then_dlq": retry_then_dlq,
        "scheduled_promotion": scheduled_promotion,
    }
    out: dict[str, dict[str, object]] = {}
    with private_redis() as server:
        url = server.url
        for name, work in workloads.items():
            out[name] = {str(n): work(url, n) for n in sizes[name]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sizes = {
        "concurrent_enqueue": [48, args.jobs],
        "concurrent_priority_claims": [48, args.jobs],
        "retry_then_dlq": [16, args.jobs],
        "scheduled_promotion": [32, args.jobs],
    }
    results = {"processes": PROCESSES, "results": run(sizes)}
    text = json.dumps(results, indent=2)
    if args.json:
        args.json.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
