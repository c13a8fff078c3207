"""recover.lua: jobs whose lease expired go back to pending, or dead past the recovery cap."""

from __future__ import annotations

from collections.abc import Callable

import redis

from shared.engine.engine_types import AckResult, Code, RecoverResult
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState
from tests.engine.conftest import (
    J1,
    J2,
    J3,
    POLICY,
    T0,
    K,
    assert_ttl,
    changed,
    claim,
    enqueue,
    job,
    pending_member,
    snapshot,
    start,
)

LEASE_END = T0 + POLICY.lease_ms


def test_recover_requeues_an_expired_lease_and_gives_its_attempt_back(
    r: redis.Redis, scripts: Scripts, pin_request_id: Callable[[str], None]
) -> None:
    start(scripts, J1, priority=2)
    now = LEASE_END + 1
    pin_request_id("pinned")
    before = snapshot(r)

    result = scripts.recover(now_ms=now)

    after = snapshot(r)
    assert result == RecoverResult(requeued=[J1], dead=[])
    assert (result.requeued_types, result.dead_types) == (["t"], [])
    # Same seq: no new sequence number is drawn.
    assert changed(before, after) == {
        K.reply("pinned"),
        K.job(J1),
        K.processing,
        K.pending,
        K.pending_since,
        K.wake,
    }
    assert K.processing not in after
    assert after[K.pending] == [(pending_member(1, J1), -2)]
    # Back in its place, it has been waiting since it first became claimable.
    assert after[K.pending_since] == [(J1, before[K.job(J1)]["eligible_at"])]
    assert after[K.wake] == [1, 1]
    assert after[K.job(J1)] == before[K.job(J1)] | {
        "status": "pending",
        "attempts": 0,  # the lost execution is given back: it was not a failure
        "recoveries": 1,
        "token": 2,
        "updated_at": now,
        "history": "qa0|0\ncw0|1|w1\nls10001",  # recovered by the scheduler
    }


def test_recover_leaves_a_lease_that_ends_exactly_now(r: redis.Redis, scripts: Scripts) -> None:
    start(scripts, J1)
    before = snapshot(r)

    assert scripts.recover(now_ms=LEASE_END) == RecoverResult([], [])
    assert changed(before, snapshot(r)) == set()


def test_recover_leaves_a_renewed_lease(r: redis.Redis, scripts: Scripts) -> None:
    token = start(scripts, J1).token
    scripts.renew([(J1, token)], now_ms=LEASE_END - 1)

    assert scripts.recover(now_ms=LEASE_END + 1) == RecoverResult([], [])
    assert job(r, J1).status is JobState.PROCESSING


def test_recovered_job_returns_to_its_place_in_line(r: redis.Redis, scripts: Scripts) -> None:
    enqueue(scripts, J1)
    enqueue(scripts, J2)
    enqueue(scripts, J3)
    claim(scripts, J1)

    scripts.recover(now_ms=LEASE_END + 1)

    assert [scripts.claim("w2", now_ms=LEASE_END + 2).id for _ in range(3)] == [J1, J2, J3]


def test_recover_fences_off_the_lost_worker(r: redis.Redis, scripts: Scripts) -> None:
    lost = start(scripts, J1).token
    scripts.recover(now_ms=LEASE_END + 1)

    assert scripts.complete(J1, lost, now_ms=LEASE_END + 2) == AckResult(
        Code.STALE_TOKEN, "pending"
    )


def test_recover_past_the_cap_is_dead_with_an_error_that_says_why(
    r: redis.Redis, scripts: Scripts, pin_request_id: Callable[[str], None]
) -> None:
    # Cap 2: the first two losses requeue, the third is a poison pill.
    now = T0
    enqueue(scripts, J1)
    for _ in range(POLICY.max_recoveries):
        claim(scripts, J1, now=now)
        now += POLICY.lease_ms + 1
        assert scripts.recover(now_ms=now).requeued == [J1]
    claim(scripts, J1, now=now)
    now += POLICY.lease_ms + 1
    wake_before = r.llen(K.wake)
    pin_request_id("pinned")
    before = snapshot(r)

    result = scripts.recover(now_ms=now)

    after = snapshot(r)
    assert result == RecoverResult(requeued=[], dead=[J1])
    assert (result.requeued_types, result.dead_types) == ([], ["t"])
    assert changed(before, after) == {K.reply("pinned"), K.job(J1), K.processing, K.dead}
    assert after[K.dead] == [(J1, now)]
    assert r.llen(K.wake) == wake_before  # dead is not claimable: no hint
    dead = after[K.job(J1)]
    assert dead["status"] == "dead"
    assert dead["recoveries"] == 3
    assert dead["last_error"].startswith("WorkerLost: worker lost 3 times (recovery cap 2)")
    assert_ttl(r, K.job(J1), POLICY.dlq_max_age_ms)


def test_a_recovered_execution_does_not_use_up_max_retries(scripts: Scripts) -> None:
    # max_retries 2 = two executions that may fail. The first run is lost (worker gone): it
    # is not a failure and must not use up an execution, so the next failure still retries.
    enqueue(scripts, J1, max_retries=2)
    claim(scripts, J1)
    scripts.recover(now_ms=LEASE_END + 1)
    token = claim(scripts, J1, now=LEASE_END + 2).token

    result = scripts.fail(J1, token, "boom", now_ms=LEASE_END + 3)

    assert result.code is Code.RETRYING
    assert result.next_retry_at == LEASE_END + 3 + POLICY.retry_base_ms


def test_recover_takes_at_most_limit_jobs_earliest_deadline_first(
    r: redis.Redis, scripts: Scripts
) -> None:
    start(scripts, J1, now=T0 + 2)
    start(scripts, J2, now=T0)
    start(scripts, J3, now=T0 + 1)

    result = scripts.recover(limit=2, now_ms=LEASE_END + 100)

    assert result.requeued == [J2, J3]
    assert snapshot(r)[K.processing] == [(J1, LEASE_END + 2)]


def test_recover_run_twice_recovers_once(r: redis.Redis, scripts: Scripts) -> None:
    start(scripts, J1)
    scripts.recover(now_ms=LEASE_END + 1)
    before = snapshot(r)

    assert scripts.recover(now_ms=LEASE_END + 1) == RecoverResult([], [])
    assert changed(before, snapshot(r)) == set()
