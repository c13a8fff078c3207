"""Routing: a host without a handler for a type never takes those jobs from hosts that have one.

Three layers: the routing decision alone (a fake registry and clock); a worker process's
claims stepped by hand in this process on the private Redis, with registry records written as
a supervisor writes them; and two real workerd hosts with different TASKFORGE_HANDLERS sharing
one queue (docs/QUEUES.md, "Routing").
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from typing import Any

import pytest
import redis

import tests.workerd.handlers_routing  # noqa: F401 (registers "routed" in this process)
import workerd.demo  # noqa: F401 (registers the demo handlers in this process)
from shared.engine.engine_types import NotRunnable, Policy
from shared.engine.scripts import Scripts
from shared.model.jobs import Job, JobState, validate_enqueue
from shared.settings.config import Settings
from tests.fakes import FakeClock, IdleSlot
from tests.support.tools import wait_until
from tests.support.workerd import Workerd
from tests.workerd.conftest import Engine
from tests.workerd.handlers_routing import ROUTED
from workerd.duties.fleet_heartbeat import hosts_running
from workerd.routing import LEAVE_FOR, LOG_EVERY, TAKE_FOR, Routing
from workerd.worker import WorkerProcess

# A type no process of these tests has a handler for.
NOBODY = "nobody_runs_this"
TTL_MS = 10_000


# --- the decision alone --------------------------------------------------------------------


def test_a_type_a_live_host_runs_leaves_the_queue_to_it_for_a_while(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, asked = FakeClock(), []

    def hosts(queue: str, job_type: str) -> list[str]:
        asked.append((queue, job_type))
        return ["host-b-42"]

    routing = Routing({"pdf"}, hosts, worker_id="w1", clock=clock)
    caplog.set_level(logging.INFO, logger="workerd.routing")

    assert routing.take(NotRunnable("default", "email")) is False

    assert asked == [("default", "email")]
    assert routing.leaves("default", clock.now)
    assert not routing.leaves("low", clock.now)
    assert not routing.leaves("default", clock.now + LEAVE_FOR)
    assert routing.back_at() == clock.now + LEAVE_FOR
    assert routing.runnable("default") == {"pdf"}  # nothing taken
    [line] = [r for r in caplog.records if r.getMessage() == "left_for_other_hosts"]
    assert (line.queue, line.type, line.hosts, line.worker_id) == (  # type: ignore[attr-defined]
        "default",
        "email",
        ["host-b-42"],
        "w1",
    )


def test_a_type_no_live_host_runs_is_taken_until_the_registry_is_asked_again() -> None:
    clock = FakeClock()
    routing = Routing({"pdf"}, lambda queue, job_type: [], worker_id="w1", clock=clock)

    assert routing.take(NotRunnable("default", "typo")) is True

    assert routing.runnable("default") == {"pdf", "typo"}
    assert routing.runnable("low") == {"pdf"}  # per queue: another queue may have a host
    assert not routing.leaves("default", clock.now)
    clock.now += TAKE_FOR
    assert routing.runnable("default") == {"pdf"}


def test_each_decision_is_logged_once_a_minute_per_queue_and_type(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    routing = Routing({"pdf"}, lambda queue, job_type: ["b"], worker_id="w1", clock=clock)
    caplog.set_level(logging.INFO, logger="workerd.routing")

    for _ in range(5):
        routing.take(NotRunnable("default", "email"))
        clock.now += LEAVE_FOR
    routing.take(NotRunnable("low", "email"))
    clock.now += LOG_EVERY
    routing.take(NotRunnable("default", "email"))

    lines = [(r.queue, r.type) for r in caplog.records]  # type: ignore[attr-defined]
    assert lines == [("default", "email"), ("low", "email"), ("default", "email")]


# --- one worker process, stepped here, on the private Redis ---------------------------------


@pytest.fixture
def scripts(r: redis.Redis) -> Scripts:
    engine = Scripts(r, policy=Policy(retry_base_ms=60_000))
    engine.load()
    return engine


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def worker(scripts: Scripts, clock: FakeClock) -> WorkerProcess:
    """A worker of a host running the demo and `routed` types, serving `default`, whose
    clock the test moves (its sleeps move it: no wait takes time)."""
    settings = Settings.from_env({})
    return WorkerProcess(
        settings, scripts, IdleSlot(), "w1", os.getppid(), clock=clock, sleep=clock.sleep
    )


def put(scripts: Scripts, job_type: str, job_id: str, **fields: Any) -> str:
    assert scripts.enqueue(validate_enqueue({"type": job_type, **fields}), job_id).created
    return job_id


def host(scripts: Scripts, name: str, queues: str, types: str) -> None:
    """Write a workerd host's registry record as its supervisor's heartbeat does."""
    fields = {"host": "h", "pid": 1, "workers": 1, "busy": 0, "queues": queues, "types": types}
    scripts.heartbeat(name, fields, ttl_ms=TTL_MS)


def pending(r: redis.Redis, scripts: Scripts) -> list[tuple[bytes, float]]:
    return r.zrange(scripts.keys.pending, 0, -1, withscores=True)


def test_hosts_running_names_live_hosts_that_serve_the_queue_and_run_the_type(
    r: redis.Redis, scripts: Scripts
) -> None:
    host(scripts, "a-1", "default,low", "pdf,email")
    host(scripts, "b-2", "low", "video")
    host(scripts, "c-3", "critical,default", "video,pdf")
    host(scripts, "gone-4", "default", "video")
    r.delete(scripts.keys.worker("gone-4"))  # its record expired; the zset not yet trimmed

    assert hosts_running(scripts, "default", "video") == ["c-3"]
    assert hosts_running(scripts, "low", "video") == ["b-2"]
    assert sorted(hosts_running(scripts, "default", "pdf")) == ["a-1", "c-3"]
    assert hosts_running(scripts, "default", "pd") == []  # whole names only
    assert hosts_running(scripts, "critical", "email") == []


def test_a_worker_leaves_another_hosts_job_in_place_and_the_queue_alone_meanwhile(
    r: redis.Redis, scripts: Scripts, worker: WorkerProcess, clock: FakeClock
) -> None:
    host(scripts, "video-host", "default", "video")
    put(scripts, "video", "00000000-0000-4000-8000-000000000001", priority=1)
    put(scripts, "send_email", "00000000-0000-4000-8000-000000000002")
    before = pending(r, scripts)

    assert worker._claim() is None

    assert pending(r, scripts) == before  # the video job first, the email job behind it
    assert worker.routing.leaves("default", clock.now)
    # Left alone: no claim call (the queue is out of the order) and no wait on its hints,
    # which are the video host's.
    assert worker.planner.next_order() == ()
    r.delete(scripts.keys.wake)
    r.lpush(scripts.keys.wake, "1")
    # Idle: it sleeps (a wake timeout at most each time, then claims) until the queue is due
    # for a claim again.
    left_at, timeout = clock.now, worker.planner.timings.wake_timeout
    while worker.routing.leaves("default", clock.now):
        assert worker._wait_for_work() is True
        assert len(clock.slept) <= LEAVE_FOR / timeout + 1, clock.slept
    assert all(0 < slept <= timeout for slept in clock.slept), clock.slept
    assert clock.now == pytest.approx(left_at + LEAVE_FOR)  # not a moment longer
    assert r.llen(scripts.keys.wake) == 1  # the hint is still there, for the video host


def test_a_worker_takes_a_job_no_live_host_runs_and_fails_it_as_no_handler(
    r: redis.Redis, scripts: Scripts, worker: WorkerProcess
) -> None:
    host(scripts, "video-host", "low", "video")  # runs it, but not from this queue
    job_id = put(scripts, "video", "00000000-0000-4000-8000-000000000001")

    claimed = worker._claim()
    assert isinstance(claimed, Job) and claimed.id == job_id
    worker._execute(claimed)

    failed = scripts.redis.hgetall(scripts.keys.job(job_id))
    assert failed[b"status"] == b"retrying" and failed[b"attempts"] == b"1"
    assert failed[b"last_error"].startswith(b"NoHandler: ")


def test_after_a_complete_refused_its_next_job_the_worker_leaves_the_queue(
    r: redis.Redis, scripts: Scripts, worker: WorkerProcess
) -> None:
    host(scripts, "video-host", "default", "video")
    mine = put(scripts, ROUTED, "00000000-0000-4000-8000-000000000001", priority=1)
    theirs = put(scripts, "video", "00000000-0000-4000-8000-000000000002")

    claimed = worker._claim()
    assert isinstance(claimed, Job) and claimed.id == mine
    assert worker._execute(claimed) is None  # completed; the next job is not its type
    assert worker.planner.claim_now  # the next step asks the queue again and decides there

    assert worker._claim() is None
    assert worker.routing.leaves("default", worker.routing.clock())
    assert scripts.redis.hget(scripts.keys.job(mine), "status") == b"completed"
    assert scripts.redis.hget(scripts.keys.job(theirs), "status") == b"pending"


# --- two real workerd hosts, one queue --------------------------------------------------------

ONLY_DEMO = "workerd.demo"
DEMO_AND_ROUTED = "workerd.demo,tests.workerd.handlers_routing"


def wait_for_record(engine: Engine, workerd: Workerd, job_type: str) -> None:
    """Wait until the host's registry record lists `job_type` (its first heartbeat)."""
    name = workerd.wait_for("supervisor_started")[0]["supervisor"]

    def listed() -> bool:
        types = engine.redis.hget(engine.keys.worker(name), "types")
        return types is not None and job_type in types.decode().split(",")

    wait_until(listed, 10.0, f"{name}'s registry record to list {job_type}")


@pytest.mark.slow
def test_two_hosts_every_job_of_a_type_goes_to_the_host_that_runs_it(
    start_workerd: Callable[..., Workerd], engine: Engine
) -> None:
    runs_routed = start_workerd(TASKFORGE_HANDLERS=DEMO_AND_ROUTED)
    wait_for_record(engine, runs_routed, ROUTED)
    demo_only = start_workerd(TASKFORGE_HANDLERS=ONLY_DEMO)
    wait_for_record(engine, demo_only, "send_email")
    # Each says at start what it takes, and from which queues.
    [started] = runs_routed.events("supervisor_started")
    assert started["queues"] == "default" and ROUTED in started["job_types"]
    [started] = demo_only.events("supervisor_started")
    assert "send_email" in started["job_types"] and ROUTED not in started["job_types"]
    # Keep both of the routed host's workers busy, so the demo-only host's idle workers meet a
    # routed job first in line: they must leave it (left_for_other_hosts), not fail it.
    busy = [engine.enqueue(ROUTED, {"sleep": 1.5}, priority=9) for _ in range(2)]
    for job_id in busy:
        engine.wait_for(job_id, JobState.PROCESSING)

    routed = []
    emails = []
    for _ in range(15):
        routed.append(engine.enqueue(ROUTED, {"sleep": 0.02}))
        emails.append(engine.enqueue("send_email"))
    nobody = [engine.enqueue(NOBODY, max_retries=2) for _ in range(2)]

    demo_only.wait_for("left_for_other_hosts", type=ROUTED, queue="default")
    jobs = engine.wait_all(
        [*busy, *routed, *emails, *nobody], {JobState.COMPLETED, JobState.DEAD}, timeout=60
    )

    for job_id in [*busy, *routed]:
        job = jobs[job_id]
        assert job.status is JobState.COMPLETED, (job_id, job.status, job.last_error)
        assert json.loads(job.result_json or "null") == {"supervisor": runs_routed.pid}
        assert (job.attempts, job.last_error) == (1, None)  # never claimed by the other host
    assert all(jobs[j].status is JobState.COMPLETED for j in emails)
    for job_id in nobody:
        job = jobs[job_id]
        assert job.status is JobState.DEAD
        assert job.last_error is not None and job.last_error.startswith("NoHandler: ")
    assert demo_only.events("no_host_runs_type") or runs_routed.events("no_host_runs_type")
    assert not [
        rec
        for workerd in (demo_only, runs_routed)
        for rec in workerd.events("job_retry_scheduled") + workerd.events("job_dead")
        if rec.get("type") != NOBODY
    ], "only the type nobody runs may fail"
