"""release.lua: a job whose worker is known gone goes back to pending at once."""

from __future__ import annotations

from collections.abc import Callable

import redis

from shared.engine.engine_types import AckResult, Code
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


def lose(scripts: Scripts, jid: str, times: int, *, drained: bool = False) -> int:
    """Claim and release `jid` `times` times; return the time of the last release."""
    now = T0
    for _ in range(times):
        token = claim(scripts, jid, now=now).token
        now += 1
        assert scripts.release(jid, token, drained=drained, now_ms=now).code is Code.DONE
    return now


def test_release_after_a_crash_requeues_at_once_gives_the_attempt_back_and_counts_a_recovery(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1, priority=1).token
    now = T0 + 10  # long before the lease ends
    before = snapshot(r)

    result = scripts.release(J1, token, now_ms=now)

    after = snapshot(r)
    assert result == AckResult(Code.DONE)
    assert result.job_type == "t"
    assert changed(before, after) == {
        K.job(J1),
        K.processing,
        K.pending,
        K.pending_since,
        K.wake,
    }
    assert K.processing not in after
    assert after[K.pending] == [(pending_member(1, J1), -1)]
    # Back in its place, it has been waiting since it first became claimable.
    assert after[K.pending_since] == [(J1, before[K.job(J1)]["eligible_at"])]
    assert after[K.wake] == [1, 1]
    stored = after[K.job(J1)]
    assert isinstance(stored.pop("last_request"), str)
    assert stored == before[K.job(J1)] | {
        "status": "pending",
        "attempts": 0,
        "recoveries": 1,
        "token": 2,
        "updated_at": now,
        "history": "qa0|0\ncw0|1|w1\nlv10",  # recovered, told by the supervisor
    }


def test_release_after_a_drain_counts_nothing(r: redis.Redis, scripts: Scripts) -> None:
    token = start(scripts, J1).token
    before = snapshot(r)

    result = scripts.release(J1, token, drained=True, now_ms=T0 + 10)

    after = snapshot(r)
    assert result == AckResult(Code.DONE)
    stored = after[K.job(J1)]
    assert (stored["status"], stored["attempts"], stored["recoveries"]) == ("pending", 0, 0)
    assert stored["token"] == 2  # the drained worker is fenced off all the same
    assert after[K.pending] == [(pending_member(1, J1), 0)]
    assert changed(before, after) == {
        K.job(J1),
        K.processing,
        K.pending,
        K.pending_since,
        K.wake,
    }


def test_drained_releases_never_make_a_job_dead(r: redis.Redis, scripts: Scripts) -> None:
    enqueue(scripts, J1)

    lose(scripts, J1, POLICY.max_recoveries + 3, drained=True)

    stored = job(r, J1)
    assert (stored.status, stored.recoveries) == (JobState.PENDING, 0)
    # A drain is not a failure: it writes no last_error (and no traceback) at all.
    assert (stored.last_error, stored.traceback) == (None, None)


def test_a_drained_execution_does_not_use_up_max_retries(scripts: Scripts) -> None:
    # A graceful drain "counts nothing": the run it interrupted must not use up an execution.
    enqueue(scripts, J1, max_retries=2)
    now = lose(scripts, J1, 1, drained=True)
    token = claim(scripts, J1, now=now).token

    result = scripts.fail(J1, token, "boom", now_ms=now + 1)

    assert result.code is Code.RETRYING
    assert result.next_retry_at == now + 1 + POLICY.retry_base_ms


def test_a_crashed_execution_does_not_use_up_max_retries(scripts: Scripts) -> None:
    enqueue(scripts, J1, max_retries=2)
    now = lose(scripts, J1, 1)
    token = claim(scripts, J1, now=now).token

    result = scripts.fail(J1, token, "boom", now_ms=now + 1)

    assert result.code is Code.RETRYING
    assert result.next_retry_at == now + 1 + POLICY.retry_base_ms


def test_release_after_a_crash_past_the_cap_is_dead_with_an_error_that_says_why(
    r: redis.Redis, scripts: Scripts
) -> None:
    enqueue(scripts, J1)
    now = lose(scripts, J1, POLICY.max_recoveries)
    token = claim(scripts, J1, now=now).token
    before = snapshot(r)

    result = scripts.release(J1, token, now_ms=now + 1)

    after = snapshot(r)
    assert result == AckResult(Code.DEAD)
    assert result.job_type == "t"
    assert changed(before, after) == {K.job(J1), K.processing, K.dead}
    assert after[K.dead] == [(J1, now + 1)]
    stored = after[K.job(J1)]
    assert (stored["status"], stored["recoveries"]) == ("dead", POLICY.max_recoveries + 1)
    assert stored["last_error"] == (
        "WorkerLost: worker lost 3 times (recovery cap 2): the job may be killing its worker"
    )
    assert_ttl(r, K.job(J1), POLICY.dlq_max_age_ms)


def test_released_job_returns_to_its_place_in_line(scripts: Scripts) -> None:
    enqueue(scripts, J1)
    enqueue(scripts, J2)
    enqueue(scripts, J3)
    token = claim(scripts, J1).token

    scripts.release(J1, token, now_ms=T0 + 1)

    assert [scripts.claim("w2", now_ms=T0 + 2).id for _ in range(3)] == [J1, J2, J3]


def test_release_with_a_stale_token_changes_nothing_and_says_so(
    r: redis.Redis, scripts: Scripts
) -> None:
    old = start(scripts, J1).token
    scripts.recover(now_ms=T0 + POLICY.lease_ms + 1)
    claim(scripts, J1, worker="w2", now=T0 + POLICY.lease_ms + 2)
    before = snapshot(r)

    result = scripts.release(J1, old, now_ms=T0 + POLICY.lease_ms + 3)

    assert result == AckResult(Code.STALE_TOKEN, "processing")
    assert changed(before, snapshot(r)) == set()


def test_release_of_a_finished_job_changes_nothing(r: redis.Redis, scripts: Scripts) -> None:
    token = start(scripts, J1).token
    scripts.complete(J1, token, now_ms=T0 + 1)
    before = snapshot(r)

    assert scripts.release(J1, token, now_ms=T0 + 2) == AckResult(Code.STALE_TOKEN, "completed")
    assert changed(before, snapshot(r)) == set()


def test_repeated_release_with_the_same_request_id_returns_the_first_outcome(
    r: redis.Redis, scripts: Scripts, pin_request_id: Callable[[str], None]
) -> None:
    token = start(scripts, J1).token
    pin_request_id("release-1")
    first = scripts.release(J1, token, now_ms=T0 + 1)
    before = snapshot(r)

    again = scripts.release(J1, token, now_ms=T0 + 2)

    assert first == again == AckResult(Code.DONE)
    assert first.job_type == again.job_type == "t"
    assert changed(before, snapshot(r)) == set()
    assert job(r, J1).recoveries == 1


def test_repeated_release_that_made_the_job_dead_answers_dead_again(
    r: redis.Redis, scripts: Scripts, pin_request_id: Callable[[str], None]
) -> None:
    enqueue(scripts, J1)
    now = lose(scripts, J1, POLICY.max_recoveries)
    token = claim(scripts, J1, now=now).token
    pin_request_id("release-last")
    assert scripts.release(J1, token, now_ms=now + 1).code is Code.DEAD
    before = snapshot(r)

    assert scripts.release(J1, token, now_ms=now + 2) == AckResult(Code.DEAD)
    assert changed(before, snapshot(r)) == set()


def test_release_of_a_missing_job_is_not_found(r: redis.Redis, scripts: Scripts) -> None:
    assert scripts.release(J1, 1, now_ms=T0) == AckResult(Code.NOT_FOUND)
    assert snapshot(r) == {}
