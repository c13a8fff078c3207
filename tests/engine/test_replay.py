"""replay.lua: a dead job gets a fresh start (attempts 0, error cleared, priority kept)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from shared.engine.engine_types import Code, JobNotFound, WrongState
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
    claim,
    enqueue,
    fail_to_retrying,
    finish,
    job,
    kill,
    pending_member,
    snapshot,
    start,
)


def make_dead_after_a_crash(scripts: Scripts, jid: str, priority: int = 0) -> None:
    """Dead with attempts, a recovery, an error and traceback, a start and a finish to clear."""
    enqueue(scripts, jid, priority=priority, max_retries=2)
    token = claim(scripts, jid).token
    scripts.release(jid, token, now_ms=T0 + 1)  # recoveries 1
    token = claim(scripts, jid, now=T0 + 2).token
    scripts.fail(jid, token, "boom", permanent=True, traceback="Traceback ...\n", now_ms=T0 + 3)
    assert job(scripts.redis, jid).status is JobState.DEAD


def test_replay_returns_a_dead_job_to_pending_fresh_and_touches_exactly_its_keys(
    r: redis.Redis, scripts: Scripts
) -> None:
    make_dead_after_a_crash(scripts, J1, priority=7)
    r.hset(K.job(J1), "result", "1")  # a result left by an operator's edit is cleared too
    now = T0 + 1_000
    before = snapshot(r)

    replayed = scripts.replay(J1, now_ms=now)

    after = snapshot(r)
    assert changed(before, after) == {
        K.job(J1),
        K.dead,
        K.pending,
        K.pending_since,
        K.seq,
        K.wake,
    }
    assert K.dead not in after
    assert after[K.pending] == [(pending_member(2, J1), -7)]  # a new seq: back of the line
    assert after[K.pending_since] == [(J1, now)]
    assert len(after[K.wake]) == len(before[K.wake]) + 1
    stored = after[K.job(J1)]
    assert K.job(J1) not in after.expiring  # no longer expiring with the DLQ
    assert stored["status"] == "pending"
    assert (stored["attempts"], stored["recoveries"], stored["priority"]) == (0, 0, 7)
    for cleared in ("last_error", "traceback", "result", "started_at", "finished_at", "worker_id"):
        assert cleared not in stored
    assert stored["token"] == before[K.job(J1)]["token"]  # tokens never go backwards
    assert replayed == job(r, J1)


def test_replayed_job_gets_its_whole_execution_budget_again(scripts: Scripts) -> None:
    kill(scripts, J1)  # max_retries 1, attempts 1
    scripts.replay(J1, now_ms=T0 + 1)
    token = claim(scripts, J1, now=T0 + 2).token

    # max_retries 1: the first failure after the replay is dead again, as on the first run.
    assert scripts.fail(J1, token, "again", now_ms=T0 + 3).code is Code.DEAD
    assert job(scripts.redis, J1).attempts == 1


def test_replayed_job_retries_as_a_new_one(scripts: Scripts) -> None:
    token = start(scripts, J1, max_retries=2).token
    now = scripts.fail(J1, token, "e1", now_ms=T0).next_retry_at
    scripts.promote(now_ms=now)
    token = claim(scripts, J1, now=now).token
    assert scripts.fail(J1, token, "e2", now_ms=now).code is Code.DEAD
    scripts.replay(J1, now_ms=now + 1)
    token = claim(scripts, J1, now=now + 2).token

    result = scripts.fail(J1, token, "e3", now_ms=now + 3)

    assert result.code is Code.RETRYING
    assert result.next_retry_at == now + 3 + POLICY.retry_base_ms


def test_replayed_job_keeps_its_original_priority_in_line(scripts: Scripts) -> None:
    kill(scripts, J1, priority=9)
    enqueue(scripts, J2, priority=5)
    enqueue(scripts, J3, priority=9)

    scripts.replay(J1, now_ms=T0 + 1)

    assert [scripts.claim("w1", now_ms=T0 + 2).id for _ in range(3)] == [J3, J1, J2]


@pytest.mark.parametrize("state", ["pending", "processing", "retrying", "completed"])
def test_replay_refuses_a_job_that_is_not_dead(
    r: redis.Redis, scripts: Scripts, state: str
) -> None:
    seed = {
        "pending": lambda: enqueue(scripts, J1),
        "processing": lambda: start(scripts, J1),
        "retrying": lambda: fail_to_retrying(scripts, J1),
        "completed": lambda: finish(scripts, J1),
    }
    seed[state]()
    before = snapshot(r)

    with pytest.raises(WrongState) as raised:
        scripts.replay(J1, now_ms=T0 + 1)

    assert raised.value.status == state
    assert changed(before, snapshot(r)) == set()


def test_replay_of_a_missing_job_is_not_found(r: redis.Redis, scripts: Scripts) -> None:
    with pytest.raises(JobNotFound):
        scripts.replay(J1, now_ms=T0)
    assert snapshot(r) == {}


def test_repeated_replay_with_the_same_request_id_returns_the_job_again(
    r: redis.Redis, scripts: Scripts, pin_request_id: Callable[[str], None]
) -> None:
    kill(scripts, J1)
    pin_request_id("replay-1")
    first = scripts.replay(J1, now_ms=T0 + 1)
    before = snapshot(r)

    again = scripts.replay(J1, now_ms=T0 + 2)

    assert again == first
    assert changed(before, snapshot(r)) == set()


def test_replay_with_a_new_request_id_of_a_replayed_job_is_refused(
    scripts: Scripts,
) -> None:
    kill(scripts, J1)
    scripts.replay(J1, now_ms=T0 + 1)

    with pytest.raises(WrongState):
        scripts.replay(J1, now_ms=T0 + 2)
