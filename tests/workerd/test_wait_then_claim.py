"""An idle worker on one queue sends its claim behind its BLPOP (WorkerProcess._wait_then_claim):
stepped by hand on the real Redis, with Redis's command statistics saying what each step cost.

The job its wait claimed runs at the next step without a claim of its own, and without the
claim ahead that a backlog's job gets; a stop meanwhile hands it back uncounted; a reply lost
after the claim landed is repeated, not claimed twice. The quiet fence around the wait is
test_quiet_fence.py's.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import workerd.demo  # noqa: F401  (registers the demo.noop handler the jobs use)
from shared.engine.queries import get_job
from shared.engine.scripts import Scripts
from shared.engine.scripts.job_scripts import PendingClaim
from shared.model.jobs import Job, JobState, validate_enqueue
from tests.support.own_redis_server import own_redis_server  # noqa: F401  # counts: no stray reader
from tests.support.redis_server import RedisServer
from tests.support.tools import commands_caused
from tests.workerd.stepping import stepped_worker
from workerd.claim_plan import ClaimTimings
from workerd.worker import WorkerProcess

TIMINGS = ClaimTimings(wake_timeout=1 / 16)  # a wait without a hint returns soon
QUEUE = "default"


class Harness:
    def __init__(self, scripts: Scripts, worker: WorkerProcess) -> None:
        self.scripts, self.worker, self.redis = scripts, worker, scripts.redis

    def enqueue(self) -> str:
        job_id = str(uuid.uuid4())
        self.scripts.enqueue(validate_enqueue({"type": "demo.noop"}), job_id)
        return job_id

    def job(self, job_id: str) -> Job:
        job = get_job(self.redis, self.scripts.keys, job_id, [QUEUE])
        assert job is not None
        return job

    def commands(self, action: Callable[[], object]) -> Counter[str]:
        """Run `action`; return the Redis commands it caused, by name (a script's own too)."""
        return commands_caused(self.redis, action)

    def idle(self) -> None:
        """Step until the worker waits with nothing claimed (its first claim found nothing)."""
        self.worker.step()
        assert self.worker.next_job is None and not self.worker.planner.claim_now


def make_harness(redis_server: RedisServer, **env: str) -> Iterator[Harness]:
    scripts, worker, _ = stepped_worker(redis_server.url, TIMINGS, **env)
    yield Harness(scripts, worker)
    scripts.redis.close()


@pytest.fixture(params=["off", "on"], ids=["prefetch-off", "prefetch-on"])
def harness(
    request: pytest.FixtureRequest, r: redis.Redis, redis_server: RedisServer
) -> Iterator[Harness]:
    yield from make_harness(redis_server, WORKER_PREFETCH=request.param)


def test_the_job_a_wait_claimed_runs_next_with_no_claim_of_its_own(harness: Harness) -> None:
    harness.enqueue()
    harness.worker.step()  # runs it: its type is known to be short (what a claim ahead needs)
    harness.idle()
    job_id = harness.enqueue()  # its hint ends the next wait at once

    waited = harness.commands(harness.worker.step)

    # The wait and the claim behind it (the rest are the claim's own, inside the script).
    assert (waited["blpop"], waited["evalsha"]) == (1, 1), waited
    assert harness.job(job_id).status is JobState.PROCESSING
    held = harness.worker.next_job
    assert held is not None and held.id == job_id and harness.worker.next_job_woke

    ran = harness.commands(harness.worker.step)

    # Only its completion, which asks for the next job: no claim first, and (prefetch on)
    # no claim sent ahead, since a job fed from idle means no backlog.
    assert (ran["blpop"], ran["evalsha"]) == (0, 1), ran
    done = harness.job(job_id)
    assert done.status is JobState.COMPLETED and done.attempts == 1


def test_a_stop_after_the_wait_claimed_hands_the_job_back_uncounted(harness: Harness) -> None:
    harness.idle()
    job_id = harness.enqueue()
    harness.worker.step()
    assert harness.job(job_id).status is JobState.PROCESSING
    harness.worker.stopping = True  # SIGTERM while the wait was under way

    assert harness.worker.run() == 0

    job = harness.job(job_id)
    assert job.status is JobState.PENDING and (job.attempts, job.recoveries) == (0, 0)


def lose_claim_replies(monkeypatch: pytest.MonkeyPatch, times: int) -> list[str]:
    """Make the first `times` claim replies raise as lost, after the claim ran in Redis (the
    wait's, read through PendingClaim, and a repeat's, through Scripts.claim); return the ids
    of the jobs those claims got."""
    lost: list[str] = []

    def losing(read: Callable[..., Any]) -> Callable[..., Any]:
        def lose(*args: Any, **kwargs: Any) -> Any:
            got = read(*args, **kwargs)
            if len(lost) < times:
                lost.append(got.id if got is not None else "")
                raise redis.ConnectionError("reply lost")
            return got

        return lose

    monkeypatch.setattr(PendingClaim, "result", losing(PendingClaim.result))
    monkeypatch.setattr(Scripts, "claim", losing(Scripts.claim))
    return lost


def two_jobs_for_an_idle_worker(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, *, losses: int
) -> tuple[str, str, list[str]]:
    """Idle the worker, enqueue two jobs (the first's hint ends its next wait) and lose the
    next `losses` claim replies; return both ids and lose_claim_replies's list."""
    harness.idle()
    first, second = harness.enqueue(), harness.enqueue()
    return first, second, lose_claim_replies(monkeypatch, losses)


def test_a_reply_lost_after_the_claim_landed_is_repeated_at_once_not_claimed_twice(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id, second, lost = two_jobs_for_an_idle_worker(harness, monkeypatch, losses=1)

    harness.worker.step()  # the wait claims; its reply is lost; the repeat gets the same job

    assert lost == [job_id]
    held = harness.worker.next_job
    assert held is not None and held.id == job_id and not harness.worker.planner.claim_retry
    assert harness.job(second).status is JobState.PENDING
    harness.worker.step()  # runs it, and its completion claims the second
    done = harness.job(job_id)
    assert done.status is JobState.COMPLETED and done.attempts == 1
    after = harness.worker.next_job
    assert after is not None and after.id == second and harness.job(second).attempts == 1


def test_a_claim_whose_repeat_fails_too_is_repeated_by_the_next_claim(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id, second, lost = two_jobs_for_an_idle_worker(harness, monkeypatch, losses=2)

    harness.worker.step()  # both replies lost (an outage): the step backs off

    assert lost == [job_id, job_id]  # the repeat took no second job
    assert harness.worker.next_job is None and harness.worker.planner.claim_now
    assert harness.job(second).status is JobState.PENDING
    harness.worker.step()  # the next claim repeats that request id first, and runs its job
    done = harness.job(job_id)
    assert done.status is JobState.COMPLETED and done.attempts == 1
