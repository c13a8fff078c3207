"""Two supervisors on one Redis (two hosts): schedulers that race, die, and cover for each other."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable

import pytest

from shared.model.jobs import JobState, format_ms
from tests.support.tools import wait_until
from tests.support.workerd import Workerd
from tests.workerd.conftest import Engine, Journal


def _enqueue_due_soon(engine: Engine, journal: Journal, count: int, after: float) -> list[str]:
    """Enqueue `count` scheduled jobs due 50 ms apart, each `after` seconds or more after its
    own enqueue: timed from the first, a loaded machine could enqueue a later one past its due
    time, and a job due at once is pending without a scheduler promoting it."""
    return [
        engine.enqueue(
            "journal",
            {"file": journal.file},
            scheduled_at=format_ms(int(time.time() * 1000) + int(after * 1000) + 50 * i),
        )
        for i in range(count)
    ]


def _promotions(*supervisors: Workerd) -> Counter[str]:
    return Counter(
        rec["job_id"] for workerd in supervisors for rec in workerd.events("job_promoted")
    )


@pytest.mark.slow
def test_two_schedulers_promote_each_job_once_and_one_carries_on_when_the_other_host_is_killed(
    start_workerd: Callable[..., Workerd], engine: Engine, journal: Journal
) -> None:
    # DEBUG: each promotion is logged (job_promoted), so we can count who promoted what.
    a = start_workerd(WORKER_COUNT="1", LOG_LEVEL="DEBUG")
    b = start_workerd(WORKER_COUNT="1", LOG_LEVEL="DEBUG")

    first = _enqueue_due_soon(engine, journal, 20, after=0.5)
    jobs = engine.wait_all(first, [JobState.COMPLETED, JobState.DEAD], timeout=15)
    assert {job.status for job in jobs.values()} == {JobState.COMPLETED}
    promoted = _promotions(a, b)
    assert {job_id: promoted[job_id] for job_id in first} == dict.fromkeys(first, 1)
    started = Counter(entry["id"] for entry in journal.entries("start"))
    assert {job_id: started[job_id] for job_id in first} == dict.fromkeys(first, 1)

    # A killed scheduler is respawned by its supervisor, at once.
    [killed] = a.children("scheduler")
    os.kill(killed, signal.SIGKILL)
    wait_until(lambda: a.events("child_exited", child_pid=killed), 5, "the kill to be seen")
    [exited] = a.events("child_exited", child_pid=killed)
    assert exited["cause"].startswith("killed by SIGKILL")
    wait_until(lambda: a.children("scheduler"), 5, "the killed scheduler to be respawned")
    assert a.children("scheduler") != [killed]

    # With host A gone whole (its respawned scheduler could otherwise win every race, as it
    # did in one CI run), B alone must promote every later job, each once.
    a.proc.kill()
    assert a.wait_exit(timeout=5) == -signal.SIGKILL
    a.wait_no_processes(timeout=5)
    second = _enqueue_due_soon(engine, journal, 20, after=0.3)
    jobs = engine.wait_all(second, [JobState.COMPLETED, JobState.DEAD], timeout=15)
    assert {job.status for job in jobs.values()} == {JobState.COMPLETED}
    promoted = _promotions(a, b)
    assert {job_id: promoted[job_id] for job_id in second} == dict.fromkeys(second, 1)
    by_b = {rec["job_id"] for rec in b.events("job_promoted")}
    assert set(second) <= by_b, "the surviving scheduler left later jobs to nobody"
    assert a.events("job_recovered") == b.events("job_recovered") == []


@pytest.mark.slow
def test_sigkilled_supervisor_takes_its_children_along_and_another_recovers_its_job(
    start_workerd: Callable[..., Workerd], engine: Engine, journal: Journal
) -> None:
    # Both hosts run before the job exists, and the one whose worker took it is killed at
    # once: starting the second host while the job runs could outlast the job (a loaded
    # machine), which would then finish before the kill.
    hosts = [start_workerd(WORKER_COUNT="1"), start_workerd(WORKER_COUNT="1")]
    job_id = engine.enqueue("journal", {"file": journal.file, "sleep": 1.5})
    [first] = journal.wait_for("start", job_id)
    [a] = [host for host in hosts if first["pid"] in host.children("worker")]
    [b] = [host for host in hosts if host is not a]

    a.proc.kill()
    killed_at = time.monotonic()
    assert a.wait_exit(timeout=5) == -signal.SIGKILL

    a.wait_no_processes(timeout=5)  # every child noticed and exited: none keeps the job
    job = engine.wait_for(job_id, JobState.COMPLETED, timeout=15)
    took = time.monotonic() - killed_at
    print(f"\nsupervisor SIGKILL → job completed elsewhere: {took:.2f} s")
    assert (job.attempts, job.recoveries) == (1, 1)
    [recovered] = b.events("job_recovered", job_id=job_id)
    assert recovered["reason"] == "lease expired"
    [end] = journal.entries("end", job_id)
    assert end["pid"] in b.children("worker")
    assert len(journal.entries("start", job_id)) == 2
