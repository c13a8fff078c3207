"""claim_batch.lua: several jobs started in one call, each as claim.lua starts one."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from shared.engine import history
from shared.engine.engine_types import Code, QueuePaused
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState
from tests.engine.conftest import (
    J1,
    J2,
    J3,
    J4,
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


def test_a_batch_starts_each_job_with_its_own_lease_and_token_in_claim_order(
    r: redis.Redis, scripts: Scripts
) -> None:
    enqueue(scripts, J1)
    enqueue(scripts, J2, priority=5)  # higher priority: first
    enqueue(scripts, J3)
    enqueue(scripts, J4)

    jobs = scripts.claim_batch("w1", 3, now_ms=LATER)

    assert [j.id for j in jobs] == [J2, J1, J3]
    for claimed in jobs:
        stored = job(r, claimed.id)
        assert (stored.status, stored.attempts, stored.token) == (JobState.PROCESSING, 1, 1)
        assert (stored.worker_id, stored.started_at) == ("w1", LATER)
        assert claimed.token == stored.token and claimed.payload_json == stored.payload_json
        assert r.zscore(K.processing, claimed.id) == LATER + POLICY.lease_ms
        assert r.zscore(K.pending_since, claimed.id) is None
        kept = history.read(r, K, claimed.id, "default")
        assert kept is not None
        last = kept.entries[-1]
        assert (last.event, last.attempt, last.worker, last.at_ms) == ("claimed", 1, "w1", LATER)
    assert job(r, J4).status is JobState.PENDING
    assert r.zcard(K.pending) == 1


def test_each_job_of_a_batch_is_fenced_on_its_own(r: redis.Redis, scripts: Scripts) -> None:
    enqueue(scripts, J1)
    enqueue(scripts, J2)
    first, second = scripts.claim_batch("w1", 2, now_ms=LATER)

    assert scripts.complete(first.id, first.token, now_ms=LATER).code is Code.DONE
    stale = scripts.complete(second.id, second.token + 1, now_ms=LATER)
    assert stale.code is Code.STALE_TOKEN
    assert job(r, J2).status is JobState.PROCESSING


def test_a_batch_stops_where_the_queue_runs_out(r: redis.Redis, scripts: Scripts) -> None:
    enqueue(scripts, J1)
    r.lpush(K.wake, "1")

    jobs = scripts.claim_batch("w1", 8, now_ms=LATER)

    assert [j.id for j in jobs] == [J1]
    assert not r.exists(K.wake)  # hints cleared, as an empty claim clears them
    assert scripts.claim_batch("w1", 8, now_ms=LATER) == []


def test_a_batch_stops_at_a_job_the_worker_does_not_run_and_leaves_it_first(
    r: redis.Redis, scripts: Scripts
) -> None:
    enqueue(scripts, J1)
    scripts.enqueue(request("email"), J2, now_ms=T0)
    enqueue(scripts, J3)

    jobs = scripts.claim_batch("w1", 3, runnable=frozenset({"t"}), now_ms=LATER)

    assert [j.id for j in jobs] == [J1]
    assert job(r, J2).status is JobState.PENDING and job(r, J3).status is JobState.PENDING
    assert r.zrange(K.pending, 0, 0)[0].endswith(J2.encode())


def test_a_repeated_batch_gets_the_jobs_its_first_call_claimed_and_no_more(
    r: redis.Redis, scripts: Scripts
) -> None:
    for jid in (J1, J2, J3):
        enqueue(scripts, jid)
    first = scripts.claim_batch("w1", 2, request_id="req-1", now_ms=LATER)
    before = snapshot(r)

    again = scripts.claim_batch("w1", 2, request_id="req-1", now_ms=LATER + 1)

    assert again == first
    assert changed(before, snapshot(r)) == set()
    # One of them finished since: a repeat returns only what the worker still holds.
    scripts.complete(first[0].id, first[0].token, now_ms=LATER)
    assert [j.id for j in scripts.claim_batch("w1", 2, request_id="req-1")] == [first[1].id]
    assert job(r, J3).status is JobState.PENDING


def test_a_paused_queue_claims_nothing_in_a_batch(r: redis.Redis, scripts: Scripts) -> None:
    enqueue(scripts, J1)
    scripts.pause_queue("default")
    before = snapshot(r)

    with pytest.raises(QueuePaused):
        scripts.claim_batch("w1", 4, now_ms=LATER)

    assert changed(before, snapshot(r)) == set()


def test_a_batch_writes_one_claimed_event_per_job(
    r: redis.Redis, make_scripts: Callable[..., Scripts]
) -> None:
    engine = make_scripts(events_cap=1_000)
    for jid in (J1, J2, J3):
        enqueue(engine, jid)
    start = r.xrevrange(engine._events_key(K) or "", count=1)

    engine.claim_batch("w1", 3)

    entries = r.xrange(engine._events_key(K) or "", min=f"({start[0][0].decode()}")
    assert [(e[b"e"], e[b"j"], e[b"w"]) for _, e in entries] == [
        (b"claimed", jid.encode(), b"w1") for jid in (J1, J2, J3)
    ]
