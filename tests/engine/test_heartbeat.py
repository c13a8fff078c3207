"""heartbeat.lua: live workers are recorded with a TTL; the registry forgets silent ones."""

from __future__ import annotations

import time

import redis

from shared.scripts import Scripts
from tests.engine.conftest import T0, K, assert_ttl, changed, snapshot

TTL = 15_000


def test_heartbeat_records_the_worker_with_a_ttl(r: redis.Redis, scripts: Scripts) -> None:
    before = snapshot(r)

    live = scripts.heartbeat("w1", {"host": "h1", "pid": 42}, TTL, now_ms=T0)

    after = snapshot(r)
    assert live == 1
    assert changed(before, after) == {K.workers, K.worker("w1")}
    assert after[K.workers] == [("w1", T0)]
    assert after[K.worker("w1")] == {"host": "h1", "pid": 42, "last_seen": T0}
    assert_ttl(r, K.worker("w1"), TTL)


def test_heartbeat_replaces_the_previous_fields(r: redis.Redis, scripts: Scripts) -> None:
    scripts.heartbeat("w1", {"host": "h1", "job": "abc"}, TTL, now_ms=T0)

    scripts.heartbeat("w1", {"host": "h1"}, TTL, now_ms=T0 + 1_000)

    assert snapshot(r)[K.worker("w1")] == {"host": "h1", "last_seen": T0 + 1_000}
    assert r.zscore(K.workers, "w1") == T0 + 1_000


def test_heartbeat_registry_forgets_workers_silent_longer_than_the_ttl(
    r: redis.Redis, scripts: Scripts
) -> None:
    scripts.heartbeat("old", {}, TTL, now_ms=T0)
    scripts.heartbeat("edge", {}, TTL, now_ms=T0 + 1)
    now = T0 + 1 + TTL  # "edge" was heard exactly one TTL ago: still counted

    live = scripts.heartbeat("new", {}, TTL, now_ms=now)

    assert live == 2
    assert snapshot(r)[K.workers] == [("edge", T0 + 1), ("new", now)]


def test_heartbeat_of_a_leaving_worker_deletes_its_record(r: redis.Redis, scripts: Scripts) -> None:
    scripts.heartbeat("w1", {"host": "h1"}, TTL, now_ms=T0)
    scripts.heartbeat("w2", {"host": "h1"}, TTL, now_ms=T0)

    live = scripts.heartbeat("w1", {}, TTL, leaving=True, now_ms=T0 + 1)

    after = snapshot(r)
    assert live == 1
    assert K.worker("w1") not in after
    assert after[K.workers] == [("w2", T0)]


def test_heartbeat_record_expires_when_not_refreshed(r: redis.Redis, scripts: Scripts) -> None:
    scripts.heartbeat("w1", {"host": "h1"}, 50, now_ms=T0)
    assert r.exists(K.worker("w1")) == 1

    time.sleep(0.15)

    assert r.exists(K.worker("w1")) == 0
