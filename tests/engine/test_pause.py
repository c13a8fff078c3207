"""pause_queue.lua, resume_queue.lua, and what a pause means to the other scripts.

A paused queue takes jobs in (enqueue, promote, recover) and gives none out (claim, the claim
part of complete), on a real Redis; its counts (queue_stats.lua) say it is paused and what it
completed and failed in the last minute.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from shared.engine.engine_types import Code, QueuePause, QueuePaused
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState, format_ms
from tests.engine.conftest import (
    J1,
    J2,
    J3,
    J4,
    POLICY,
    T0,
    K,
    changed,
    claim,
    enqueue,
    job,
    raw_script,
    snapshot,
    start,
)

OTHER = K.for_queue("other")


def test_pause_sets_the_flag_with_its_time_and_touches_nothing_else(
    r: redis.Redis, scripts: Scripts
) -> None:
    enqueue(scripts, J1)
    before = snapshot(r)

    result = scripts.pause_queue("default", now_ms=T0 + 5)

    after = snapshot(r)
    assert result == QueuePause(since_ms=T0 + 5, changed=True)
    assert changed(before, after) == {K.paused}
    assert after[K.paused] == T0 + 5
    assert K.paused not in after.expiring  # a pause lasts until a resume


def test_pausing_a_paused_queue_keeps_its_first_time(r: redis.Redis, scripts: Scripts) -> None:
    scripts.pause_queue("default", now_ms=T0)
    before = snapshot(r)

    again = scripts.pause_queue("default", now_ms=T0 + 1_000)

    assert again == QueuePause(since_ms=T0, changed=False)
    assert changed(before, snapshot(r)) == set()


def test_a_claim_from_a_paused_queue_takes_nothing(r: redis.Redis, scripts: Scripts) -> None:
    enqueue(scripts, J1)
    scripts.pause_queue("default", now_ms=T0)
    before = snapshot(r)

    with pytest.raises(QueuePaused) as raised:
        scripts.claim("w1", now_ms=T0)

    assert raised.value.queue == "default"
    assert changed(before, snapshot(r)) == set()  # not even the wake list is cleared
    assert job(r, J1).status is JobState.PENDING


def test_the_claim_script_answers_paused(r: redis.Redis, scripts: Scripts) -> None:
    enqueue(scripts, J1)
    scripts.pause_queue("default", now_ms=T0)
    keys = [K.pending, K.pending_since, K.processing, K.last_claim("w1"), K.wake, K.paused]
    keys += [K.limits, K.running, K.held, K.buckets, K.gates, K.held_order]

    reply = raw_script(r, "claim")(keys=keys, args=[K.job_prefix, "w1", 1_000, "req", T0])

    assert reply == [Code.PAUSED]


def test_a_repeated_claim_still_gets_the_job_its_first_call_claimed_before_the_pause(
    r: redis.Redis, scripts: Scripts, pin_request_id: Callable[[str], None]
) -> None:
    enqueue(scripts, J1)
    enqueue(scripts, J2)
    first = scripts.claim("w1", request_id="lost-reply", now_ms=T0)
    scripts.pause_queue("default", now_ms=T0)

    again = scripts.claim("w1", request_id="lost-reply", now_ms=T0)

    assert first is not None and again is not None and again.id == first.id == J1
    assert job(r, J2).status is JobState.PENDING


def test_complete_on_a_paused_queue_completes_and_claims_nothing(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1).token
    enqueue(scripts, J2)
    scripts.pause_queue("default", now_ms=T0)
    before = snapshot(r)

    ack = scripts.complete(J1, token, claim_next_for="w1", now_ms=T0 + 10)

    after = snapshot(r)
    assert (ack.code, ack.next_job, ack.paused) == (Code.DONE, None, True)
    assert changed(before, after) == {K.job(J1), K.processing, K.completed}
    assert job(r, J1).status is JobState.COMPLETED
    assert job(r, J2).status is JobState.PENDING


def test_complete_without_a_claim_does_not_mention_the_pause(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1).token
    scripts.pause_queue("default", now_ms=T0)

    ack = scripts.complete(J1, token, now_ms=T0)

    assert (ack.code, ack.paused) == (Code.DONE, False)


def test_a_paused_queue_still_takes_new_jobs_and_wakes_nobody_new(
    r: redis.Redis, scripts: Scripts
) -> None:
    scripts.pause_queue("default", now_ms=T0)

    enqueue(scripts, J1)

    assert job(r, J1).status is JobState.PENDING
    assert r.zcard(K.pending) == 1
    assert r.llen(K.wake) == 1  # the hint waits for the resume (workers do not listen)


def test_a_paused_queue_still_gets_its_due_and_recovered_jobs(
    r: redis.Redis, scripts: Scripts
) -> None:
    enqueue(scripts, J1, scheduled_at=format_ms(T0 + 1_000))
    start(scripts, J2)
    scripts.pause_queue("default", now_ms=T0)

    promoted = scripts.promote(now_ms=T0 + 1_000)
    recovered = scripts.recover(now_ms=T0 + POLICY.lease_ms + 1)

    assert (promoted.scheduled, recovered.requeued) == ([J1], [J2])
    assert {job(r, J1).status, job(r, J2).status} == {JobState.PENDING}


def test_a_pause_is_one_queues_alone(r: redis.Redis, scripts: Scripts) -> None:
    enqueue(scripts, J1, queue="other")
    enqueue(scripts, J2)
    scripts.pause_queue("default", now_ms=T0)

    claimed = scripts.claim("w1", queue="other", now_ms=T0)

    assert claimed is not None and claimed.id == J1
    assert r.exists(OTHER.paused) == 0


def test_resume_lets_claims_in_and_wakes_a_worker_per_pending_job(
    r: redis.Redis, scripts: Scripts
) -> None:
    scripts.pause_queue("default", now_ms=T0)
    for jid in (J1, J2, J3):
        enqueue(scripts, jid)
    r.delete(K.wake)  # the hints were taken by workers that then found the queue paused
    before = snapshot(r)

    assert scripts.resume_queue("default") is True

    after = snapshot(r)
    assert changed(before, after) == {K.paused, K.wake}
    assert after[K.wake] == [1, 1, 1]
    claim(scripts, J1)


def test_resume_tops_the_wake_list_up_to_the_cap_only(r: redis.Redis, scripts: Scripts) -> None:
    scripts.pause_queue("default", now_ms=T0)
    for jid in (J1, J2, J3, J4):  # one more than the cap (3)
        enqueue(scripts, jid)
    r.delete(K.wake)
    r.lpush(K.wake, "1")

    scripts.resume_queue("default")

    assert r.llen(K.wake) == POLICY.wake_cap


def test_resuming_a_queue_that_is_not_paused_changes_nothing(
    r: redis.Redis, scripts: Scripts
) -> None:
    enqueue(scripts, J1)
    r.delete(K.wake)
    before = snapshot(r)

    assert scripts.resume_queue("default") is False

    assert changed(before, snapshot(r)) == set()


# --- what /queues reads: paused, completed and failed in the last minute --------------------


def test_stats_say_which_queue_is_paused_and_since_when(r: redis.Redis, scripts: Scripts) -> None:
    scripts.pause_queue("other", now_ms=T0)

    counts, _ = scripts.stats(["default", "other"], now_ms=T0 + 1)

    assert counts.by_queue["other"].paused and counts.by_queue["other"].paused_since_ms == T0
    assert not counts.by_queue["default"].paused
    assert not counts.paused  # the sum of queues is never paused


def test_stats_count_completions_of_the_last_minute_by_finish_time(
    r: redis.Redis, scripts: Scripts
) -> None:
    for jid, finished in ((J1, T0), (J2, T0 + 1), (J3, T0 + 60_000)):
        token = start(scripts, jid, now=finished).token
        scripts.complete(jid, token, now_ms=finished)

    counts, _ = scripts.stats(["default"], now_ms=T0 + 60_000)

    # (now - 60 s, now]: J1 finished exactly a minute ago and is out.
    assert counts.by_queue["default"].completed_last_minute == 2
    assert counts.completed_last_minute == 2


def test_stats_count_every_failed_execution_of_the_last_60_seconds(
    r: redis.Redis, scripts: Scripts
) -> None:
    def fail(jid: str, at: int, queue: str = "default", **fields: object) -> Code:
        enqueue(scripts, jid, now=at, queue=queue, **fields)
        claimed = scripts.claim("w1", queue=queue, now_ms=at)
        assert claimed is not None and claimed.id == jid
        return scripts.fail(jid, claimed.token, "E: x", queue=queue, now_ms=at).code

    assert fail(J1, T0 - 60_000) is Code.RETRYING  # second T0/1000 - 60: out of the window
    assert fail(J2, T0 - 59_000) is Code.RETRYING
    assert fail(J3, T0, max_retries=1) is Code.DEAD
    assert fail(J4, T0 + 999, queue="other") is Code.RETRYING

    counts, _ = scripts.stats(["default", "other"], now_ms=T0 + 999)

    assert counts.by_queue["default"].failed_last_minute == 2  # a retry and a death
    assert counts.by_queue["other"].failed_last_minute == 1
    assert counts.failed_last_minute == 3


def test_a_failure_repeated_after_a_lost_reply_counts_once(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1).token
    scripts.fail(J1, token, "E: x", now_ms=T0)

    scripts.fail(J1, token, "E: x", now_ms=T0)

    assert r.hgetall(K.failures) == {str(T0 // 1000).encode(): b"1"}


def test_trim_forgets_failure_counts_past_the_minute_once_it_holds_more_than_64(
    r: redis.Redis, scripts: Scripts
) -> None:
    now_s = T0 // 1000
    r.hset(K.failures, mapping={str(now_s - age): 1 for age in range(64)})
    scripts.trim(now_ms=T0)
    assert r.hlen(K.failures) == 64  # not over the threshold: one HLEN, nothing deleted

    r.hset(K.failures, mapping={str(now_s - age): 1 for age in range(64, 200)})
    scripts.trim(now_ms=T0)

    kept = sorted(int(second) for second in r.hkeys(K.failures))
    assert kept == list(range(now_s - 59, now_s + 1))
