"""A finished job's outcome write is bounded: one that never lands ends at the limit.

The write waits out a Redis outage past the job's own timeout (test_redis_outage.py); one
that never lands (an error that does not clear while the supervisor renews the lease) must
still end, or the worker and its job would hang for good: the watchdog kills the worker at
the write's limit, and the job meets a timed-out job's fate.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from shared.model.jobs import JobState
from tests.faults.harness import log_time
from tests.support.workerd import Workerd
from tests.workerd.conftest import HANDLERS, Engine
from tests.workerd.write_limit import WRITE_LIMIT

# The watchdog's tick and the log's timestamps: the kill comes this soon after the limit.
KILL_SLACK_S = 3.0


@pytest.mark.slow
@pytest.mark.parametrize("threads", ["1", "2"])
def test_an_outcome_that_never_lands_is_killed_at_the_write_limit(
    start_workerd: Callable[..., Workerd], engine: Engine, threads: str
) -> None:
    workerd = start_workerd(
        WORKER_COUNT="1",
        WORKER_THREADS=threads,
        TASK_VISIBILITY_TIMEOUT="30s",
        TASKFORGE_HANDLERS=f"{HANDLERS},tests.workerd.handlers_write_limit",
    )
    # Its own timeout is shorter than the limit: the write is timed by the limit, not by it.
    job_id = engine.enqueue("unwritable", {}, timeout=0.5, max_retries=1)

    job = engine.wait_for(job_id, [JobState.DEAD, JobState.COMPLETED], timeout=20)
    assert job.status is JobState.DEAD
    assert job.attempts == 1
    # The failure says the handler had finished and what timed out was its outcome's write.
    assert job.last_error is not None
    assert job.last_error.startswith("Timeout: its handler returned after ")
    assert job.last_error.endswith(
        f"but its outcome was not written within {WRITE_LIMIT:g}s; its worker was killed"
    )
    [started] = workerd.events("job_started", job_id=job_id)
    [killed] = workerd.wait_for("child_killed", job_id=job_id)
    assert killed["reason"] == "timeout"
    waited = log_time(killed) - log_time(started)
    assert WRITE_LIMIT <= waited < WRITE_LIMIT + KILL_SLACK_S, waited
    assert workerd.events("job_completed", job_id=job_id) == []
