"""enqueue.lua: a new job is pending (or scheduled), once per job id and per idempotency key."""

from __future__ import annotations

import pytest
import redis

from shared.engine.engine_types import EnqueueResult, IdempotencyConflict, JobIdConflict
from shared.engine.queries import get_job
from shared.engine.scripts import Scripts
from shared.model.job_ids import new_client_id
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
    assert_ttl,
    changed,
    claim,
    enqueue,
    job,
    pending_member,
    request,
    snapshot,
)


def test_enqueue_makes_a_pending_job_and_touches_exactly_its_keys(
    r: redis.Redis, scripts: Scripts
) -> None:
    before = snapshot(r)

    result = scripts.enqueue(request(payload={"a": [1, 2]}, priority=5), J1, now_ms=T0)

    after = snapshot(r)
    assert result == EnqueueResult(J1, JobState.PENDING, created=True, created_at_ms=T0)
    assert changed(before, after) == {K.job(J1), K.pending, K.pending_since, K.seq, K.wake}
    assert after[K.pending] == [(pending_member(1, J1), -5)]
    assert after[K.pending_since] == [(J1, T0)]
    assert after[K.seq] == 1
    assert after[K.wake] == [1]
    assert after[K.job(J1)] == {
        "id": J1,
        "type": "t",
        "payload": '{"a":[1,2]}',
        "priority": 5,
        "max_retries": 3,
        "attempts": 0,
        "recoveries": 0,
        "token": 0,
        "status": "pending",
        "seq": 1,
        "created_at": T0,
        "updated_at": T0,
        "eligible_at": T0,
        "history": "qa0|0",  # enqueued by the api at created_at, attempt 0
    }
    assert r.pttl(K.job(J1)) == -1


def test_enqueue_with_future_scheduled_at_waits_in_scheduled_without_a_wake_hint(
    r: redis.Redis, scripts: Scripts
) -> None:
    due = T0 + 5_000
    before = snapshot(r)

    result = scripts.enqueue(request(scheduled_at=format_ms(due)), J1, now_ms=T0)

    after = snapshot(r)
    assert result == EnqueueResult(J1, JobState.SCHEDULED, created=True, created_at_ms=T0)
    # ... and its queue in the scheduler's due index (the second call, Scripts.note_due).
    # The FIFO counter moves for a scheduled job too: its 1 tells the queue's first job since
    # its keys were made or deleted (the producer lists the queue again: docs/QUEUES.md).
    assert changed(before, after) == {K.job(J1), K.scheduled, K.due, K.seq}
    assert result.first_in_queue
    assert after[K.scheduled] == [(J1, due)]
    assert after[K.due] == [("default", due)]
    stored = after[K.job(J1)]
    assert stored["status"] == "scheduled"
    assert stored["scheduled_at"] == due
    assert "seq" not in stored


@pytest.mark.parametrize("offset_ms", [0, -1, -86_400_000], ids=["now", "1ms-ago", "a-day-ago"])
def test_enqueue_with_scheduled_at_now_or_past_is_pending_at_once(
    r: redis.Redis, scripts: Scripts, offset_ms: int
) -> None:
    due = T0 + offset_ms
    before = snapshot(r)

    result = scripts.enqueue(request(scheduled_at=format_ms(due)), J1, now_ms=T0)

    after = snapshot(r)
    assert result.status is JobState.PENDING
    assert changed(before, after) == {K.job(J1), K.pending, K.pending_since, K.seq, K.wake}
    assert after[K.job(J1)]["status"] == "pending"
    assert after[K.job(J1)]["scheduled_at"] == due
    assert after[K.pending] == [(pending_member(1, J1), 0)]
    assert after[K.wake] == [1]


def test_enqueue_repeated_with_the_same_job_id_creates_nothing_new(
    r: redis.Redis, scripts: Scripts
) -> None:
    scripts.enqueue(request(), J1, now_ms=T0)
    before = snapshot(r)

    # redis-py resends the same call when its reply was lost: same id, same answer, no effect.
    again = scripts.enqueue(request(), J1, now_ms=T0 + 10)

    assert again == EnqueueResult(J1, JobState.PENDING, created=True, created_at_ms=T0)
    assert changed(before, snapshot(r)) == set()


def test_enqueue_with_idempotency_key_remembers_the_job_for_the_key_ttl(
    r: redis.Redis, scripts: Scripts
) -> None:
    before = snapshot(r)

    scripts.enqueue(request(), J1, idempotency_key="order-7", now_ms=T0)

    after = snapshot(r)
    idem = K.idempotency("order-7")
    assert changed(before, after) == {
        K.job(J1),
        K.pending,
        K.pending_since,
        K.seq,
        K.wake,
        idem,
    }
    assert after[idem]["job_id"] == J1
    assert after[idem]["queue"] == "default"
    assert len(after[idem]["digest"]) == 64
    assert_ttl(r, idem, POLICY.idempotency_ttl_ms)


def test_enqueue_same_idempotency_key_and_request_returns_the_first_job(
    r: redis.Redis, scripts: Scripts
) -> None:
    scripts.enqueue(request(payload={"n": 1}), J1, idempotency_key="k", now_ms=T0)
    before = snapshot(r)

    # Same meaning, different spelling: key order in the payload does not matter.
    second = scripts.enqueue(request(payload={"n": 1}), J2, idempotency_key="k", now_ms=T0 + 1)

    assert second == EnqueueResult(J1, JobState.PENDING, created=False, created_at_ms=T0)
    assert changed(before, snapshot(r)) == set()


def test_enqueue_duplicate_reports_the_first_jobs_current_status(
    r: redis.Redis, scripts: Scripts
) -> None:
    scripts.enqueue(request(), J1, idempotency_key="k", now_ms=T0)
    claim(scripts, J1, now=T0 + 1)

    second = scripts.enqueue(request(), J2, idempotency_key="k", now_ms=T0 + 2)

    assert second == EnqueueResult(J1, JobState.PROCESSING, created=False, created_at_ms=T0)
    assert get_job(r, K, J2) is None


def test_enqueue_same_idempotency_key_with_a_different_request_conflicts(
    r: redis.Redis, scripts: Scripts
) -> None:
    scripts.enqueue(request(priority=1), J1, idempotency_key="k", now_ms=T0)
    before = snapshot(r)

    with pytest.raises(IdempotencyConflict) as raised:
        scripts.enqueue(request(priority=2), J2, idempotency_key="k", now_ms=T0 + 1)

    assert raised.value.job_id == J1
    assert changed(before, snapshot(r)) == set()


def test_enqueue_idempotency_key_whose_job_was_deleted_creates_it_again_under_its_id(
    r: redis.Redis, scripts: Scripts
) -> None:
    # The key lives in the global slot, the job in its queue's: the key cannot tell a deleted
    # job from one whose producer died between reserving the key and creating the job. Both
    # are created under the id the key names, so racing repeats create one job, not two.
    body = request(max_retries=1)
    scripts.enqueue(body, J1, idempotency_key="k", now_ms=T0)
    token = claim(scripts, J1).token
    scripts.fail(J1, token, "boom", now_ms=T0)
    scripts.purge(J1)
    before = snapshot(r)

    again = scripts.enqueue(body, J2, idempotency_key="k", now_ms=T0 + 1)

    after = snapshot(r)
    assert again == EnqueueResult(J1, JobState.PENDING, created=False, created_at_ms=T0 + 1)
    assert K.job(J1) in changed(before, after)
    assert K.job(J2) not in after
    assert after[K.idempotency("k")]["job_id"] == J1


def test_enqueue_idempotency_key_reserved_by_a_producer_that_died_creates_its_job(
    r: redis.Redis, scripts: Scripts
) -> None:
    body = request()
    scripts._reserve(body, J1, "k")  # the producer died before its enqueue call

    first = scripts.enqueue(body, J2, idempotency_key="k", now_ms=T0)
    repeat = scripts.enqueue(body, J3, idempotency_key="k", now_ms=T0 + 1)

    # Only the request that reserved the key answers "created", though this one created it.
    assert first == EnqueueResult(J1, JobState.PENDING, created=False, created_at_ms=T0)
    assert repeat == EnqueueResult(J1, JobState.PENDING, created=False, created_at_ms=T0)
    assert r.zcard(K.pending) == 1


def test_enqueue_without_idempotency_key_writes_no_key_entry(
    r: redis.Redis, scripts: Scripts
) -> None:
    scripts.enqueue(request(), J1, now_ms=T0)
    scripts.enqueue(request(), J2, now_ms=T0)

    assert not [key for key in snapshot(r) if ":idem:" in key]
    assert job(r, J2).status is JobState.PENDING


def test_enqueue_stores_a_traceparent_only_when_given_and_claim_hands_it_on(
    r: redis.Redis, scripts: Scripts
) -> None:
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    scripts.enqueue(request(), J1, now_ms=T0, traceparent=parent)
    scripts.enqueue(request(), J2, now_ms=T0)
    scripts.enqueue_many([(request(), J3)], now_ms=T0, traceparent=parent)

    assert r.hget(K.job(J1), "traceparent") == parent.encode()
    assert not r.hexists(K.job(J2), "traceparent")
    assert r.hget(K.job(J3), "traceparent") == parent.encode()
    claimed = claim(scripts, J1, now=T0 + 5)
    assert claimed.extra == {"traceparent": parent, "eligible_at": str(T0)}
    assert claimed.started_at == T0 + 5


def test_enqueue_wake_hints_are_capped(r: redis.Redis, scripts: Scripts) -> None:
    for n, jid in enumerate((J1, J2, J3)):
        enqueue(scripts, jid, now=T0 + n)
    assert r.llen(K.wake) == POLICY.wake_cap

    # One over the cap trims to half of it: a burst pays an LTRIM per half-cap enqueues.
    enqueue(scripts, J4, now=T0 + 3)
    assert r.llen(K.wake) == POLICY.wake_cap // 2


def test_enqueue_keeps_extreme_priorities_exact_as_scores(r: redis.Redis, scripts: Scripts) -> None:
    enqueue(scripts, J1, priority=2**31)
    enqueue(scripts, J2, priority=-(2**31))

    assert snapshot(r)[K.pending] == [
        (pending_member(1, J1), -(2**31)),
        (pending_member(2, J2), 2**31),
    ]
    assert job(r, J1).priority == 2**31
    assert job(r, J2).priority == -(2**31)


def test_enqueue_round_trips_timeout_and_a_far_scheduled_at(
    r: redis.Redis, scripts: Scripts
) -> None:
    # Year 9999: more digits than Lua's default number format keeps (%.14g).
    far = request(scheduled_at="9999-12-31T23:59:59.999Z", timeout=2.5, payload={"é": [1]})

    scripts.enqueue(far, J1, now_ms=T0)

    stored = job(r, J1)
    assert stored.scheduled_at == far.scheduled_at_ms == 253_402_300_799_999
    assert r.zscore(K.scheduled, J1) == far.scheduled_at_ms
    assert stored.timeout == 2.5
    assert stored.payload == {"é": [1]}


def test_enqueue_many_creates_every_job_in_the_given_order(
    r: redis.Redis, scripts: Scripts
) -> None:
    batch = [
        (request(priority=1), J3),
        (request(), J1),
        (request(scheduled_at=format_ms(T0 + 9)), J2),
    ]

    results = scripts.enqueue_many(batch, now_ms=T0)

    after = snapshot(r)
    assert results == [
        EnqueueResult(J3, JobState.PENDING, created=True, created_at_ms=T0),
        EnqueueResult(J1, JobState.PENDING, created=True, created_at_ms=T0),
        EnqueueResult(J2, JobState.SCHEDULED, created=True, created_at_ms=T0),
    ]
    assert after[K.pending] == [(pending_member(1, J3), -1), (pending_member(2, J1), 0)]
    assert after[K.scheduled] == [(J2, T0 + 9)]
    assert after[K.wake] == [1, 1]


def test_enqueue_many_sent_again_creates_nothing_new(r: redis.Redis, scripts: Scripts) -> None:
    batch = [(request(), J1), (request(), J2)]
    scripts.enqueue_many(batch, now_ms=T0)
    before = snapshot(r)

    again = scripts.enqueue_many(batch, now_ms=T0 + 1)

    assert [result.job_id for result in again] == [J1, J2]
    assert changed(before, snapshot(r)) == set()


# --- delay: scheduled_at counted from the script's own clock ----------------------------------


def test_enqueue_with_a_delay_schedules_it_that_long_after_the_scripts_now(
    r: redis.Redis, scripts: Scripts
) -> None:
    before = snapshot(r)

    # T0 is the script's now (ARGV override), not this host's clock: the due time follows it.
    result = scripts.enqueue(request(delay="5m"), J1, now_ms=T0)

    after = snapshot(r)
    assert result == EnqueueResult(J1, JobState.SCHEDULED, created=True, created_at_ms=T0)
    assert changed(before, after) == {K.job(J1), K.scheduled, K.due, K.seq}  # seq: a first job
    assert after[K.scheduled] == [(J1, T0 + 300_000)]
    assert after[K.due] == [("default", T0 + 300_000)]
    stored = after[K.job(J1)]
    assert (stored["status"], stored["scheduled_at"], stored["created_at"]) == (
        "scheduled",
        T0 + 300_000,
        T0,
    )
    assert stored["history"] == "sa0|0"  # scheduled by the api, as for an absolute time
    assert "seq" not in stored and "delay" not in stored


def test_enqueue_with_no_override_counts_the_delay_from_redis_time(
    r: redis.Redis, scripts: Scripts
) -> None:
    def redis_ms() -> int:
        seconds, micros = r.time()
        return seconds * 1000 + micros // 1000

    earliest = redis_ms()
    result = scripts.enqueue(request(delay=2.5), J1)
    latest = redis_ms()

    stored = job(r, J1)
    assert earliest <= result.created_at_ms <= latest
    assert stored.created_at == result.created_at_ms
    assert stored.scheduled_at == result.created_at_ms + 2_500
    assert r.zscore(K.scheduled, J1) == stored.scheduled_at


def event_ms(r: redis.Redis, jid: str) -> tuple[str, int]:
    """Return the name of the job's one event and its entry id's milliseconds."""
    found = [
        (fields[b"e"].decode(), int(entry.decode().split("-")[0]))
        for entry, fields in r.xrange(K.events, "-", "+")
        if fields[b"j"].decode() == jid
    ]
    assert len(found) == 1, found
    return found[0]


def test_enqueue_with_events_on_takes_its_time_from_its_event(
    r: redis.Redis, scripts: Scripts
) -> None:
    # No TIME command (tests/engine/test_budgets.py): the event's entry id, Redis's clock, is
    # the job's now, for created_at, pending_since and a delay's due time alike.
    scripts.enqueue(request(), J1)
    scripts.enqueue(request(delay=2.5), J2)

    name, ms = event_ms(r, J1)
    stored = job(r, J1)
    assert (name, stored.created_at) == ("enqueued", ms)
    assert r.zscore(K.pending_since, J1) == ms
    name, ms = event_ms(r, J2)
    assert (name, job(r, J2).created_at, job(r, J2).scheduled_at) == ("scheduled", ms, ms + 2_500)


def test_enqueue_after_redis_clock_steps_back_keeps_the_streams_last_time(
    r: redis.Redis, scripts: Scripts
) -> None:
    # The stream's last entry an hour ahead of Redis's clock, as after the clock stepped back
    # an hour: an entry id never goes below the last one, so the job's time stays there (as
    # claim's, complete's and fail's do: docs/RELIABILITY.md, "Which clock decides what")
    # rather than going back, and a delay counts from it.
    seconds, micros = r.time()
    ahead = seconds * 1000 + micros // 1000 + 3_600_000
    r.xadd(K.events, {"e": "seeded"}, id=f"{ahead}-0")

    pending = scripts.enqueue(request(), J1)
    delayed = scripts.enqueue(request(delay=1), J2)

    assert pending.created_at_ms == delayed.created_at_ms == ahead
    assert r.zscore(K.pending_since, J1) == ahead
    assert job(r, J2).scheduled_at == ahead + 1_000


def test_enqueue_at_an_absolute_time_names_its_event_by_redis_time(
    r: redis.Redis, scripts: Scripts
) -> None:
    # Scheduled or pending is decided against Redis TIME before the event is written.
    past = scripts.enqueue(request(scheduled_at="2000-01-01T00:00:00Z"), J1)
    future = scripts.enqueue(request(scheduled_at="2999-01-01T00:00:00Z"), J2)

    assert (past.status, event_ms(r, J1)[0]) == (JobState.PENDING, "enqueued")
    assert (future.status, event_ms(r, J2)[0]) == (JobState.SCHEDULED, "scheduled")


def test_a_refused_client_id_writes_no_event_on_redis_clock(
    r: redis.Redis, scripts: Scripts
) -> None:
    # The repeat check comes before the event: a refused (or repeated) call writes nothing.
    own = new_client_id("default")
    scripts.enqueue(request(id=own, payload={"a": 1}), own)
    before, written = snapshot(r), r.xlen(K.events)

    with pytest.raises(JobIdConflict):
        scripts.enqueue(request(id=own, payload={"a": 2}), own)
    scripts.enqueue(request(id=own, payload={"a": 1}), own)

    assert changed(before, snapshot(r)) == set()
    assert r.xlen(K.events) == written == 1


def test_enqueue_with_a_delay_of_zero_is_pending_at_once_with_scheduled_at_now(
    r: redis.Redis, scripts: Scripts
) -> None:
    before = snapshot(r)

    result = scripts.enqueue(request(delay=0), J1, now_ms=T0)

    after = snapshot(r)
    assert result.status is JobState.PENDING
    assert changed(before, after) == {K.job(J1), K.pending, K.pending_since, K.seq, K.wake}
    assert after[K.job(J1)]["scheduled_at"] == T0  # as an absolute scheduled_at of now is
    assert after[K.pending] == [(pending_member(1, J1), 0)]


def test_enqueue_with_a_delay_repeated_with_the_same_job_id_keeps_the_first_due_time(
    r: redis.Redis, scripts: Scripts
) -> None:
    scripts.enqueue(request(delay="1m"), J1, now_ms=T0)
    before = snapshot(r)

    # redis-py resends a call whose reply was lost: the later now must not move the job.
    again = scripts.enqueue(request(delay="1m"), J1, now_ms=T0 + 30_000)

    assert again == EnqueueResult(J1, JobState.SCHEDULED, created=True, created_at_ms=T0)
    assert changed(before, snapshot(r)) == set()
    assert job(r, J1).scheduled_at == T0 + 60_000


def test_enqueue_same_idempotency_key_and_delay_returns_the_first_job_unmoved(
    r: redis.Redis, scripts: Scripts
) -> None:
    scripts.enqueue(request(delay="5m"), J1, idempotency_key="k", now_ms=T0)
    before = snapshot(r)

    # The same delay spelt otherwise, a minute later: the same request, the same job.
    second = scripts.enqueue(request(delay=300), J2, idempotency_key="k", now_ms=T0 + 60_000)

    assert second == EnqueueResult(J1, JobState.SCHEDULED, created=False, created_at_ms=T0)
    assert changed(before, snapshot(r)) == set()
    assert job(r, J1).scheduled_at == T0 + 300_000
    with pytest.raises(IdempotencyConflict):
        scripts.enqueue(request(delay="6m"), J3, idempotency_key="k", now_ms=T0 + 60_000)
    with pytest.raises(IdempotencyConflict):  # no delay is another request too
        scripts.enqueue(request(), J3, idempotency_key="k", now_ms=T0 + 60_000)


def test_enqueue_many_with_mixed_delays_schedules_each_from_the_one_now(
    r: redis.Redis, scripts: Scripts
) -> None:
    batch = [
        (request(delay="1.5s"), J1),
        (request(), J2),
        (request(delay=0), J3),
        (request(scheduled_at=format_ms(T0 + 9)), J4),
        (request(delay="1d"), J5),
    ]

    results = scripts.enqueue_many(batch, now_ms=T0)

    after = snapshot(r)
    assert [(res.job_id, res.status) for res in results] == [
        (J1, JobState.SCHEDULED),
        (J2, JobState.PENDING),
        (J3, JobState.PENDING),
        (J4, JobState.SCHEDULED),
        (J5, JobState.SCHEDULED),
    ]
    assert after[K.scheduled] == [(J4, T0 + 9), (J1, T0 + 1_500), (J5, T0 + 86_400_000)]
    assert after[K.pending] == [(pending_member(1, J2), 0), (pending_member(2, J3), 0)]
    assert "scheduled_at" not in after[K.job(J2)]
    assert after[K.job(J3)]["scheduled_at"] == T0
