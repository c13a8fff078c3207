"""cancel.lua: a job that has not started (pending, scheduled, retrying) is withdrawn."""

from __future__ import annotations

import pytest
import redis

from shared.engine.engine_types import JobNotFound, WrongState
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState, format_ms
from tests.engine.conftest import (
    FINISHED_TTL_MS,
    J1,
    J2,
    T0,
    K,
    assert_ttl,
    changed,
    enqueue,
    fail_to_retrying,
    finish,
    job,
    kill,
    pending_member,
    snapshot,
)

NOW = T0 + 500


def test_cancel_of_a_pending_job_removes_it_from_pending(r: redis.Redis, scripts: Scripts) -> None:
    enqueue(scripts, J1)
    enqueue(scripts, J2)
    before = snapshot(r)

    outcome = scripts.cancel(J1, now_ms=NOW)
    assert outcome.changed
    canceled = outcome.job

    after = snapshot(r)
    assert changed(before, after) == {K.job(J1), K.pending, K.pending_since, K.canceled}
    assert after[K.pending] == [(pending_member(2, J2), 0)]
    assert after[K.pending_since] == [(J2, T0)]
    assert after[K.canceled] == [(J1, NOW)]
    stored = after[K.job(J1)]
    assert (stored["status"], stored["finished_at"], stored["updated_at"]) == (
        "canceled",
        NOW,
        NOW,
    )
    assert "seq" not in stored
    assert_ttl(r, K.job(J1), FINISHED_TTL_MS)
    assert canceled == job(r, J1)
    assert scripts.claim("w1", now_ms=NOW).id == J2
    assert scripts.claim("w1", now_ms=NOW) is None


def test_cancel_of_a_scheduled_job_removes_it_from_scheduled(
    r: redis.Redis, scripts: Scripts
) -> None:
    due = T0 + 60_000
    enqueue(scripts, J1, scheduled_at=format_ms(due))
    before = snapshot(r)

    scripts.cancel(J1, now_ms=NOW)

    after = snapshot(r)
    assert changed(before, after) == {K.job(J1), K.scheduled, K.canceled}
    assert K.scheduled not in after
    assert after[K.job(J1)]["status"] == "canceled"
    assert after[K.job(J1)]["scheduled_at"] == due
    assert scripts.promote(now_ms=due).scheduled == []


def test_cancel_of_a_retrying_job_removes_it_from_retrying(
    r: redis.Redis, scripts: Scripts
) -> None:
    retry_at = fail_to_retrying(scripts, J1).next_retry_at
    before = snapshot(r)

    scripts.cancel(J1, now_ms=NOW)

    after = snapshot(r)
    assert changed(before, after) == {K.job(J1), K.retrying, K.canceled}
    assert K.retrying not in after
    assert "next_retry_at" not in after[K.job(J1)]
    assert after[K.job(J1)]["status"] == "canceled"
    assert scripts.promote(now_ms=retry_at).retrying == []


def test_cancel_of_a_canceled_job_succeeds_and_changes_nothing(
    r: redis.Redis, scripts: Scripts
) -> None:
    enqueue(scripts, J1)
    first = scripts.cancel(J1, now_ms=NOW)
    before = snapshot(r)

    again = scripts.cancel(J1, now_ms=NOW + 1)

    assert (first.changed, again.changed) == (True, False)  # a repeat is told apart
    assert again.job == first.job
    assert again.job.status is JobState.CANCELED
    assert changed(before, snapshot(r)) == set()


@pytest.mark.parametrize("state", ["completed", "dead"])
def test_cancel_refuses_a_job_that_finished(r: redis.Redis, scripts: Scripts, state: str) -> None:
    {"completed": finish, "dead": kill}[state](scripts, J1)
    before = snapshot(r)

    with pytest.raises(WrongState) as raised:
        scripts.cancel(J1, now_ms=NOW)

    assert raised.value.status == state
    assert changed(before, snapshot(r)) == set()


def test_cancel_of_a_missing_job_is_not_found(r: redis.Redis, scripts: Scripts) -> None:
    with pytest.raises(JobNotFound):
        scripts.cancel(J1, now_ms=NOW)
    assert snapshot(r) == {}
