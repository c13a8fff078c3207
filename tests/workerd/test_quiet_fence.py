"""Once /health says quiet, no claim by the host succeeds.

Two ways a claim used to slip through, each forced here deterministically, on the real Redis
with a worker stepped by hand on a real SlotTable (the shared memory the supervisor makes):

- a torn read: the worker read the quiet flag in the status record, which the supervisor
  rewrites every tick; a read that met a write fell back to the worker's previous reading
  (not quiet). Here the record is left mid-write, as a supervisor preempted there leaves it;
- a read just before the quiet: a worker that read "not quiet", then claimed after /health had
  said quiet. Here the supervisor quiets the host while the worker's claim call is under way.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import workerd.demo
import workerd.worker
from shared.connect.redis_conn import connect
from shared.engine.engine_types import Policy
from shared.engine.keys import Keys
from shared.engine.queries import get_job
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState, validate_enqueue
from shared.settings.config import Settings
from tests.support.redis_server import RedisServer
from workerd.slots import RECORD_SIZE, SlotTable
from workerd.worker import WorkerProcess

QUEUE = "default"


class Host:
    """A SlotTable with one worker slot, its worker, and the supervisor's side of it."""

    def __init__(self, scripts: Scripts, table: SlotTable, worker: WorkerProcess) -> None:
        self.scripts, self.table, self.worker = scripts, table, worker

    def publish(self, quiet: bool) -> None:
        """What Readiness.publish does each supervisor tick."""
        self.table.publish_status(1, True, True, quiet)

    def health_says_quiet(self) -> bool:
        """What workerd's /health answers (workerd/obs_server.py)."""
        return self.table.quiet()

    def enqueue(self) -> str:
        job_id = str(uuid.uuid4())
        self.scripts.enqueue(validate_enqueue({"type": "demo.noop", "queue": QUEUE}), job_id)
        return job_id

    def status(self, job_id: str) -> JobState:
        job = get_job(self.scripts.redis, self.scripts.keys, job_id, [QUEUE])
        assert job is not None
        return job.status

    def tear_status_record(self) -> None:
        """Leave the status record as a supervisor preempted mid-write leaves it: its sequence
        odd (every read of it retries, then gives up)."""
        index = self.table.count * RECORD_SIZE // 8
        words = memoryview(self.table._region).cast("Q")
        words[index] = words[index] | 1


@pytest.fixture
def host(r: redis.Redis, redis_server: RedisServer) -> Iterator[Host]:
    settings = Settings.from_env({"REDIS_URL": redis_server.url, "TASK_VISIBILITY_TIMEOUT": "5s"})
    scripts = Scripts(
        connect(settings, role="worker"), Keys(settings.namespace), Policy.from_settings(settings)
    )
    scripts.load()
    table = SlotTable(1)
    slot = table.slot(0)
    slot.reset(booting=True)  # as the supervisor does before it forks the worker
    # As the supervisor builds it (workerd/supervisor.py): the slot is all it is given.
    worker = WorkerProcess(settings, scripts, table.slot(0), "w1", os.getppid())
    yield Host(scripts, table, worker)
    scripts.redis.close()


def test_a_quiet_host_claims_nothing_while_its_status_record_is_mid_write(host: Host) -> None:
    host.publish(quiet=False)
    host.worker.step()  # idle: its last reading is "not quiet"
    host.publish(quiet=True)
    assert host.health_says_quiet()
    host.tear_status_record()

    waiting = host.enqueue()
    for _ in range(3):
        host.worker.step()

    assert host.status(waiting) is JobState.PENDING
    assert host.worker.quiet


def test_health_says_quiet_only_once_a_claim_under_way_has_answered(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    host.publish(quiet=False)
    seen_mid_claim: list[bool] = []
    claim = host.scripts.claim

    def quieted_mid_claim(*args: Any, **kwargs: Any) -> Any:
        # The worker read "not quiet" and its claim is on its way: the supervisor quiets now.
        host.publish(quiet=True)
        seen_mid_claim.append(host.health_says_quiet())
        return claim(*args, **kwargs)

    monkeypatch.setattr(host.scripts, "claim", quieted_mid_claim)
    host.worker.step()  # claims (nothing there), with the quiet set during its claim
    monkeypatch.setattr(host.scripts, "claim", claim)

    assert seen_mid_claim and not any(seen_mid_claim)  # not while the claim could still answer
    host.publish(quiet=True)  # the supervisor's next tick
    assert host.health_says_quiet()
    waiting = host.enqueue()
    for _ in range(3):
        host.worker.step()
    assert host.status(waiting) is JobState.PENDING


def test_a_complete_that_claims_the_next_job_holds_the_quiet_back_until_it_answers(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    host.publish(quiet=False)
    first, second = host.enqueue(), host.enqueue()
    seen_mid_complete: list[bool] = []
    complete = host.scripts.complete

    def quieted_mid_complete(*args: Any, **kwargs: Any) -> Any:
        host.publish(quiet=True)
        seen_mid_complete.append(host.health_says_quiet())
        return complete(*args, **kwargs)

    monkeypatch.setattr(host.scripts, "complete", quieted_mid_complete)
    host.worker.step()  # claims the first, runs it, completes it claiming the second
    monkeypatch.setattr(host.scripts, "complete", complete)

    assert host.status(first) is JobState.COMPLETED
    assert seen_mid_complete == [False]
    host.publish(quiet=True)
    assert host.health_says_quiet()
    later = host.enqueue()
    for _ in range(3):
        host.worker.step()
    # The second was claimed before /health said quiet; unstarted, it is handed back.
    assert host.status(second) is JobState.PENDING
    assert host.status(later) is JobState.PENDING


def test_a_resume_and_a_new_quiet_fence_again() -> None:
    table = SlotTable(2)
    fence = table.slot(1).fence
    assert fence is not None
    table.publish_status(2, True, True, quiet=True)
    assert table.quiet()
    table.publish_status(2, True, True, quiet=False)
    assert not table.quiet() and not fence.quiet()
    with fence:  # a claim under way when the host is quieted again
        table.publish_status(2, True, True, quiet=True)
        assert fence.quiet() and not table.quiet()
    table.publish_status(2, True, True, quiet=True)
    assert table.quiet()


def test_a_worker_killed_holding_its_lock_does_not_hold_the_quiet_back_after_its_respawn() -> None:
    table = SlotTable(1)
    killed = table.slot(0)
    assert killed.fence is not None
    killed.fence.__enter__()  # killed mid-claim: never released
    table.publish_status(1, True, True, quiet=True)
    assert not table.quiet()
    table.slot(0).reset(booting=True)  # the supervisor respawns it: a new lock
    table.publish_status(1, True, True, quiet=True)
    assert table.quiet()


def test_a_quiet_while_an_idle_worker_waits_settles_once_the_claim_behind_its_wait_answers(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On one queue the idle wait carries a claim (workerd.worker, _wait_then_claim): quieted
    # after the worker read "not quiet", /health must not say quiet before that claim answers.
    host.publish(quiet=False)
    host.worker.step()  # its first claim finds nothing; it waits, and is idle now
    seen_mid_wait: list[bool] = []
    woken: list[str] = []
    wait_then_claim = workerd.worker.pop_hint_then_claim

    def quieted_mid_wait(*args: Any, **kwargs: Any) -> Any:
        host.publish(quiet=True)
        seen_mid_wait.append(host.health_says_quiet())
        woken.append(host.enqueue())  # its hint ends the wait; the claim behind takes it
        return wait_then_claim(*args, **kwargs)

    monkeypatch.setattr(workerd.worker, "pop_hint_then_claim", quieted_mid_wait)
    host.worker._wait_for_work()
    monkeypatch.setattr(workerd.worker, "pop_hint_then_claim", wait_then_claim)

    assert seen_mid_wait == [False]
    assert host.status(woken[0]) is JobState.PROCESSING  # claimed before /health said quiet
    host.publish(quiet=True)
    assert host.health_says_quiet()
    host.worker.step()  # quiet: the job its wait claimed is handed back, unstarted
    assert host.status(woken[0]) is JobState.PENDING
