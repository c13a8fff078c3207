"""The whole upgrade on real processes: v1 data made by v1's scripts, the command, then a real
workerd that runs the moved jobs to completion and keeps moving what an old gateway still
enqueues under v1."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable

import pytest
import redis

from shared.jobs import JobState, validate_enqueue
from shared.scripts import Scripts
from tests.support.redis_server import RedisServer
from tests.support.tools import ROOT
from tests.support.workerd import Workerd, scrubbed_environment
from tests.upgrade.conftest import V1K, K, job_id, v1_job_keys
from tests.upgrade.v1 import V1
from tests.workerd.conftest import Engine, engine, start_workerd  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow
RUN_TIMEOUT = 30.0


def test_moved_jobs_run_to_completion_and_later_v1_jobs_follow(
    r: redis.Redis,
    redis_server: RedisServer,
    engine: Engine,  # noqa: F811
    start_workerd: Callable[..., Workerd],  # noqa: F811
) -> None:
    old = V1(r, V1K)
    before = [job_id(n) for n in range(1, 21)]
    for jid in before:
        old.enqueue(jid, {"type": "demo.noop", "payload": {"n": jid[-2:]}})
    old.enqueue(job_id(21), {"type": "demo.noop"}, key="order-21")
    # A job an old worker held when its host died: its lease ran out a minute ago.
    old.enqueue(job_id(22), {"type": "demo.noop", "priority": 9})
    lost = old.claim("old-host", now_ms=int(time.time() * 1000) - 60_000 - old.policy.lease_ms)
    assert lost is not None and lost.job_id == job_id(22)

    moved = subprocess.run(
        [sys.executable, "-m", "shared.upgrade"],
        cwd=ROOT,
        env=scrubbed_environment() | {"REDIS_URL": redis_server.url},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert moved.returncode == 0, moved.stderr
    assert "pending 21, processing 1 (22 jobs)" in moved.stdout

    workerd = start_workerd()
    ids = [*before, job_id(21), job_id(22)]
    done = engine.wait_all(ids, {JobState.COMPLETED}, timeout=RUN_TIMEOUT)
    assert done[job_id(22)].recoveries == 1  # its lost execution counted, as v1 would have

    # An old gateway still running enqueues under v1: workerd's scheduler moves it.
    old.enqueue(job_id(23), {"type": "demo.noop"}, key="order-23")
    engine.wait_for(job_id(23), JobState.COMPLETED, timeout=RUN_TIMEOUT)
    workerd.wait_for("v1_jobs_moved", moved=1, timeout=5)

    # Retries of v1 requests get their first jobs.
    scripts = Scripts(r, K)
    for n in (21, 23):
        again = scripts.enqueue(
            validate_enqueue({"type": "demo.noop"}), job_id(90 + n), idempotency_key=f"order-{n}"
        )
        assert (again.job_id, again.created) == (job_id(n), False)
    assert v1_job_keys(r) == []
