"""Helpers for tests that step a WorkerProcess by hand on a real Redis (test_prefetch.py,
test_batching.py, test_worker_pause.py, test_wait_then_claim.py)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest

from shared.connect.redis_conn import connect
from shared.engine.engine_types import Policy
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.settings.config import Settings
from tests.fakes import FakeClock, IdleSlot
from workerd.claim_plan import ClaimTimings
from workerd.worker import WorkerProcess


def stepped_worker(
    redis_url: str,
    timings: ClaimTimings,
    *,
    quiet: Callable[[bool], bool] | None = None,
    **env: str,
) -> tuple[Scripts, WorkerProcess, FakeClock]:
    """Return a worker "w1" on `redis_url` to step by hand, its Scripts (loaded; the caller
    closes their connection) and its clock: a FakeClock whose sleeps take no time. Its slot is
    an IdleSlot, its lease 5 s unless `env` (its settings) says otherwise."""
    settings = Settings.from_env({"REDIS_URL": redis_url, "TASK_VISIBILITY_TIMEOUT": "5s", **env})
    scripts = Scripts(
        connect(settings, role="worker"), Keys(settings.namespace), Policy.from_settings(settings)
    )
    scripts.load()
    clock = FakeClock()
    worker = WorkerProcess(
        settings,
        scripts,
        IdleSlot(),
        "w1",
        os.getppid(),
        quiet=quiet,
        clock=clock,
        sleep=clock.sleep,
        timings=timings,
    )
    return scripts, worker, clock


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


def too_old_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str, int]]:
    """Return (job id, release, more) of each claim_too_old line logged."""
    return [
        (rec.job_id, rec.release, rec.more)
        for rec in caplog.records
        if rec.getMessage() == "claim_too_old"
    ]
