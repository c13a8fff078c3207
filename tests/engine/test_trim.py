"""trim.lua: finished jobs are forgotten past retention, the DLQ by age and by count."""

from __future__ import annotations

from collections.abc import Callable

import redis

from shared.engine.engine_types import TrimResult
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
    changed,
    enqueue,
    finish,
    job,
    kill,
    request,
    snapshot,
)

RETENTION = POLICY.finished_retention_ms
DLQ_AGE = POLICY.dlq_max_age_ms


def test_trim_forgets_completed_jobs_past_retention_with_their_hashes(
    r: redis.Redis, scripts: Scripts, pin_request_id: Callable[[str], None]
) -> None:
    finish(scripts, J1, now=T0)
    finish(scripts, J2, now=T0 + 1)  # exactly at retention when trimmed: kept
    pin_request_id("pinned")
    before = snapshot(r)

    result = scripts.trim(now_ms=T0 + 1 + RETENTION)

    after = snapshot(r)
    assert result == TrimResult(completed=1, canceled=0, dead=0)
    # The roll-up moved its watermark (and counted both completions before one was forgotten).
    assert changed(before, after) == {K.reply("pinned"), K.job(J1), K.completed, K.throughput}
    assert K.job(J1) not in after
    mark = (T0 + 1 + RETENTION - 2_000) // 1000 * 1000 - 1
    assert after[K.throughput] == {"mark": mark, f"c:{T0 // 60_000}": 2}
    assert after[K.completed] == [(J2, T0 + 1)]


def test_trim_forgets_canceled_jobs_past_retention_with_their_hashes(
    r: redis.Redis, scripts: Scripts, pin_request_id: Callable[[str], None]
) -> None:
    enqueue(scripts, J1)
    enqueue(scripts, J2)
    scripts.cancel(J1, now_ms=T0)
    scripts.cancel(J2, now_ms=T0 + 5)
    pin_request_id("pinned")
    before = snapshot(r)

    result = scripts.trim(now_ms=T0 + 1 + RETENTION)

    after = snapshot(r)
    assert result == TrimResult(completed=0, canceled=1, dead=0)
    assert changed(before, after) == {K.reply("pinned"), K.job(J1), K.canceled, K.throughput}
    assert after[K.canceled] == [(J2, T0 + 5)]


def test_trim_forgets_dead_jobs_past_the_dlq_max_age_with_their_hashes(
    r: redis.Redis, scripts: Scripts, pin_request_id: Callable[[str], None]
) -> None:
    kill(scripts, J1, now=T0)
    kill(scripts, J2, now=T0 + 10)
    pin_request_id("pinned")
    before = snapshot(r)

    result = scripts.trim(now_ms=T0 + 1 + DLQ_AGE)

    after = snapshot(r)
    assert result == TrimResult(completed=0, canceled=0, dead=1)
    assert changed(before, after) == {K.reply("pinned"), K.job(J1), K.dead, K.throughput}
    assert after[K.dead] == [(J2, T0 + 10)]


def test_trim_caps_the_dlq_by_count_oldest_first(
    r: redis.Redis, scripts: Scripts, pin_request_id: Callable[[str], None]
) -> None:
    jobs = [J1, J2, J3, J4, J5, J6]
    for n, jid in enumerate(reversed(jobs)):  # J6 died first, J1 last
        kill(scripts, jid, now=T0 + n)
    pin_request_id("pinned")
    before = snapshot(r)

    result = scripts.trim(now_ms=T0 + 10)

    after = snapshot(r)
    assert POLICY.dlq_max_jobs == 4
    assert result == TrimResult(completed=0, canceled=0, dead=2)
    assert changed(before, after) == {K.reply("pinned"), K.job(J6), K.job(J5), K.dead, K.throughput}
    assert [m for m, _ in after[K.dead]] == [J4, J3, J2, J1]


def test_trim_caps_completed_jobs_by_count_oldest_first_whatever_their_age(
    r: redis.Redis, scripts: Scripts, pin_request_id: Callable[[str], None]
) -> None:
    for n, jid in enumerate((J1, J2, J3, J4, J5)):  # J1 finished first
        finish(scripts, jid, now=T0 + n)
    pin_request_id("pinned")
    before = snapshot(r)

    result = scripts.trim(now_ms=T0 + 10)  # all well within retention

    after = snapshot(r)
    assert POLICY.finished_max_jobs == 3
    assert result == TrimResult(completed=2, canceled=0, dead=0)
    assert changed(before, after) == {
        K.reply("pinned"),
        K.job(J1),
        K.job(J2),
        K.completed,
        K.throughput,
    }
    assert [m for m, _ in after[K.completed]] == [J3, J4, J5]
    pin_request_id("again")  # a new call, not a repeat of the pinned one
    assert scripts.trim(now_ms=T0 + 11) == TrimResult(0, 0, 0)  # at the cap: nothing more


def test_trim_caps_canceled_jobs_by_count_apart_from_completed_ones(
    r: redis.Redis, scripts: Scripts
) -> None:
    for n, jid in enumerate((J1, J2, J3, J4)):
        enqueue(scripts, jid)
        scripts.cancel(jid, now_ms=T0 + n)
    finish(scripts, J5, now=T0)  # one completed job: under its own cap, kept

    assert scripts.trim(now_ms=T0 + 10) == TrimResult(completed=0, canceled=1, dead=0)
    after = snapshot(r)
    assert [m for m, _ in after[K.canceled]] == [J2, J3, J4]
    assert K.job(J1) not in after and K.job(J5) in after


def test_trim_deletes_at_most_limit_jobs_per_index(r: redis.Redis, scripts: Scripts) -> None:
    for n, jid in enumerate((J1, J2, J3)):
        finish(scripts, jid, now=T0 + n)

    assert scripts.trim(limit=2, now_ms=T0 + 1_000 + RETENTION, rounds=1).completed == 2
    assert snapshot(r)[K.completed] == [(J3, T0 + 2)]
    assert scripts.trim(limit=2, now_ms=T0 + 1_000 + RETENTION, rounds=1).completed == 1
    assert r.exists(K.completed, K.job(J1), K.job(J2), K.job(J3)) == 0


def test_trim_repeats_its_rounds_until_the_cap_holds(r: redis.Redis, scripts: Scripts) -> None:
    # More jobs finished since the last trim than one round deletes: the scheduler trims once
    # a second, so one round would let the index outgrow its cap at a high enough rate.
    for n, jid in enumerate((J1, J2, J3, J4, J5, J6)):
        finish(scripts, jid, now=T0 + n)

    assert scripts.trim(limit=1, now_ms=T0 + 10) == TrimResult(completed=3, canceled=0, dead=0)
    assert [m for m, _ in snapshot(r)[K.completed]] == [J4, J5, J6]  # the cap, 3


def test_trim_stops_after_its_rounds(r: redis.Redis, scripts: Scripts) -> None:
    for n, jid in enumerate((J1, J2, J3, J4, J5, J6)):
        finish(scripts, jid, now=T0 + n)

    assert scripts.trim(limit=1, now_ms=T0 + 10, rounds=2).completed == 2
    assert r.zcard(K.completed) == 4


def test_trim_with_nothing_old_changes_nothing(r: redis.Redis, scripts: Scripts) -> None:
    finish(scripts, J1)
    kill(scripts, J2)
    before = snapshot(r)

    assert scripts.trim(now_ms=T0 + RETENTION) == TrimResult(0, 0, 0)
    # Only the throughput roll-up: its watermark, and the completion and failure counted.
    assert changed(before, snapshot(r)) == {K.throughput}


def test_trim_keeps_the_hash_of_a_job_that_left_the_index_state(
    r: redis.Redis, scripts: Scripts
) -> None:
    # An operator's edit: a live job's id in the completed index. The entry goes, the job stays.
    enqueue(scripts, J1)
    r.zadd(K.completed, {J1: T0})

    assert scripts.trim(now_ms=T0 + 1 + RETENTION).completed == 1
    assert r.zcard(K.completed) == 0
    assert job(r, J1).status is JobState.PENDING


def test_trim_drops_an_entry_whose_hash_already_expired(r: redis.Redis, scripts: Scripts) -> None:
    finish(scripts, J1)
    r.delete(K.job(J1))  # its TTL backstop fired first

    assert scripts.trim(now_ms=T0 + 1 + RETENTION).completed == 1
    assert snapshot(r).get(K.completed) is None


def test_every_key_has_a_ttl_or_a_cap_after_a_mixed_sequence(
    r: redis.Redis, scripts: Scripts
) -> None:
    # Indexes are bounded by live jobs or by trim; the wake list by its cap; seq is one counter.
    bounded = {
        K.pending,
        K.pending_since,
        K.seq,
        K.processing,
        K.scheduled,
        K.retrying,
        K.completed,
        K.canceled,
        K.dead,
        K.wake,
        K.workers,
        K.failures,  # at most 64 seconds kept once trim has run
        K.due,  # an entry per queue holding a scheduled job (the scheduler's due index)
    }
    live = {"pending", "scheduled", "processing", "retrying"}
    scripts.enqueue(request(), J1, idempotency_key="k1", now_ms=T0)
    finish(scripts, J1)
    kill(scripts, J2)
    kill(scripts, J3)
    scripts.purge(J3)
    enqueue(scripts, J4)
    scripts.cancel(J4, now_ms=T0)
    enqueue(scripts, J5, scheduled_at="2030-01-01T00:00:00Z")
    enqueue(scripts, J6)
    scripts.heartbeat("w1", {"host": "h"}, 5_000, now_ms=T0)

    state = snapshot(r)

    for key, value in state.items():
        if key in bounded:
            continue
        if key.startswith(K.job_prefix) and value["status"] in live:
            assert key not in state.expiring, key
            continue
        if key.startswith(K.job_prefix) and value["status"] == "completed":
            # Capped, not expiring: trim deletes it with its entry in the completed index.
            assert key not in state.expiring, key
            assert key.removeprefix(K.job_prefix) in dict(state[K.completed]), key
            continue
        assert key in state.expiring, f"{key} has neither a TTL nor a cap"
    assert {K.job(J2), K.job(J4)} <= state.expiring
    assert {K.idempotency("k1"), K.tombstone(J3), K.worker("w1"), K.last_claim("w1")} <= set(
        state.expiring
    )
