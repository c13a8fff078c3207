"""complete.lua: record success, fenced by the token; optionally claim the next job."""

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
    changed,
    enqueue,
    job,
    snapshot,
    start,
)

# Nothing reads them once a job is done (complete.lua): its id is in its key.
DROPPED_WHEN_COMPLETED = {"id", "seq", "worker_id"}


def test_complete_records_the_result_and_touches_exactly_its_keys(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1).token
    now = T0 + 500
    before = snapshot(r)

    result = scripts.complete(J1, token, '{"ok":true}', now_ms=now)

    after = snapshot(r)
    assert result == AckResult(Code.DONE)
    assert changed(before, after) == {K.job(J1), K.processing, K.completed}
    assert K.processing not in after
    assert after[K.completed] == [(J1, now)]
    kept = {k: v for k, v in before[K.job(J1)].items() if k not in DROPPED_WHEN_COMPLETED}
    assert after[K.job(J1)] == kept | {
        "status": "completed",
        "result": '{"ok":true}',
        "finished_at": now,
        "updated_at": now,
        "history": "qa0|0\ncw0|1|w1\ndw500",  # completed: attempt and worker are the claim's
    }
    # No TTL: trim.lua bounds completed jobs by count and age.
    assert r.pttl(K.job(J1)) == -1
    assert job(r, J1).to_json()["result"] == {"ok": True}


def test_a_completed_job_reads_as_before_without_the_fields_it_drops(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1).token
    old_style = job(r, J1)  # every field still stored: what the previous version left
    scripts.complete(J1, token, '{"ok":true}', now_ms=T0 + 500)
    r.hset(K.job(J1), "seq", 1)  # a hash written by the previous version keeps its extras
    legacy = job(r, J1)
    r.hdel(K.job(J1), "seq")

    doc = job(r, J1).to_json()

    assert doc["id"] == J1 and doc == legacy.to_json()
    assert doc.keys() == old_style.to_json().keys() | {"result", "finished_at"}


def test_complete_without_a_result_stores_json_null(r: redis.Redis, scripts: Scripts) -> None:
    token = start(scripts, J1).token

    scripts.complete(J1, token, now_ms=T0)

    assert r.hget(K.job(J1), "result") == b"null"
    assert job(r, J1).to_json()["result"] is None


def test_complete_with_a_stale_token_changes_nothing_and_says_so(
    r: redis.Redis, scripts: Scripts
) -> None:
    old = start(scripts, J1).token
    scripts.recover(now_ms=T0 + POLICY.lease_ms + 1)
    scripts.claim("w2", now_ms=T0 + POLICY.lease_ms + 2)
    before = snapshot(r)

    result = scripts.complete(J1, old, "1", now_ms=T0 + 20_000)

    assert result == AckResult(Code.STALE_TOKEN, "processing")
    assert changed(before, snapshot(r)) == set()


def test_complete_with_a_stale_token_after_recovery_reports_pending(
    r: redis.Redis, scripts: Scripts
) -> None:
    old = start(scripts, J1).token
    scripts.recover(now_ms=T0 + POLICY.lease_ms + 1)
    before = snapshot(r)

    assert scripts.complete(J1, old, now_ms=T0 + 20_000) == AckResult(Code.STALE_TOKEN, "pending")
    assert changed(before, snapshot(r)) == set()


def test_repeated_complete_with_the_same_token_answers_done_and_changes_nothing(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1).token
    scripts.complete(J1, token, '"first"', now_ms=T0 + 1)
    before = snapshot(r)

    again = scripts.complete(J1, token, '"second"', now_ms=T0 + 2)

    assert again == AckResult(Code.DONE)
    assert changed(before, snapshot(r)) == set()
    assert job(r, J1).finished_at == T0 + 1


def test_complete_of_a_missing_job_is_not_found(r: redis.Redis, scripts: Scripts) -> None:
    assert scripts.complete(J1, 1, now_ms=T0) == AckResult(Code.NOT_FOUND)
    assert snapshot(r) == {}


def test_complete_of_a_job_that_is_not_running_is_refused(r: redis.Redis, scripts: Scripts) -> None:
    enqueue(scripts, J1)  # token 0: never claimed
    before = snapshot(r)

    assert scripts.complete(J1, 0, now_ms=T0) == AckResult(Code.STALE_TOKEN, "pending")
    assert changed(before, snapshot(r)) == set()


def test_complete_claims_the_workers_next_job_in_the_same_step(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1).token
    enqueue(scripts, J2)
    now = T0 + 100
    before = snapshot(r)

    result = scripts.complete(J1, token, claim_next_for="w1", now_ms=now)

    after = snapshot(r)
    assert result.code is Code.DONE
    assert result.next_job == job(r, J2)
    assert (result.next_job.status, result.next_job.attempts) == (JobState.PROCESSING, 1)
    assert changed(before, after) == {
        K.job(J1),
        K.job(J2),
        K.processing,
        K.completed,
        K.pending,
        K.pending_since,
    }
    assert after[K.processing] == [(J2, now + POLICY.lease_ms)]
    assert after[K.completed] == [(J1, now)]


def test_complete_with_claim_and_nothing_pending_returns_no_next_job(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1).token

    result = scripts.complete(J1, token, claim_next_for="w1", now_ms=T0)

    assert result == AckResult(Code.DONE)
    assert job(r, J1).status is JobState.COMPLETED


def test_refused_complete_claims_nothing(r: redis.Redis, scripts: Scripts) -> None:
    token = start(scripts, J1).token
    enqueue(scripts, J2)
    before = snapshot(r)

    result = scripts.complete(J1, token + 1, claim_next_for="w1", now_ms=T0)

    assert result == AckResult(Code.STALE_TOKEN, "processing")
    assert changed(before, snapshot(r)) == set()


def test_repeated_complete_with_claim_returns_the_same_next_job(
    r: redis.Redis, scripts: Scripts, pin_request_id: Callable[[str], None]
) -> None:
    token = start(scripts, J1).token
    enqueue(scripts, J2)
    enqueue(scripts, J3)
    pin_request_id("req-1")
    first = scripts.complete(J1, token, claim_next_for="w1", now_ms=T0 + 1)
    before = snapshot(r)

    # The reply was lost; redis-py sends the very same call (same request id) again.
    again = scripts.complete(J1, token, claim_next_for="w1", now_ms=T0 + 2)

    assert first.next_job is not None and first.next_job.id == J2
    assert again == first
    assert changed(before, snapshot(r)) == set()
    assert job(r, J3).status is JobState.PENDING
