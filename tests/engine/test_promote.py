"""promote.lua: due scheduled and retrying jobs become pending (the one deferred path)."""

from __future__ import annotations

from collections.abc import Callable

import redis

from shared.engine.engine_types import PromoteResult
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState, format_ms
from tests.engine.conftest import (
    J1,
    J2,
    J3,
    J4,
    J5,
    POLICY,
    T0,
    K,
    changed,
    claim,
    enqueue,
    fail_to_retrying,
    job,
    pending_member,
    snapshot,
)

DUE = T0 + 60_000


def schedule(scripts: Scripts, jid: str, due: int = DUE, **fields: object) -> str:
    """Enqueue a job scheduled for `due` (enqueued at T0)."""
    return enqueue(scripts, jid, scheduled_at=format_ms(due), **fields)


def test_promote_makes_a_due_scheduled_job_pending_and_touches_exactly_its_keys(
    r: redis.Redis, scripts: Scripts, pin_request_id: Callable[[str], None]
) -> None:
    schedule(scripts, J1, priority=4)
    now = DUE + 250
    pin_request_id("pinned")
    before = snapshot(r)

    result = scripts.promote(now_ms=now)

    after = snapshot(r)
    assert result == PromoteResult([J1], [], [250], [])
    assert (result.scheduled_types, result.retrying_types) == (["t"], [])
    assert changed(before, after) == {
        K.reply("pinned"),
        K.job(J1),
        K.scheduled,
        K.pending,
        K.pending_since,
        K.seq,
        K.wake,
    }
    assert K.scheduled not in after
    assert after[K.pending] == [(pending_member(1, J1), -4)]
    assert after[K.pending_since] == [(J1, now)]
    assert after[K.wake] == [1]
    assert after[K.job(J1)] == before[K.job(J1)] | {
        "status": "pending",
        "seq": 1,
        "eligible_at": now,
        "updated_at": now,
        "history": "sa0|0\nps60250|0",  # scheduled by the api, promoted by the scheduler
    }


def test_promote_takes_a_job_due_exactly_now_and_leaves_future_ones(
    r: redis.Redis, scripts: Scripts
) -> None:
    schedule(scripts, J1, DUE)
    schedule(scripts, J2, DUE + 1)

    result = scripts.promote(now_ms=DUE)

    assert result.scheduled == [J1]
    assert snapshot(r)[K.scheduled] == [(J2, DUE + 1)]
    assert job(r, J2).status is JobState.SCHEDULED


def test_a_delayed_job_is_promoted_once_its_delay_from_enqueue_is_over_and_then_claimed(
    r: redis.Redis, scripts: Scripts
) -> None:
    enqueue(scripts, J1, now=T0, delay="1m")  # due at T0 + 60 s: DUE

    assert scripts.promote(now_ms=DUE - 1).scheduled == []
    assert job(r, J1).status is JobState.SCHEDULED
    assert scripts.claim("w1", now_ms=DUE - 1) is None

    assert scripts.promote(now_ms=DUE).scheduled == [J1]
    claimed = claim(scripts, J1, now=DUE)
    assert (claimed.scheduled_at, claimed.created_at) == (DUE, T0)
    assert job(r, J1).to_json()["scheduled_at"] == format_ms(DUE)


def test_promote_of_nothing_due_changes_nothing(r: redis.Redis, scripts: Scripts) -> None:
    schedule(scripts, J1)
    fail_to_retrying(scripts, J2)
    before = snapshot(r)

    assert scripts.promote(now_ms=T0 + 1) == PromoteResult([], [], [], [])
    assert changed(before, snapshot(r)) == set()


def test_jobs_due_at_the_same_moment_are_promoted_in_job_id_order(
    r: redis.Redis, scripts: Scripts
) -> None:
    for jid in (J3, J1, J4, J2):  # enqueued out of id order
        schedule(scripts, jid)

    result = scripts.promote(now_ms=DUE)

    assert result.scheduled == [J1, J2, J3, J4]
    assert [m for m, _ in snapshot(r)[K.pending]] == [
        pending_member(1, J1),
        pending_member(2, J2),
        pending_member(3, J3),
        pending_member(4, J4),
    ]
    assert [claim(scripts, jid, now=DUE).id for jid in (J1, J2, J3, J4)] == [J1, J2, J3, J4]


def test_once_promoted_priority_applies_as_usual(scripts: Scripts) -> None:
    schedule(scripts, J1, priority=0)
    schedule(scripts, J2, priority=9)
    enqueue(scripts, J3, priority=5)  # pending since T0, before either was due

    scripts.promote(now_ms=DUE)

    assert [scripts.claim("w1", now_ms=DUE).id for _ in range(3)] == [J2, J3, J1]


def test_promote_makes_a_due_retry_pending_and_clears_next_retry_at(
    r: redis.Redis, scripts: Scripts, pin_request_id: Callable[[str], None]
) -> None:
    failed = fail_to_retrying(scripts, J1)
    enqueue(scripts, J2)  # seq 2: the retry goes behind it, as a new arrival
    due = failed.next_retry_at
    pin_request_id("pinned")
    before = snapshot(r)

    result = scripts.promote(now_ms=due + 5)

    after = snapshot(r)
    assert result == PromoteResult([], [J1], [], [5])
    assert (result.scheduled_types, result.retrying_types) == ([], ["t"])
    assert changed(before, after) == {
        K.reply("pinned"),
        K.job(J1),
        K.retrying,
        K.pending,
        K.pending_since,
        K.seq,
        K.wake,
    }
    assert "next_retry_at" not in after[K.job(J1)]
    assert after[K.job(J1)]["status"] == "pending"
    assert after[K.pending] == [(pending_member(2, J2), 0), (pending_member(3, J1), 0)]


def test_promote_pushes_one_wake_hint_per_job_up_to_the_cap(
    r: redis.Redis, scripts: Scripts
) -> None:
    schedule(scripts, J1)
    schedule(scripts, J2)

    scripts.promote(now_ms=DUE)
    assert r.llen(K.wake) == 2

    for jid in (J3, J4, J5):
        schedule(scripts, jid, DUE + 1)
    scripts.promote(now_ms=DUE + 1)
    # 2 + 1 reaches the cap (3); the 4th hint trims to half of it, the 5th pushes one more.
    assert r.llen(K.wake) == POLICY.wake_cap // 2 + 1


def test_promote_takes_at_most_limit_jobs_per_set_earliest_first(
    r: redis.Redis, scripts: Scripts
) -> None:
    schedule(scripts, J1, DUE + 2)
    schedule(scripts, J2, DUE + 1)
    schedule(scripts, J3, DUE)

    result = scripts.promote(limit=2, now_ms=DUE + 10)

    assert result.scheduled == [J3, J2]
    assert result.scheduled_lateness_ms == [10, 9]
    assert snapshot(r)[K.scheduled] == [(J1, DUE + 2)]


def test_promote_run_twice_promotes_each_job_once(r: redis.Redis, scripts: Scripts) -> None:
    schedule(scripts, J1)
    scripts.promote(now_ms=DUE)
    before = snapshot(r)

    assert scripts.promote(now_ms=DUE) == PromoteResult([], [], [], [])
    assert changed(before, snapshot(r)) == set()


def test_promote_drops_an_entry_whose_job_is_no_longer_in_that_state(
    r: redis.Redis, scripts: Scripts, pin_request_id: Callable[[str], None]
) -> None:
    enqueue(scripts, J1)
    r.zadd(K.scheduled, {J1: DUE})  # a leftover entry (an operator's edit)
    pin_request_id("pinned")
    before = snapshot(r)

    assert scripts.promote(now_ms=DUE).scheduled == []

    after = snapshot(r)
    assert changed(before, after) == {K.reply("pinned"), K.scheduled}
    assert after[K.pending] == before[K.pending]


def test_promote_takes_due_retries_and_scheduled_jobs_in_one_due_time_order(
    scripts: Scripts,
) -> None:
    failed = fail_to_retrying(scripts, J1)  # retry due at T0 + 1 s
    schedule(scripts, J2)  # scheduled at DUE, later than the retry
    assert failed.next_retry_at is not None and failed.next_retry_at < DUE

    scripts.promote(now_ms=DUE)

    # The retry was due first, so it is first in line, whichever set it came from.
    assert [scripts.claim("w1", now_ms=DUE).id for _ in range(2)] == [J1, J2]


def test_a_repeated_promote_reports_what_the_first_call_moved_and_moves_nothing_more(
    r: redis.Redis, scripts: Scripts, pin_request_id: Callable[[str], None]
) -> None:
    schedule(scripts, J1)
    pin_request_id("lost-reply")  # a retried call resends the same request id
    first = scripts.promote(now_ms=DUE)
    before = snapshot(r)

    again = scripts.promote(now_ms=DUE + 1)

    assert again == first
    assert first.scheduled == [J1]
    assert changed(before, snapshot(r)) == set()
    assert 0 < r.pttl(K.reply("lost-reply")) <= 15_000
