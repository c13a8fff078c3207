"""Helpers for tests that step a WorkerProcess by hand on a real Redis (test_prefetch.py,
test_batching.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

from shared.engine.scripts import Scripts
from workerd.worker import WorkerProcess


def run_until(worker: WorkerProcess, until: Callable[[], bool], seconds: float = 10) -> None:
    """Step `worker` until `until()` holds; fail past `seconds`."""
    deadline = time.monotonic() + seconds
    while not until():
        assert time.monotonic() < deadline, f"worker ran {worker.jobs_done} jobs"
        worker.step()


def job_hash(scripts: Scripts, job_id: str) -> dict[bytes, bytes]:
    """Return a job's hash in the default queue, as Redis holds it."""
    return scripts.redis.hgetall(scripts.q("default").job(job_id))


def assert_each_completed_once(scripts: Scripts, ids: list[str]) -> None:
    """Assert every job completed on its first attempt, no recovery counted."""
    for job_id in ids:
        job = job_hash(scripts, job_id)
        assert (job[b"status"], job[b"attempts"], job.get(b"recoveries", b"0")) == (
            b"completed",
            b"1",
            b"0",
        ), job_id
