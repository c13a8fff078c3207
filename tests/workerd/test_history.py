"""A job's history as a real workerd writes it: worker, scheduler and supervisor each sign theirs.

Real processes on the private Redis: ``python -m workerd`` with its worker, scheduler and
supervisor; the test only enqueues (as the API would) and reads the history field back.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

import pytest

import workerd.demo  # noqa: F401 (registers the demo handlers)
from shared.engine import history
from shared.model.jobs import JobState
from shared.settings.config import Settings
from tests.fakes import IdleSlot
from tests.support.workerd import Workerd
from tests.workerd.conftest import Engine
from workerd.worker import WorkerProcess


def kept(engine: Engine, job_id: str) -> list[tuple[str, str, int | None, str | None]]:
    found = history.read(engine.redis, engine.keys, job_id, engine.keys.queue)
    assert found is not None and found.dropped == 0
    return [(e.event, e.actor, e.attempt, e.error) for e in found.entries]


@pytest.mark.slow
def test_each_process_signs_the_transitions_it_makes(
    start_workerd: Callable[..., Workerd], engine: Engine
) -> None:
    start_workerd(WORKER_COUNT="2", TASK_MAX_RECOVERIES="1")
    jobs = {
        "ok": engine.enqueue("demo.noop"),
        "fails": engine.enqueue("demo.fail", {"error": "disk full"}, max_retries=2),
        "times out": engine.enqueue("demo.sleep", {"seconds": 30}, timeout=0.5, max_retries=1),
        "crashes": engine.enqueue("demo.crash", max_retries=1),
    }
    done = engine.wait_all(list(jobs.values()), [JobState.COMPLETED, JobState.DEAD], timeout=30)

    assert done[jobs["ok"]].status is JobState.COMPLETED
    assert kept(engine, jobs["ok"]) == [
        ("enqueued", "api", 0, None),
        ("claimed", "worker", 1, None),
        ("completed", "worker", 1, None),
    ]
    assert kept(engine, jobs["fails"]) == [
        ("enqueued", "api", 0, None),
        ("claimed", "worker", 1, None),
        ("retrying", "worker", 1, "RuntimeError"),
        ("promoted", "scheduler", 1, None),
        ("claimed", "worker", 2, None),
        ("dead", "worker", 2, "RuntimeError"),
    ]
    assert kept(engine, jobs["times out"])[-1] == ("dead", "supervisor", 1, "Timeout")
    # A worker that dies is the supervisor's to report; past the cap (1) the job is dead.
    assert kept(engine, jobs["crashes"]) == [
        ("enqueued", "api", 0, None),
        ("claimed", "worker", 1, None),
        ("recovered", "supervisor", 1, None),
        ("claimed", "worker", 1, None),
        ("dead", "supervisor", 1, "WorkerLost"),
    ]
    found = history.read(engine.redis, engine.keys, jobs["ok"], engine.keys.queue)
    assert found is not None
    claim = found.entries[1]
    assert claim.worker is not None and history.host_of(claim.worker) == socket.gethostname()
    # Every entry is on Redis's clock, in order, within the job's life.
    job = done[jobs["ok"]]
    times = [entry.at_ms for entry in found.entries]
    assert times == sorted(times) and times[0] == job.created_at
    assert times[-1] == job.finished_at


@pytest.mark.slow
def test_a_delayed_job_waits_its_delay_on_redis_clock_then_is_promoted_and_run(
    start_workerd: Callable[..., Workerd], engine: Engine
) -> None:
    start_workerd(WORKER_COUNT="1")
    job_id = engine.enqueue("demo.noop", delay="700ms")

    waiting = engine.job(job_id)
    assert waiting.status is JobState.SCHEDULED
    assert waiting.scheduled_at == waiting.created_at + 700
    done = engine.wait_for(job_id, JobState.COMPLETED, timeout=15)

    assert [e[:2] for e in kept(engine, job_id)] == [
        ("scheduled", "api"),
        ("promoted", "scheduler"),
        ("claimed", "worker"),
        ("completed", "worker"),
    ]
    found = history.read(engine.redis, engine.keys, job_id, engine.keys.queue)
    assert found is not None
    # Every time here is Redis's: promoted at or after the due time, never before.
    assert found.entries[1].at_ms >= waiting.scheduled_at
    assert done.started_at is not None and done.started_at >= waiting.scheduled_at


def test_a_stopping_worker_hands_back_the_job_it_claimed_and_says_so(engine: Engine) -> None:
    """Stepped by hand: completing the first job claims the second, which it will not run."""
    first, second = engine.enqueue("demo.noop"), engine.enqueue("demo.noop")
    engine.scripts.load()
    worker = WorkerProcess(Settings.from_env({}), engine.scripts, IdleSlot(), "w1", os.getppid())
    worker.step()  # claims the first, runs it, and its completion claims the second
    assert worker.next_job is not None and worker.next_job.id == second

    worker.stopping = True
    assert worker.run() == 0  # stops at once, handing the second job back

    assert engine.job(second).status is JobState.PENDING
    assert [e[:2] for e in kept(engine, first)][-1] == ("completed", "worker")
    assert kept(engine, second) == [
        ("enqueued", "api", 0, None),
        ("claimed", "worker", 1, None),
        ("released", "worker", 1, None),
    ]
