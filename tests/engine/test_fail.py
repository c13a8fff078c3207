"""fail.lua: a failed execution retries after a capped backoff, or the job is dead."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from shared.engine.engine_types import Code, FailResult, Policy
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState, format_ms
from tests.engine.conftest import (
    J1,
    POLICY,
    T0,
    K,
    assert_ttl,
    changed,
    claim,
    job,
    request,
    snapshot,
    start,
)

BASE = POLICY.retry_base_ms


def run_again(scripts: Scripts, jid: str, now: int) -> int:
    """Promote a due retry and claim it; return the new token."""
    assert scripts.promote(now_ms=now).retrying == [jid]
    return claim(scripts, jid, now=now).token


def test_fail_on_the_first_attempt_waits_the_base_delay_and_touches_exactly_its_keys(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1).token
    now = T0 + 300
    before = snapshot(r)

    result = scripts.fail(J1, token, "ValueError: bad", now_ms=now)

    after = snapshot(r)
    assert result == FailResult(Code.RETRYING, next_retry_at=now + BASE)
    assert changed(before, after) == {K.job(J1), K.processing, K.retrying, K.failures}
    assert after[K.retrying] == [(J1, now + BASE)]
    assert after[K.failures] == {str(now // 1000): 1}  # one failure, in the second it happened
    assert after[K.job(J1)] == before[K.job(J1)] | {
        "status": "retrying",
        "last_error": "ValueError: bad",
        "next_retry_at": now + BASE,
        "updated_at": now,
        "history": "qa0|0\ncw0|1|w1\nrw300|||ValueError",  # the error's type only
    }
    assert K.job(J1) not in after.expiring


def test_max_retries_three_means_three_executions(r: redis.Redis, scripts: Scripts) -> None:
    token = start(scripts, J1, max_retries=3).token
    now = T0

    first = scripts.fail(J1, token, "e1", now_ms=now)
    assert first == FailResult(Code.RETRYING, next_retry_at=now + BASE * 1)
    now = first.next_retry_at
    token = run_again(scripts, J1, now)

    second = scripts.fail(J1, token, "e2", now_ms=now)
    assert second == FailResult(Code.RETRYING, next_retry_at=now + BASE * 2)
    now = second.next_retry_at
    token = run_again(scripts, J1, now)
    before = snapshot(r)

    third = scripts.fail(J1, token, "e3", now_ms=now)

    after = snapshot(r)
    assert third == FailResult(Code.DEAD)
    assert changed(before, after) == {K.job(J1), K.processing, K.dead, K.failures}
    assert after[K.dead] == [(J1, now)]
    assert sum(after[K.failures].values()) == 3  # every execution failed
    assert K.retrying not in after
    dead = after[K.job(J1)]
    assert (dead["status"], dead["attempts"], dead["last_error"]) == ("dead", 3, "e3")
    assert dead["finished_at"] == now
    assert "next_retry_at" not in dead and "seq" not in dead
    assert_ttl(r, K.job(J1), POLICY.dlq_max_age_ms)


@pytest.mark.parametrize("max_retries", [1, 2, 5])
def test_the_failure_on_attempt_max_retries_is_dead_and_no_earlier_one(
    scripts: Scripts, max_retries: int
) -> None:
    token = start(scripts, J1, max_retries=max_retries).token
    now = T0
    outcomes = []
    for _ in range(max_retries):
        result = scripts.fail(J1, token, "boom", now_ms=now)
        outcomes.append(result.code)
        if result.code is Code.RETRYING:
            now = result.next_retry_at
            token = run_again(scripts, J1, now)

    assert outcomes == [Code.RETRYING] * (max_retries - 1) + [Code.DEAD]
    assert job(scripts.redis, J1).attempts == max_retries


def test_retry_delay_doubles_and_is_capped_at_the_maximum(scripts: Scripts) -> None:
    # base 1 s, cap 5 s: 1, 2, 4, then 5 and 5 (not 8 and 16).
    token = start(scripts, J1, max_retries=6).token
    now = T0
    delays = []
    for _ in range(5):
        result = scripts.fail(J1, token, "boom", now_ms=now)
        delays.append(result.next_retry_at - now)
        now = result.next_retry_at
        token = run_again(scripts, J1, now)

    assert delays == [1_000, 2_000, 4_000, 5_000, 5_000]


def test_retry_jitter_is_off_by_default(scripts: Scripts, monkeypatch: pytest.MonkeyPatch) -> None:
    assert Policy().retry_jitter == 0.0
    monkeypatch.setattr("shared.engine.scripts.job_scripts.random.random", lambda: 0.0)
    token = start(scripts, J1).token

    assert scripts.fail(J1, token, "boom", now_ms=T0).next_retry_at == T0 + BASE


@pytest.mark.parametrize(
    ("draw", "delay"),
    [(0.0, 750), (0.5, 1_000), (0.999999, 1_249)],
    ids=["lowest", "middle", "highest"],
)
def test_retry_jitter_moves_the_delay_by_at_most_its_share(
    make_scripts: Callable[..., Scripts], monkeypatch: pytest.MonkeyPatch, draw: float, delay: int
) -> None:
    scripts = make_scripts(retry_jitter=0.25)
    monkeypatch.setattr("shared.engine.scripts.job_scripts.random.random", lambda: draw)
    token = start(scripts, J1).token

    result = scripts.fail(J1, token, "boom", now_ms=T0)

    assert result.next_retry_at - T0 == delay
    assert BASE * 0.75 <= delay <= BASE * 1.25


def test_retry_jitter_never_takes_the_delay_past_the_maximum(
    make_scripts: Callable[..., Scripts], monkeypatch: pytest.MonkeyPatch
) -> None:
    scripts = make_scripts(retry_jitter=0.5, retry_base_ms=8_000)  # base already over the cap
    monkeypatch.setattr("shared.engine.scripts.job_scripts.random.random", lambda: 0.999999)
    token = start(scripts, J1).token

    result = scripts.fail(J1, token, "boom", now_ms=T0)

    assert result.next_retry_at - T0 == POLICY.retry_max_ms


def test_fail_with_a_stale_token_changes_nothing_and_says_so(
    r: redis.Redis, scripts: Scripts
) -> None:
    old = start(scripts, J1).token
    scripts.recover(now_ms=T0 + POLICY.lease_ms + 1)
    scripts.claim("w2", now_ms=T0 + POLICY.lease_ms + 2)
    before = snapshot(r)

    result = scripts.fail(J1, old, "late", now_ms=T0 + 20_000)

    assert result == FailResult(Code.STALE_TOKEN, status="processing")
    assert changed(before, snapshot(r)) == set()


def test_repeated_fail_with_the_same_token_returns_the_same_retry_and_changes_nothing(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1).token
    first = scripts.fail(J1, token, "boom", now_ms=T0 + 1)
    before = snapshot(r)

    again = scripts.fail(J1, token, "boom", now_ms=T0 + 50)

    assert again == first == FailResult(Code.RETRYING, next_retry_at=T0 + 1 + BASE)
    assert changed(before, snapshot(r)) == set()


def test_repeated_fail_on_the_last_attempt_leaves_the_job_in_the_dlq_once(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1, max_retries=1).token
    assert scripts.fail(J1, token, "boom", now_ms=T0 + 1).code is Code.DEAD
    before = snapshot(r)

    again = scripts.fail(J1, token, "boom again", now_ms=T0 + 50)

    after = snapshot(r)
    assert again == FailResult(Code.DEAD)
    assert changed(before, after) == set()
    assert after[K.dead] == [(J1, T0 + 1)]
    assert after[K.job(J1)]["last_error"] == "boom"


def test_permanent_failure_is_dead_at_once_whatever_attempts_remain(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1, max_retries=3).token

    result = scripts.fail(J1, token, "PermanentFailure: no", permanent=True, now_ms=T0)

    assert result == FailResult(Code.DEAD)
    assert snapshot(r)[K.dead] == [(J1, T0)]
    assert job(r, J1).attempts == 1
    assert r.zcard(K.retrying) == 0


def test_retries_never_change_the_original_scheduled_at(r: redis.Redis, scripts: Scripts) -> None:
    due = T0 + 60_000
    scripts.enqueue(request(scheduled_at=format_ms(due)), J1, now_ms=T0)
    assert scripts.promote(now_ms=due).scheduled == [J1]
    token = claim(scripts, J1, now=due).token

    retry_at = scripts.fail(J1, token, "boom", now_ms=due).next_retry_at
    assert job(r, J1).scheduled_at == due
    token = run_again(scripts, J1, retry_at)

    assert job(r, J1).scheduled_at == due
    assert job(r, J1).status is JobState.PROCESSING


def test_fail_of_a_missing_job_is_not_found(r: redis.Redis, scripts: Scripts) -> None:
    assert scripts.fail(J1, 1, "boom", now_ms=T0) == FailResult(Code.NOT_FOUND)
    assert snapshot(r) == {}
