"""claim.lua: pop the best pending job and start it in one step."""

from __future__ import annotations

import pytest
import redis

from shared.engine.engine_types import Code
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState
from tests.engine.conftest import (
    J1,
    J2,
    J3,
    J4,
    J5,
    J6,
    POLICY,
    T0,
    K,
    assert_ttl,
    changed,
    claim,
    enqueue,
    fail_to_retrying,
    job,
    raw_script,
    snapshot,
    start,
)


def test_claim_takes_higher_priority_first(scripts: Scripts) -> None:
    priorities = {J1: 0, J2: 10, J3: -5, J4: 2**31, J5: -(2**31), J6: 2**31 - 1}
    for jid, priority in priorities.items():
        enqueue(scripts, jid, priority=priority)

    order = [scripts.claim("w1", now_ms=T0).id for _ in priorities]

    assert order == [J4, J6, J2, J1, J3, J5]


def test_claim_is_fifo_among_equal_priorities_by_redis_sequence_not_client_clock(
    scripts: Scripts,
) -> None:
    # Enqueued J3, J1, J2 from clients whose clocks run backwards: arrival order still wins.
    enqueue(scripts, J3, now=T0 + 2)
    enqueue(scripts, J1, now=T0 + 1)
    enqueue(scripts, J2, now=T0)
    enqueue(scripts, J4, now=T0, priority=1)

    order = [scripts.claim("w1", now_ms=T0 + 10).id for _ in range(4)]

    assert order == [J4, J3, J1, J2]


def test_claim_starts_the_job_in_one_step_and_touches_exactly_its_keys(
    r: redis.Redis, scripts: Scripts
) -> None:
    enqueue(scripts, J1, priority=3)
    now = T0 + 100
    before = snapshot(r)

    claimed = scripts.claim("worker-a", now_ms=now)

    after = snapshot(r)
    last_claim = K.last_claim("worker-a")
    assert changed(before, after) == {
        K.job(J1),
        K.pending,
        K.pending_since,
        K.processing,
        last_claim,
    }
    assert K.pending not in after and K.pending_since not in after
    assert after[K.processing] == [(J1, now + POLICY.lease_ms)]
    assert after[K.job(J1)] == before[K.job(J1)] | {
        "status": "processing",
        "attempts": 1,
        "token": 1,
        "started_at": now,
        "updated_at": now,
        "history": "qa0|0\ncw100|1|worker-a",  # enqueued by the api, claimed by a worker
        "worker_id": "worker-a",
    }
    assert str(after[last_claim]).endswith(f"|{J1}")
    assert_ttl(r, last_claim, POLICY.lease_ms)
    assert claimed == job(r, J1)
    assert claimed.status is JobState.PROCESSING


def test_claim_on_an_empty_queue_returns_none_and_changes_nothing(
    r: redis.Redis, scripts: Scripts
) -> None:
    enqueue(scripts, J1, scheduled_at="2030-01-01T00:00:00Z")  # scheduled: not claimable
    before = snapshot(r)

    assert scripts.claim("w1", now_ms=T0) is None

    assert changed(before, snapshot(r)) == set()


def test_a_claim_that_finds_nothing_clears_the_wake_hints(r: redis.Redis, scripts: Scripts) -> None:
    # Two hints, one job: the first claim takes the job, the second finds nothing and empties
    # the list, so no third idle worker wakes for a job that is already gone.
    enqueue(scripts, J1)
    r.lpush(K.wake, "1")
    assert r.llen(K.wake) == 2
    claim(scripts, J1, worker="w1")
    assert r.llen(K.wake) == 2  # a claim that found a job leaves the hints to the others
    before = snapshot(r)

    assert scripts.claim("w2", now_ms=T0) is None

    assert changed(before, snapshot(r)) == {K.wake}
    assert r.exists(K.wake) == 0


def test_a_complete_that_claims_nothing_clears_the_wake_hints(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1).token
    r.lpush(K.wake, "1", "1")

    result = scripts.complete(J1, token, claim_next_for="w1", now_ms=T0)

    assert result.code is Code.DONE and result.next_job is None
    assert r.exists(K.wake) == 0


def test_claim_gives_every_execution_a_fresh_token(r: redis.Redis, scripts: Scripts) -> None:
    first = fail_to_retrying(scripts, J1)
    scripts.promote(now_ms=T0 + POLICY.retry_base_ms)

    second = claim(scripts, J1, worker="w2", now=T0 + POLICY.retry_base_ms)

    assert first.token == 1
    assert (second.token, second.attempts, second.worker_id) == (2, 2, "w2")


def test_repeated_claim_with_the_same_request_id_returns_the_same_job(
    r: redis.Redis, scripts: Scripts
) -> None:
    enqueue(scripts, J1)
    enqueue(scripts, J2)
    script = raw_script(r, "claim")
    keys = [K.pending, K.pending_since, K.processing, K.last_claim("w1"), K.wake, K.paused]
    keys += [K.limits, K.running, K.held, K.buckets, K.gates, K.held_order]
    args = [K.job_prefix, "w1", POLICY.lease_ms, "req-1", T0, "", POLICY.wake_cap]

    first = script(keys=keys, args=args)
    before = snapshot(r)
    second = script(keys=keys, args=args)

    assert first[0] == Code.DONE
    assert first == second
    assert changed(before, snapshot(r)) == set()
    assert job(r, J1).attempts == 1
    assert job(r, J2).status is JobState.PENDING
    # A new request id is a new claim.
    third = script(keys=keys, args=[*args[:3], "req-2", *args[4:]])
    assert third[1] == J2.encode()  # the claim reply follows the code, the job's id first


def test_claim_drops_an_entry_whose_hash_is_gone_and_takes_the_next(
    r: redis.Redis, scripts: Scripts
) -> None:
    enqueue(scripts, J1)
    enqueue(scripts, J2)
    r.delete(K.job(J1))

    claimed = scripts.claim("w1", now_ms=T0)

    assert claimed is not None and claimed.id == J2
    assert r.zcard(K.pending) == 0
    assert r.zcard(K.pending_since) == 0


@pytest.mark.parametrize("status", ["canceled", "scheduled"])
def test_claim_never_starts_a_job_that_is_not_pending(
    r: redis.Redis, scripts: Scripts, status: str
) -> None:
    # An index entry left behind for a job in another state (an operator's edit) is dropped.
    enqueue(scripts, J1)
    r.hset(K.job(J1), "status", status)

    assert scripts.claim("w1", now_ms=T0) is None
    assert job(r, J1).status == status
    assert r.zcard(K.processing) == 0
