"""A worker process's loop stepped by hand on the real Redis: paused queues and a quiet host.

The worker's step() claims, runs and records jobs as in production (the `demo.noop` handler);
only its shared-memory slot and the supervisor's quiet flag are stand-ins. Redis's own command
statistics say what an idle worker costs. The real-process tests (test_pause_quiet.py) prove
the same end to end.
"""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
import redis

import workerd.demo  # noqa: F401  (registers the demo.noop handler the jobs use)
from shared.config import Settings
from shared.jobs import JobState, validate_enqueue
from shared.keys import Keys
from shared.queries import get_job
from shared.redis_conn import connect
from shared.scripts import Policy, Scripts
from tests.fakes import IdleSlot
from tests.support.redis_server import RedisServer
from workerd import worker as worker_module
from workerd.worker import WorkerProcess


class Quiet:
    """The supervisor's quiet flag, as a test sets it."""

    def __init__(self) -> None:
        self.on = False

    def __call__(self, previous: bool) -> bool:
        return self.on


class Harness:
    def __init__(self, scripts: Scripts, worker: WorkerProcess, quiet: Quiet) -> None:
        self.scripts, self.worker, self.quiet = scripts, worker, quiet
        self.redis = scripts.redis

    def enqueue(self, queue: str) -> str:
        job_id = str(uuid.uuid4())
        request = validate_enqueue({"type": "demo.noop", "queue": queue})
        self.scripts.enqueue(request, job_id)
        return job_id

    def status(self, job_id: str, queue: str) -> JobState:
        job = get_job(self.redis, self.scripts.keys, job_id, [queue])
        assert job is not None
        return job.status

    def commands(self, action: Callable[[], object]) -> Counter[str]:
        """Run `action`; return the Redis commands it caused, by name (INFO itself excluded)."""
        self.redis.config_resetstat()
        action()
        stats = self.redis.info("commandstats")
        counts = Counter({k.removeprefix("cmdstat_"): v["calls"] for k, v in stats.items()})
        for own in ("info", "config|resetstat"):
            counts.pop(own, None)
        return counts


@pytest.fixture
def harness(r: redis.Redis, redis_server: RedisServer) -> Iterator[Harness]:
    settings = Settings.from_env(
        {"REDIS_URL": redis_server.url, "WORKER_QUEUES": "a,b", "TASK_VISIBILITY_TIMEOUT": "5s"}
    )
    keys, policy = Keys(settings.namespace), Policy.from_settings(settings)
    scripts = Scripts(connect(settings, role="worker"), keys, policy)
    scripts.load()
    quiet = Quiet()
    worker = WorkerProcess(settings, scripts, IdleSlot(), "w1", os.getppid(), quiet=quiet)
    yield Harness(scripts, worker, quiet)
    scripts.redis.close()


def test_a_worker_drains_the_queue_that_is_not_paused(harness: Harness) -> None:
    held = harness.enqueue("a")  # the first queue of a strict order
    other = harness.enqueue("b")
    harness.scripts.pause_queue("a")

    harness.worker.step()

    assert harness.status(other, "b") is JobState.COMPLETED
    assert harness.status(held, "a") is JobState.PENDING
    assert harness.worker.paused == {"a"}


def test_a_paused_queue_leaves_the_claim_order_and_the_wake_lists(harness: Harness) -> None:
    harness.scripts.pause_queue("a")
    harness.worker.step()  # finds a paused, b empty
    held = harness.enqueue("a")  # its wake-up hint waits in a's list
    assert harness.redis.llen(harness.scripts.q("a").wake) == 1

    counts = harness.commands(harness.worker.step)  # idle: blocks on b's wake list alone

    assert harness.redis.llen(harness.scripts.q("a").wake) == 1  # not taken
    assert harness.worker._next_order() == ("b",)
    assert counts["blpop"] == 1 and counts["evalsha"] == 0
    assert harness.status(held, "a") is JobState.PENDING


def test_a_resumed_queue_is_served_again_after_the_recheck(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_module, "PAUSED_RECHECK", 0.0)  # ask at every step
    held = harness.enqueue("a")
    harness.scripts.pause_queue("a")
    harness.worker.step()
    assert harness.worker.paused == {"a"}

    harness.scripts.resume_queue("a")
    harness.worker.step()

    assert harness.worker.paused == set()
    assert harness.status(held, "a") is JobState.COMPLETED


def test_the_recheck_asks_at_most_once_a_second(harness: Harness) -> None:
    harness.scripts.pause_queue("a")
    harness.scripts.pause_queue("b")
    harness.worker.step()  # both answer PAUSED
    assert harness.worker.paused == {"a", "b"}
    harness.worker.paused_checked = time.monotonic()

    started = time.monotonic()
    counts = harness.commands(lambda: [harness.worker.step() for _ in range(3)])
    elapsed = time.monotonic() - started

    # Nothing to block on: each step waits a second without Redis, then one EXISTS per
    # paused queue (pipelined) when the second is up; no claim, no BLPOP.
    assert set(counts) <= {"exists"}, counts
    assert counts["exists"] <= 2 * (elapsed + 1), (counts, elapsed)


def test_complete_on_a_queue_paused_meanwhile_claims_nothing_next(harness: Harness) -> None:
    first = harness.enqueue("a")
    second = harness.enqueue("a")
    job = harness.worker._claim()
    assert job is not None and job.id == first
    harness.scripts.pause_queue("a")  # while the job runs

    next_job = harness.worker._execute(job)

    assert next_job is None
    assert harness.status(first, "a") is JobState.COMPLETED
    assert harness.status(second, "a") is JobState.PENDING
    assert harness.worker.paused == {"a"}


def test_a_quiet_worker_claims_nothing_and_touches_no_redis(harness: Harness) -> None:
    waiting = harness.enqueue("a")
    harness.quiet.on = True

    counts = harness.commands(harness.worker.step)

    assert sum(counts.values()) == 0, counts  # no claim, and no BLPOP taking others' hints
    assert harness.status(waiting, "a") is JobState.PENDING
    assert harness.redis.llen(harness.scripts.q("a").wake) == 1

    harness.quiet.on = False
    harness.worker.step()
    assert harness.status(waiting, "a") is JobState.COMPLETED


def test_a_job_that_ends_while_quiet_claims_no_next_one(harness: Harness) -> None:
    first = harness.enqueue("a")
    second = harness.enqueue("a")
    job = harness.worker._claim()
    assert job is not None and job.id == first
    harness.quiet.on = True  # SIGTSTP while the job runs

    assert harness.worker._execute(job) is None

    assert harness.status(first, "a") is JobState.COMPLETED
    assert harness.status(second, "a") is JobState.PENDING


def test_a_quiet_worker_gives_back_the_next_job_it_had_claimed(harness: Harness) -> None:
    held = harness.enqueue("a")
    harness.worker.next_job = harness.worker._claim()  # as a complete-and-claim returns it
    harness.quiet.on = True

    harness.worker.step()

    assert harness.worker.next_job is None
    assert harness.status(held, "a") is JobState.PENDING
    job = get_job(harness.redis, harness.scripts.keys, held, ["a"])
    assert job is not None and (job.attempts, job.recoveries) == (0, 0)  # not held against it


def test_a_worker_quieted_while_blocked_puts_the_hint_it_took_back(harness: Harness) -> None:
    harness.enqueue("b")  # a hint in b's list, for whichever worker claims next
    harness.quiet.on = True  # quieted while the BLPOP was under way

    assert harness.worker._wait_for_work() is True

    assert harness.redis.llen(harness.scripts.q("b").wake) == 1
