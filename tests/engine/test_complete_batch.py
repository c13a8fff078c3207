"""complete_batch.lua: a worker's finished jobs completed in one call, each as complete.lua
completes one, and its next jobs claimed in the same call as claim_batch.lua claims them."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from shared.engine import history
from shared.engine.engine_types import BatchAck, Code, NotRunnable
from shared.engine.scripts import Scripts
from shared.model import limit_rules
from shared.model.jobs import Job, JobState
from shared.settings.config import WORKER_BATCH_MAX
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
    changed,
    enqueue,
    job,
    request,
    snapshot,
)

LATER = T0 + 5
DONE_AT = T0 + 50


def batch_of(scripts: Scripts, *jids: str) -> list[Job]:
    """Enqueue `jids` and claim them all in one batch for w1."""
    for jid in jids:
        enqueue(scripts, jid)
    jobs = scripts.claim_batch("w1", len(jids), now_ms=LATER)
    assert isinstance(jobs, list) and [j.id for j in jobs] == list(jids)
    return jobs


def ran(jobs: list[Job]) -> list[tuple[str, int, str]]:
    """The completions of `jobs`, each with a result naming it."""
    return [(j.id, j.token, f'"{j.id}"') for j in jobs]


def codes(ack: BatchAck) -> list[tuple[Code, str | None]]:
    return [(a.code, a.status) for a in ack.acks]


def test_each_job_completes_as_complete_does_and_the_next_batch_is_claimed(
    r: redis.Redis, scripts: Scripts
) -> None:
    jobs = batch_of(scripts, J1, J2, J3)
    for jid in (J4, J5, J6):
        enqueue(scripts, jid)

    ack = scripts.complete_batch("w1", ran(jobs), count=2, now_ms=DONE_AT)

    assert codes(ack) == [(Code.DONE, None)] * 3
    for done in jobs:
        stored = job(r, done.id)
        assert (stored.status, stored.finished_at) == (JobState.COMPLETED, DONE_AT)
        assert stored.result_json == f'"{done.id}"' and stored.worker_id is None
        assert r.zscore(K.processing, done.id) is None
        assert r.zscore(K.completed, done.id) == DONE_AT
        kept = history.read(r, K, done.id, "default")
        assert kept is not None and kept.entries[-1].event == "completed"
    assert [j.id for j in ack.claimed] == [J4, J5]
    for claimed in ack.claimed:
        stored = job(r, claimed.id)
        assert (stored.status, stored.worker_id, stored.token) == (JobState.PROCESSING, "w1", 1)
        assert r.zscore(K.processing, claimed.id) == DONE_AT + POLICY.lease_ms
    assert job(r, J6).status is JobState.PENDING


def test_one_stale_job_spoils_none_of_the_others(r: redis.Redis, scripts: Scripts) -> None:
    jobs = batch_of(scripts, J1, J2, J3)
    sent = ran(jobs)
    sent[1] = (J2, jobs[1].token + 1, "null")  # another claim's token: not this worker's
    enqueue(scripts, J4)

    ack = scripts.complete_batch("w1", [*sent, (J5, 1, "null")], count=1, now_ms=DONE_AT)

    assert codes(ack) == [
        (Code.DONE, None),
        (Code.STALE_TOKEN, "processing"),
        (Code.DONE, None),
        (Code.NOT_FOUND, None),
    ]
    assert job(r, J1).status is JobState.COMPLETED and job(r, J3).status is JobState.COMPLETED
    assert job(r, J2).status is JobState.PROCESSING  # untouched
    assert [j.id for j in ack.claimed] == [J4]  # the claim runs whatever the completions got


def test_a_repeat_after_a_lost_reply_completes_nothing_twice_and_gets_the_same_jobs(
    r: redis.Redis, scripts: Scripts
) -> None:
    jobs = batch_of(scripts, J1, J2)
    for jid in (J3, J4, J5):
        enqueue(scripts, jid)
    first = scripts.complete_batch(
        "w1", ran(jobs), count=2, request_id="req-9", now_ms=DONE_AT
    )  # its reply lost
    before = snapshot(r)

    again = scripts.complete_batch("w1", ran(jobs), count=2, request_id="req-9", now_ms=DONE_AT + 7)

    assert changed(before, snapshot(r)) == set()
    assert codes(again) == [(Code.DONE, None)] * 2
    assert again.claimed == first.claimed and [j.id for j in again.claimed] == [J3, J4]
    assert job(r, J1).finished_at == DONE_AT  # not written again
    assert job(r, J5).status is JobState.PENDING


def test_jobs_recovered_or_canceled_meanwhile_are_refused_and_left_as_they_are(
    r: redis.Redis, scripts: Scripts
) -> None:
    # The worker's completions come late (a hang past the lease): the scheduler's recover
    # pass has put J1 back in line (a recovery counted) and ended J2, whose cancel was
    # requested while it ran; J3, claimed later, still holds its lease.
    jobs = batch_of(scripts, J1, J2)
    enqueue(scripts, J3)
    [third] = scripts.claim_batch("w1", 1, now_ms=LATER + POLICY.lease_ms // 2)
    assert scripts.cancel(J2, now_ms=LATER + 1).changed
    recovered = scripts.recover(now_ms=LATER + POLICY.lease_ms + 1)
    assert recovered.canceled == [J2]
    before = snapshot(r)

    ack = scripts.complete_batch("w1", ran([*jobs, third]), count=0, now_ms=DONE_AT + 20_000)

    assert codes(ack) == [
        (Code.STALE_TOKEN, "pending"),
        (Code.STALE_TOKEN, "canceled"),
        (Code.DONE, None),
    ]
    assert (job(r, J1).status, job(r, J1).recoveries) == (JobState.PENDING, 1)
    assert job(r, J2).status is JobState.CANCELED
    assert job(r, J3).status is JobState.COMPLETED
    # Only J3's completion was written: J1 and J2 are as the recover pass left them.
    assert changed(before, snapshot(r)) == {K.job(J3), K.processing, K.completed}


def test_a_paused_queue_keeps_the_completions_and_claims_nothing(
    r: redis.Redis, scripts: Scripts
) -> None:
    jobs = batch_of(scripts, J1, J2)
    enqueue(scripts, J3)
    scripts.pause_queue("default", now_ms=T0)

    ack = scripts.complete_batch("w1", ran(jobs), count=4, now_ms=DONE_AT)

    assert ack.paused and ack.claimed == ()
    assert codes(ack) == [(Code.DONE, None)] * 2
    assert job(r, J3).status is JobState.PENDING


def test_the_claim_stops_at_a_type_the_worker_does_not_run(
    r: redis.Redis, scripts: Scripts
) -> None:
    jobs = batch_of(scripts, J1)
    enqueue(scripts, J2)
    scripts.enqueue(request("email"), J3, now_ms=T0)
    enqueue(scripts, J4)
    runs = frozenset({"t"})

    ack = scripts.complete_batch("w1", ran(jobs), count=3, runnable=runs, now_ms=DONE_AT)

    assert [j.id for j in ack.claimed] == [J2] and ack.refused == NotRunnable("default", "email")
    assert r.zrange(K.pending, 0, 0)[0].endswith(J3.encode())  # left first in line
    # Stopped before any: nothing claimed, the type named.
    nothing = scripts.complete_batch("w1", ran(ack.claimed), count=3, runnable=runs)
    assert nothing.claimed == () and nothing.refused == NotRunnable("default", "email")


def test_a_flush_claims_nothing_and_reads_nothing_of_the_claim(
    r: redis.Redis, scripts: Scripts
) -> None:
    jobs = batch_of(scripts, J1, J2)
    enqueue(scripts, J3)

    ack = scripts.complete_batch("w1", ran(jobs), count=0, now_ms=DONE_AT)

    assert codes(ack) == [(Code.DONE, None)] * 2 and ack.claimed == ()
    assert job(r, J3).status is JobState.PENDING


def test_each_completion_gives_its_limit_slot_back(r: redis.Redis, scripts: Scripts) -> None:
    scripts.set_limits("default", limit_rules.parse_limits({"concurrency": 2}).compact_json())
    jobs = batch_of(scripts, J1, J2)
    enqueue(scripts, J3)
    assert scripts.claim("w2", now_ms=LATER) is None  # the queue is at its limit
    assert r.zcard(K.running) == 2

    ack = scripts.complete_batch("w1", ran(jobs), count=2, now_ms=DONE_AT)

    assert codes(ack) == [(Code.DONE, None)] * 2
    # Both slots given back, one taken again by the claim part.
    assert [j.id for j in ack.claimed] == [J3]
    assert {m.decode() for m in r.zrange(K.running, 0, -1)} == {f"t|{J3}"}


def test_slots_freed_beyond_the_jobs_claimed_each_wake_a_worker(
    r: redis.Redis, scripts: Scripts
) -> None:
    scripts.set_limits("default", limit_rules.parse_limits({"concurrency": 3}).compact_json())
    jobs = batch_of(scripts, J1, J2, J3)
    for jid in (J4, J5, J6):
        enqueue(scripts, jid)
    assert scripts.claim("w2", now_ms=LATER) is None  # at the limit: w2 waits for a hint
    r.delete(K.wake)

    # Three slots given back, one taken again (a worker due for recycling claims one): the
    # other two each wake an idle worker, as complete.lua's hint wakes one for its slot.
    ack = scripts.complete_batch("w1", ran(jobs), count=1, now_ms=DONE_AT)

    assert [j.id for j in ack.claimed] == [J4]
    assert r.zcard(K.running) == 1 and r.llen(K.wake) == 2


def test_no_hint_for_slots_freed_when_no_job_is_left_to_claim(
    r: redis.Redis, scripts: Scripts
) -> None:
    scripts.set_limits("default", limit_rules.parse_limits({"concurrency": 3}).compact_json())
    jobs = batch_of(scripts, J1, J2, J3)
    enqueue(scripts, J4)

    ack = scripts.complete_batch("w1", ran(jobs), count=3, now_ms=DONE_AT)

    # The claim took the last job: a hint would only send an idle worker into an empty claim.
    assert [j.id for j in ack.claimed] == [J4]
    assert r.llen(K.wake) == 0


def test_a_type_limit_returns_its_held_job_per_completion(r: redis.Redis, scripts: Scripts) -> None:
    rules = {"types": {"t": {"concurrency": 2}}}
    scripts.set_limits("default", limit_rules.parse_limits(rules).compact_json())
    jobs = batch_of(scripts, J1, J2)
    enqueue(scripts, J3)
    enqueue(scripts, J4)
    assert scripts.claim("w2", now_ms=LATER) is None  # both held back by the type's limit
    assert r.zcard(K.held) == 2

    ack = scripts.complete_batch("w1", ran(jobs), count=0, now_ms=DONE_AT)

    assert codes(ack) == [(Code.DONE, None)] * 2
    assert r.zcard(K.held) == 0 and r.zcard(K.running) == 0
    assert r.zcard(K.pending) == 2 and r.llen(K.wake) >= 1  # back in line, a worker woken


def test_a_batch_mixing_jobs_with_and_without_a_slot_gives_each_slot_back_once(
    r: redis.Redis, scripts: Scripts
) -> None:
    # One lk serves the batch's slots (includes/complete.lua, slot_lk): made by the first job
    # that holds one, passed over by a job that holds none, used again by the next that does.
    rules = {"types": {"t": {"concurrency": 2}}}
    scripts.set_limits("default", limit_rules.parse_limits(rules).compact_json())
    enqueue(scripts, J1)
    assert scripts.enqueue(request("mail"), J2, now_ms=T0).created
    enqueue(scripts, J3)
    jobs = scripts.claim_batch("w1", 3, now_ms=LATER)
    assert isinstance(jobs, list) and [j.id for j in jobs] == [J1, J2, J3]
    assert {m.decode() for m in r.zrange(K.running, 0, -1)} == {f"t|{J1}", f"t|{J3}"}
    enqueue(scripts, J4)
    enqueue(scripts, J5)
    assert scripts.claim("w2", now_ms=LATER) is None  # both held back by the type's limit

    ack = scripts.complete_batch("w1", ran(jobs), count=2, now_ms=DONE_AT)

    assert codes(ack) == [(Code.DONE, None)] * 3
    assert [j.id for j in ack.claimed] == [J4, J5]
    assert {m.decode() for m in r.zrange(K.running, 0, -1)} == {f"t|{J4}", f"t|{J5}"}
    assert r.zcard(K.held) == 0


def test_each_job_writes_its_own_completed_event_then_each_claim_its_own(
    r: redis.Redis, make_scripts: Callable[..., Scripts]
) -> None:
    engine = make_scripts(events_cap=1_000)
    jobs = batch_of(engine, J1, J2)
    enqueue(engine, J3)
    stream = engine._events_key(K) or ""
    start = r.xrevrange(stream, count=1)[0][0].decode()

    engine.complete_batch("w1", ran(jobs), count=1)

    entries = r.xrange(stream, min=f"({start}")
    assert [(e[b"e"], e[b"j"], e[b"w"]) for _, e in entries] == [
        (b"completed", J1.encode(), b"w1"),
        (b"completed", J2.encode(), b"w1"),
        (b"claimed", J3.encode(), b"w1"),
    ]
    # One clock for the call: every job's time is the first event's.
    at = int(entries[0][0].decode().split("-")[0])
    assert job(r, J1).finished_at == job(r, J2).finished_at == at == job(r, J3).started_at


def test_a_batch_above_worker_batch_max_is_refused_before_it_is_sent(
    r: redis.Redis, scripts: Scripts
) -> None:
    enqueue(scripts, J1)  # a claim sent would start it
    before = snapshot(r)
    too_many = [(f"j{i}", 1, "null") for i in range(WORKER_BATCH_MAX + 1)]
    with pytest.raises(ValueError):
        scripts.complete_batch("w1", too_many, count=0)
    with pytest.raises(ValueError):
        scripts.complete_batch("w1", [], count=WORKER_BATCH_MAX + 1)
    with pytest.raises(ValueError):
        scripts.claim_batch("w1", WORKER_BATCH_MAX + 1)
    assert snapshot(r) == before
