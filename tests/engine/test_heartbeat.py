"""heartbeat.lua: live workers are recorded with a TTL; the registry forgets silent ones."""

from __future__ import annotations

import time

import pytest
import redis

from shared.engine.engine_types import HostBeat, HostNotFound
from shared.engine.scripts import Scripts
from tests.engine.conftest import T0, K, assert_ttl, changed, snapshot

TTL = 15_000


def test_heartbeat_records_the_worker_with_a_ttl(r: redis.Redis, scripts: Scripts) -> None:
    before = snapshot(r)

    beat = scripts.heartbeat("w1", {"host": "h1", "pid": 42}, TTL, now_ms=T0)

    after = snapshot(r)
    assert beat == HostBeat(live=1, quiet=False)
    assert changed(before, after) == {K.workers, K.worker("w1")}
    assert after[K.workers] == [("w1", T0)]
    assert after[K.worker("w1")] == {"host": "h1", "pid": 42, "last_seen": T0, "quiet": 0}
    assert_ttl(r, K.worker("w1"), TTL)


def test_heartbeat_replaces_the_previous_fields(r: redis.Redis, scripts: Scripts) -> None:
    scripts.heartbeat("w1", {"host": "h1", "job": "abc"}, TTL, now_ms=T0)

    scripts.heartbeat("w1", {"host": "h1"}, TTL, now_ms=T0 + 1_000)

    assert snapshot(r)[K.worker("w1")] == {"host": "h1", "last_seen": T0 + 1_000, "quiet": 0}
    assert r.zscore(K.workers, "w1") == T0 + 1_000


def test_heartbeat_registry_forgets_workers_silent_longer_than_the_ttl(
    r: redis.Redis, scripts: Scripts
) -> None:
    scripts.heartbeat("old", {}, TTL, now_ms=T0)
    scripts.heartbeat("edge", {}, TTL, now_ms=T0 + 1)
    now = T0 + 1 + TTL  # "edge" was heard exactly one TTL ago: still counted

    beat = scripts.heartbeat("new", {}, TTL, now_ms=now)

    assert beat.live == 2
    assert snapshot(r)[K.workers] == [("edge", T0 + 1), ("new", now)]


def test_heartbeat_of_a_leaving_worker_deletes_its_record(r: redis.Redis, scripts: Scripts) -> None:
    scripts.heartbeat("w1", {"host": "h1"}, TTL, now_ms=T0)
    scripts.heartbeat("w2", {"host": "h1"}, TTL, now_ms=T0)

    beat = scripts.heartbeat("w1", {}, TTL, leaving=True, now_ms=T0 + 1)

    after = snapshot(r)
    assert beat.live == 1
    assert K.worker("w1") not in after
    assert after[K.workers] == [("w2", T0)]


def test_heartbeat_record_expires_when_not_refreshed(r: redis.Redis, scripts: Scripts) -> None:
    scripts.heartbeat("w1", {"host": "h1"}, 50, now_ms=T0)
    assert r.exists(K.worker("w1")) == 1

    time.sleep(0.15)

    assert r.exists(K.worker("w1")) == 0


# --- quiet: the supervisor's state, an API request (quiet_host.lua), a signal --------------


def test_the_record_says_quiet_when_the_supervisor_is(r: redis.Redis, scripts: Scripts) -> None:
    beat = scripts.heartbeat("w1", {"host": "h1", "workers": 2}, TTL, quiet=True, now_ms=T0)

    assert beat.quiet is True
    assert snapshot(r)[K.worker("w1")]["quiet"] == 1
    assert scripts.stats()[1].quiet == 1  # fleet.lua counts it


def test_a_quiet_request_lands_in_a_live_record_and_the_next_heartbeat_applies_it(
    r: redis.Redis, scripts: Scripts
) -> None:
    scripts.heartbeat("w1", {"host": "h1"}, TTL, now_ms=T0)
    before = snapshot(r)

    applied = scripts.quiet_host("w1", True)

    after = snapshot(r)
    assert applied is False  # what the host runs with until its next heartbeat
    assert changed(before, after) == {K.worker("w1")}
    assert after[K.worker("w1")] == before[K.worker("w1")] | {"quiet_request": 1}
    assert K.worker("w1") in after.expiring  # the request does not keep the record alive

    beat = scripts.heartbeat("w1", {"host": "h1"}, TTL, quiet=False, now_ms=T0 + 1)

    assert beat.quiet is True
    assert snapshot(r)[K.worker("w1")]["quiet"] == 1


def test_a_request_stays_until_the_supervisor_reports_the_state_it_asked_for(
    r: redis.Redis, scripts: Scripts
) -> None:
    scripts.heartbeat("w1", {}, TTL, now_ms=T0)
    scripts.quiet_host("w1", True)
    scripts.heartbeat("w1", {}, TTL, quiet=False, now_ms=T0 + 1)
    assert snapshot(r)[K.worker("w1")]["quiet_request"] == 1  # not yet reported back

    beat = scripts.heartbeat("w1", {}, TTL, quiet=True, now_ms=T0 + 2)

    assert beat.quiet is True
    assert "quiet_request" not in snapshot(r)[K.worker("w1")]


def test_a_resume_request_unquiets_a_quiet_host(r: redis.Redis, scripts: Scripts) -> None:
    scripts.heartbeat("w1", {}, TTL, quiet=True, now_ms=T0)

    assert scripts.quiet_host("w1", False) is True

    assert scripts.heartbeat("w1", {}, TTL, quiet=True, now_ms=T0 + 1).quiet is False


def test_a_signal_since_the_last_heartbeat_wins_over_a_waiting_request(
    r: redis.Redis, scripts: Scripts
) -> None:
    scripts.heartbeat("w1", {}, TTL, now_ms=T0)
    scripts.quiet_host("w1", True)

    beat = scripts.heartbeat("w1", {}, TTL, quiet=False, quiet_by_signal=True, now_ms=T0 + 1)

    assert beat.quiet is False
    assert snapshot(r)[K.worker("w1")] == {"last_seen": T0 + 1, "quiet": 0}


def test_a_quiet_request_for_an_unknown_host_is_not_found_and_writes_nothing(
    r: redis.Redis, scripts: Scripts
) -> None:
    scripts.heartbeat("w1", {}, TTL, leaving=True, now_ms=T0)
    before = snapshot(r)

    with pytest.raises(HostNotFound):
        scripts.quiet_host("w1", True)

    assert changed(before, snapshot(r)) == set()
