"""A worker process's loop stepped by hand on the real Redis: paused queues and a quiet host.

The worker's step() claims, runs and records jobs as in production (the `demo.noop` handler);
only its shared-memory slot, the supervisor's quiet flag and its clock are stand-ins (a fake
clock whose sleeps move it: no wait takes time). Redis's own command statistics say what an
idle worker costs. The real-process tests (test_pause_quiet.py) prove
the same end to end.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
import redis

import workerd.demo  # noqa: F401  (registers the demo.noop handler the jobs use)
from shared.engine.queries import get_job
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState, validate_enqueue
from tests.fakes import FakeClock
from tests.support.own_redis_server import own_redis_server  # noqa: F401  # counts: no stray reader
from tests.support.redis_server import RedisServer
from tests.support.tools import commands_caused
from tests.workerd.stepping import stepped_worker
from workerd.claim_plan import ClaimTimings
from workerd.worker import WorkerProcess

# A short BLPOP: an idle step on the real Redis returns soon (the fake clock does not move it).
# Fractions exact in binary, so the fake clock's sums land on the recheck to the bit.
TIMINGS = ClaimTimings(wake_timeout=1 / 16, paused_recheck=1 / 4)


class Quiet:
    """The supervisor's quiet flag, as a test sets it."""

    def __init__(self) -> None:
        self.on = False

    def __call__(self, previous: bool) -> bool:
        return self.on


class Harness:
    def __init__(
        self, scripts: Scripts, worker: WorkerProcess, quiet: Quiet, clock: FakeClock
    ) -> None:
        self.scripts, self.worker, self.quiet, self.clock = scripts, worker, quiet, clock
        self.planner = worker.planner
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
        """Run `action`; return the Redis commands it caused, by name (a script's own too)."""
        return commands_caused(self.redis, action)


@pytest.fixture
def harness(r: redis.Redis, redis_server: RedisServer) -> Iterator[Harness]:
    quiet = Quiet()
    scripts, worker, clock = stepped_worker(
        redis_server.url, TIMINGS, quiet=quiet, WORKER_QUEUES="a,b"
    )
    yield Harness(scripts, worker, quiet, clock)
    scripts.redis.close()


def test_a_worker_drains_the_queue_that_is_not_paused(harness: Harness) -> None:
    held = harness.enqueue("a")  # the first queue of a strict order
    other = harness.enqueue("b")
    harness.scripts.pause_queue("a")

    harness.worker.step()

    assert harness.status(other, "b") is JobState.COMPLETED
    assert harness.status(held, "a") is JobState.PENDING
    assert harness.planner.paused == {"a"}


def test_a_paused_queue_leaves_the_claim_order_and_the_wake_lists(harness: Harness) -> None:
    harness.scripts.pause_queue("a")
    harness.worker.step()  # finds a paused, b empty
    held = harness.enqueue("a")  # its wake-up hint waits in a's list
    assert harness.redis.llen(harness.scripts.q("a").wake) == 1

    # Idle: blocks on b's wake list alone, with b's claim behind the BLPOP (none from a).
    counts = harness.commands(harness.worker.step)

    assert harness.redis.llen(harness.scripts.q("a").wake) == 1  # not taken
    harness.clock.now += TIMINGS.empty_recheck  # b, found empty, is asked again; a is not
    assert harness.planner.next_order() == ("b",)
    assert counts["blpop"] == 1 and counts["evalsha"] == 1
    assert harness.status(held, "a") is JobState.PENDING


def test_a_resumed_queue_is_served_again_after_the_recheck(harness: Harness) -> None:
    held = harness.enqueue("a")
    harness.scripts.pause_queue("a")
    harness.worker.step()
    assert harness.planner.paused == {"a"}

    harness.scripts.resume_queue("a")
    harness.clock.now += TIMINGS.paused_recheck  # the recheck is due
    harness.worker.step()

    assert harness.planner.paused == set()
    assert harness.status(held, "a") is JobState.COMPLETED


def test_the_recheck_asks_at_most_once_a_second(harness: Harness) -> None:
    harness.scripts.pause_queue("a")
    harness.scripts.pause_queue("b")
    harness.worker.step()  # both answer PAUSED
    assert harness.planner.paused == {"a", "b"}

    counts = harness.commands(lambda: [harness.worker.step() for _ in range(8)])

    # Nothing to block on: each step waits a wake timeout without Redis (no claim, no BLPOP).
    # Nine waits of 1/16 s from the first PAUSED span two recheck periods of 1/4 s: two
    # rechecks, each one EXISTS per paused queue (pipelined).
    assert harness.clock.slept == [TIMINGS.wake_timeout] * 9
    assert counts == {"exists": 2 * 2}, counts


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
    assert harness.planner.paused == {"a"}


def test_a_quiet_worker_claims_nothing_and_touches_no_redis(harness: Harness) -> None:
    waiting = harness.enqueue("a")
    harness.quiet.on = True

    counts = harness.commands(harness.worker.step)

    assert sum(counts.values()) == 0, counts  # no claim, and no BLPOP taking others' hints
    assert harness.clock.slept == [TIMINGS.quiet_wait]  # reads its flag again after this
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
