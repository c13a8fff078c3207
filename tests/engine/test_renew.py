"""renew.lua: extend the leases of running jobs, only with the current token."""

from __future__ import annotations

import redis

from shared.engine.engine_types import Code
from shared.engine.scripts import Scripts
from tests.engine.conftest import (
    J1,
    J2,
    J3,
    POLICY,
    T0,
    K,
    changed,
    finish,
    snapshot,
    start,
)


def test_renew_extends_the_lease_from_now_and_touches_only_processing(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1).token
    before = snapshot(r)

    assert scripts.renew([(J1, token)], now_ms=T0 + 7_000) == [Code.DONE]

    after = snapshot(r)
    assert changed(before, after) == {K.processing}
    assert after[K.processing] == [(J1, T0 + 7_000 + POLICY.lease_ms)]


def test_renew_with_a_stale_token_changes_nothing_and_says_so(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1).token
    # The lease expired and another worker now runs the job with a newer token.
    scripts.recover(now_ms=T0 + POLICY.lease_ms + 1)
    scripts.claim("w2", now_ms=T0 + POLICY.lease_ms + 2)
    before = snapshot(r)

    assert scripts.renew([(J1, token)], now_ms=T0 + 20_000) == [Code.STALE_TOKEN]

    assert changed(before, snapshot(r)) == set()


def test_renew_answers_each_lease_of_a_batch_on_its_own(r: redis.Redis, scripts: Scripts) -> None:
    live = start(scripts, J1).token
    done = finish(scripts, J2).token  # its holder finished it: nothing to renew, nothing lost
    other = start(scripts, J3).token
    before = snapshot(r)

    answers = scripts.renew([(J1, live), (J2, done), (J3, other + 1)], now_ms=T0 + 5_000)

    after = snapshot(r)
    assert answers == [Code.DONE, Code.WRONG_STATE, Code.STALE_TOKEN]
    assert changed(before, after) == {K.processing}
    assert dict(after[K.processing]) == {
        J1: T0 + 5_000 + POLICY.lease_ms,
        J3: T0 + POLICY.lease_ms,
    }


def test_renew_writes_back_a_missing_lease_of_a_processing_job(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1).token
    # Only an operator's edit could get here: processing status without a processing entry,
    # which no recovery would ever find.
    r.zrem(K.processing, J1)

    answers = scripts.renew([(J1, token)], now_ms=T0 + 1)

    assert answers == [Code.DONE]
    assert r.zscore(K.processing, J1) == T0 + 1 + POLICY.lease_ms


def test_renew_of_a_missing_job_reports_not_found_and_changes_nothing(
    r: redis.Redis, scripts: Scripts
) -> None:
    before = snapshot(r)

    assert scripts.renew([(J1, 1)], now_ms=T0) == [Code.NOT_FOUND]

    assert changed(before, snapshot(r)) == set()


def test_renew_with_no_leases_calls_nothing(scripts: Scripts) -> None:
    assert scripts.renew([], now_ms=T0) == []
