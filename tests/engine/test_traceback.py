"""The `traceback` field: written by fail.lua with the error, capped, gone with the job.

A handler's traceback is stored in the job's hash beside `last_error` and describes the same
failure: a later failure without one (a timeout, a lost worker) removes it, replay clears it,
and it expires or is trimmed with the hash. Real Redis, state asserted key by key.
"""

from __future__ import annotations

import redis

from shared.engine.engine_types import Code, FailResult
from shared.engine.scripts import Scripts
from shared.model.jobs import TRACEBACK_LIMIT
from tests.engine.conftest import (
    J1,
    POLICY,
    T0,
    K,
    assert_ttl,
    changed,
    claim,
    enqueue,
    job,
    snapshot,
    start,
)

BASE = POLICY.retry_base_ms
TB = (
    "Traceback (most recent call last):\n"
    '  File "/app/tasks.py", line 3, in charge\n'
    "    raise ValueError('declined')\n"
    "ValueError: declined\n"
)


def test_fail_stores_the_traceback_beside_the_error_and_nothing_else_changes(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1).token
    before = snapshot(r)

    result = scripts.fail(J1, token, "ValueError: declined", traceback=TB, now_ms=T0 + 5)

    after = snapshot(r)
    assert result == FailResult(Code.RETRYING, next_retry_at=T0 + 5 + BASE)
    assert changed(before, after) == {K.job(J1), K.processing, K.retrying, K.failures}
    assert after[K.job(J1)] == before[K.job(J1)] | {
        "status": "retrying",
        "last_error": "ValueError: declined",
        "traceback": TB,
        "next_retry_at": T0 + 5 + BASE,
        "updated_at": T0 + 5,
        "history": "qa0|0\ncw0|1|w1\nrw5|||ValueError",
    }
    assert job(r, J1).to_json()["traceback"] == TB


def test_a_dead_jobs_traceback_expires_with_its_hash(r: redis.Redis, scripts: Scripts) -> None:
    token = start(scripts, J1, max_retries=1).token

    assert (
        scripts.fail(J1, token, "ValueError: declined", traceback=TB, now_ms=T0).code is Code.DEAD
    )

    assert r.hget(K.job(J1), "traceback") == TB.encode()
    assert_ttl(r, K.job(J1), POLICY.dlq_max_age_ms)  # one hash, one TTL: the job's retention
    scripts.trim(now_ms=T0 + POLICY.dlq_max_age_ms + 1)
    assert not r.exists(K.job(J1))


def test_a_failure_without_a_traceback_stores_none(r: redis.Redis, scripts: Scripts) -> None:
    token = start(scripts, J1).token

    scripts.fail(J1, token, "Timeout: timed out after 5s; its worker was killed", now_ms=T0)

    assert not r.hexists(K.job(J1), "traceback")
    assert job(r, J1).to_json()["traceback"] is None


def test_a_later_failure_without_a_traceback_removes_the_earlier_one(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1, max_retries=3).token
    due = scripts.fail(J1, token, "ValueError: declined", traceback=TB, now_ms=T0).next_retry_at
    assert scripts.promote(now_ms=due).retrying == [J1]
    token = claim(scripts, J1, now=due).token

    # The supervisor records a timeout: the traceback must not outlive the error it explained.
    scripts.fail(J1, token, "Timeout: timed out after 5s; its worker was killed", now_ms=due)

    stored = job(r, J1)
    assert stored.last_error == "Timeout: timed out after 5s; its worker was killed"
    assert stored.traceback is None


def test_death_at_the_recovery_cap_removes_an_earlier_traceback(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1, max_retries=3).token
    now = scripts.fail(J1, token, "ValueError: declined", traceback=TB, now_ms=T0).next_retry_at
    assert scripts.promote(now_ms=now).retrying == [J1]
    for _ in range(POLICY.max_recoveries + 1):
        token = claim(scripts, J1, now=now).token
        now += 1
        outcome = scripts.release(J1, token, now_ms=now)

    assert outcome.code is Code.DEAD
    stored = job(r, J1)
    assert stored.last_error is not None and stored.last_error.startswith("WorkerLost: ")
    assert stored.traceback is None


def test_a_long_traceback_is_stored_capped_with_its_end_kept(
    r: redis.Redis, scripts: Scripts
) -> None:
    frames = "".join(
        f'  File "/app/t.py", line {i}, in f{i}\n    f{i + 1}()\n' for i in range(3_000)
    )
    text = "Traceback (most recent call last):\n" + frames + "RecursionError: too deep\n"
    assert len(text.encode()) > 10 * TRACEBACK_LIMIT
    token = start(scripts, J1).token

    scripts.fail(J1, token, "RecursionError: too deep", traceback=text, now_ms=T0)

    stored = r.hget(K.job(J1), "traceback")
    assert stored is not None and len(stored) <= TRACEBACK_LIMIT
    note, _, kept = stored.decode().partition("\n")
    assert note.startswith(f"[traceback cut to {TRACEBACK_LIMIT} bytes: its first ")
    assert text.endswith(kept) and kept.endswith(
        "in f2999\n    f3000()\nRecursionError: too deep\n"
    )


def test_a_repeated_fail_keeps_the_first_calls_traceback(r: redis.Redis, scripts: Scripts) -> None:
    # A lost reply retried, or a second recorder racing the first: the first call's record stays.
    token = start(scripts, J1).token
    first = scripts.fail(J1, token, "ValueError: declined", traceback=TB, now_ms=T0)
    before = snapshot(r)

    again = scripts.fail(J1, token, "KeyError: 'x'", traceback="other\n", now_ms=T0 + 9)

    assert again == first
    assert changed(before, snapshot(r)) == set()
    assert r.hget(K.job(J1), "traceback") == TB.encode()


def test_replay_clears_the_traceback_with_the_error(r: redis.Redis, scripts: Scripts) -> None:
    token = start(scripts, J1, max_retries=1).token
    scripts.fail(J1, token, "ValueError: declined", traceback=TB, now_ms=T0)

    replayed = scripts.replay(J1, now_ms=T0 + 1)

    assert (replayed.last_error, replayed.traceback) == (None, None)
    assert not r.hexists(K.job(J1), "traceback")
    assert replayed.to_json()["traceback"] is None


def test_a_job_that_never_failed_has_no_traceback(r: redis.Redis, scripts: Scripts) -> None:
    enqueue(scripts, J1)

    assert job(r, J1).to_json()["traceback"] is None
