"""Several real processes claim and complete thousands of jobs at once: each exactly once.

The jobs (mixed priorities) are enqueued first; then four worker processes, each a fresh
``python -c`` with its own Redis client, start together and drain the queue. Two claim and
complete in separate calls, two complete and claim the next job in one (complete's
``claim_next_for``). Every claim pops the global best entry, so the claims one worker sees
are strictly ordered by (priority, enqueue order): FIFO within each priority level.
"""

from __future__ import annotations

import json
import os
import random
import selectors
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import redis

from shared.engine.engine_types import Policy
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import EnqueueRequest
from tests.support.redis_server import RedisServer

JOBS = 5_000
WORKERS = 4
PRIORITIES = (-5, 0, 0, 3, 10)
KEYS = Keys()
# Nothing here should expire a lease: recovery is not under test.
POLICY = Policy(lease_ms=600_000)
READY_TIMEOUT = 30.0  # seconds for every worker to import and connect
DRAIN_TIMEOUT = 120.0  # seconds for the whole drain (it takes a few on a 2-core machine)
ROOT = Path(__file__).resolve().parents[2]

WORKER_CODE = """
import json, sys, time
import redis
from shared.engine.keys import Keys
from shared.engine.engine_types import Code, Policy
from shared.engine.scripts import Scripts

url, worker, mode, out, limit, timeout = sys.argv[1:7]
client = redis.Redis.from_url(url, socket_timeout=10)  # built in this process, after start
scripts = Scripts(client, Keys(), Policy(lease_ms=600_000))
client.ping()
print("ready", flush=True)
if sys.stdin.readline().strip() != "go":
    sys.exit(3)
deadline = time.monotonic() + float(timeout)
claims = []
job = scripts.claim(worker)
for _ in range(int(limit) + 1):
    if job is None:
        break
    if time.monotonic() > deadline:
        sys.exit(4)
    claims.append([job.id, job.attempts, job.token, job.worker_id])
    if mode == "fused":
        ack = scripts.complete(job.id, job.token, claim_next_for=worker)
        job = ack.next_job
    else:
        ack = scripts.complete(job.id, job.token)
        job = scripts.claim(worker)
    if ack.code is not Code.DONE:
        sys.exit(f"complete of {claims[-1][0]} answered {ack}")
else:
    sys.exit(5)  # more claims than jobs: something handed out a job twice
with open(out, "w") as f:
    json.dump(claims, f)
"""


def enqueue_jobs(client: redis.Redis) -> dict[str, tuple[int, int]]:
    """Enqueue the jobs in order; return id -> (priority, enqueue position)."""
    scripts = Scripts(client, KEYS, POLICY)
    rng = random.Random(20_260_819)
    order: dict[str, tuple[int, int]] = {}
    batch: list[tuple[EnqueueRequest, str]] = []
    for position in range(JOBS):
        priority = rng.choice(PRIORITIES)
        job_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        order[job_id] = (priority, position)
        batch.append((EnqueueRequest("work", "{}", priority=priority), job_id))
    for start in range(0, JOBS, 500):
        for result in scripts.enqueue_many(batch[start : start + 500]):
            assert result.created
    return order


@dataclass
class Worker:
    """One worker process and the files it writes."""

    name: str
    proc: subprocess.Popen[str]
    claims: Path
    errors: IO[str]

    def stderr(self) -> str:
        self.errors.flush()
        return Path(self.errors.name).read_text()


def start_workers(url: str, tmp_path: Path) -> list[Worker]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    workers = []
    for n in range(WORKERS):
        name, mode = f"w{n}", "fused" if n % 2 else "separate"
        claims = tmp_path / f"{name}.json"
        errors = open(tmp_path / f"{name}.err", "w+")  # noqa: SIM115 - closed by the test
        args = [url, name, mode, str(claims), str(JOBS), str(DRAIN_TIMEOUT)]
        proc = subprocess.Popen(
            [sys.executable, "-c", WORKER_CODE, *args],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
        workers.append(Worker(name, proc, claims, errors))
    return workers


def wait_until_ready(workers: list[Worker]) -> None:
    """Read one "ready" line from each worker, failing after READY_TIMEOUT."""
    deadline = time.monotonic() + READY_TIMEOUT
    with selectors.DefaultSelector() as selector:
        for worker in workers:
            assert worker.proc.stdout is not None
            selector.register(worker.proc.stdout, selectors.EVENT_READ, worker)
        waiting = {w.name for w in workers}
        while waiting:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"workers never became ready: {sorted(waiting)}"
            for key, _ in selector.select(remaining):
                worker = key.data
                line = worker.proc.stdout.readline()
                assert line == "ready\n", f"{worker.name} said {line!r}:\n{worker.stderr()}"
                selector.unregister(key.fileobj)
                waiting.discard(worker.name)


def run_workers(workers: list[Worker]) -> None:
    """Start every worker at once and wait for all of them to drain the queue and exit 0."""
    wait_until_ready(workers)
    for worker in workers:  # all start together: a real race for the same entries
        assert worker.proc.stdin is not None
        worker.proc.stdin.write("go\n")
        worker.proc.stdin.flush()
    deadline = time.monotonic() + DRAIN_TIMEOUT + READY_TIMEOUT
    for worker in workers:
        try:
            code = worker.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{worker.name} did not finish:\n{worker.stderr()}") from None
        assert code == 0, f"worker {worker.name} exited {code}:\n{worker.stderr()}"


def test_four_processes_claim_each_job_exactly_once(
    r: redis.Redis, redis_server: RedisServer, tmp_path: Path
) -> None:
    order = enqueue_jobs(r)
    workers = start_workers(redis_server.url, tmp_path)
    try:
        run_workers(workers)
    finally:
        for worker in workers:
            if worker.proc.poll() is None:
                worker.proc.kill()
                worker.proc.wait(timeout=10)
            for stream in (worker.proc.stdin, worker.proc.stdout, worker.errors):
                if stream is not None:
                    stream.close()

    claims = {w.name: json.loads(w.claims.read_text()) for w in workers}
    claimed = [job_id for entries in claims.values() for job_id, *_ in entries]
    assert len(claimed) == len(set(claimed)), "a job was claimed twice"
    assert set(claimed) == set(order), "a job was never claimed"
    for name, entries in claims.items():
        assert entries, f"worker {name} claimed nothing: no contention was tested"
        assert all(e[1:] == [1, 1, name] for e in entries), f"{name}: attempts/token/worker"
        places = [(-order[job_id][0], order[job_id][1]) for job_id, *_ in entries]
        assert places == sorted(places), f"{name} saw its claims out of priority/FIFO order"

    for index in (KEYS.pending, KEYS.pending_since, KEYS.processing):
        assert r.zcard(index) == 0, f"{index} is not empty"
    assert r.zcard(KEYS.completed) == JOBS
    pipe = r.pipeline(transaction=False)
    for job_id in order:
        pipe.hmget(KEYS.job(job_id), "status", "attempts")
    assert set(map(tuple, pipe.execute())) == {(b"completed", b"1")}
