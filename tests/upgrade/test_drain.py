"""workerd's scheduler reads v1 until it is drained: jobs an old gateway enqueues under v1 after
the upgrade ran still reach v2, at the cost of one EXISTS every few seconds once v1 is empty."""

from __future__ import annotations

import logging
import os

import pytest
import redis

from shared.jobs import JobState
from shared.queries import get_job
from shared.scripts import Scripts
from shared.upgrade import Upgrade
from tests.fakes import IdleSlot
from tests.upgrade.conftest import NOW, T0, V1K, K, job_id, v1_job_keys
from tests.upgrade.v1 import V1
from workerd import v1_drain
from workerd.scheduler import SchedulerProcess
from workerd.v1_drain import CHECK_INTERVAL, FAILED_PAUSE, V1Drain


def moved_lines(caplog: pytest.LogCaptureFixture, event: str = "v1_jobs_moved") -> list[dict]:
    """Return the fields of each `event` line the duty logged."""
    return [
        {k: v for k, v in vars(rec).items() if k.startswith(("moved", "keys_", "held"))}
        for rec in caplog.records
        if rec.getMessage() == event
    ]


def commands(r: redis.Redis) -> dict[str, int]:
    """Return the calls per command since the last CONFIG RESETSTAT (ours: a private server)."""
    stats = r.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def test_the_scheduler_moves_v1_jobs_enqueued_after_it_started(
    r: redis.Redis, v1: V1, scripts: Scripts, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="workerd.v1_drain")
    scheduler = SchedulerProcess(scripts, IdleSlot(), os.getppid(), reconnect_grace=0)
    scheduler.step(0.0, now_ms=NOW)  # v1 empty: nothing to move
    v1.enqueue(job_id(1), {"type": "t"}, key="k1", now_ms=NOW)  # an old gateway, later
    v1.enqueue(job_id(2), {"type": "t", "priority": 3}, now_ms=NOW)

    scheduler.step(CHECK_INTERVAL, now_ms=NOW)

    for jid in (job_id(1), job_id(2)):
        job = get_job(r, K, jid)
        assert job is not None and job.status is JobState.PENDING, jid
    assert r.hget(K.idempotency("k1"), "job_id") == job_id(1).encode()
    assert v1_job_keys(r) == []
    assert moved_lines(caplog) == [{"moved": 2, "moved_pending": 2, "keys_moved": 1}]


def test_an_empty_v1_costs_one_exists_per_check(r: redis.Redis, upgrade: Upgrade) -> None:
    drain = V1Drain(upgrade)
    r.config_resetstat()

    for now in (0.0, 1.0, 2.0, CHECK_INTERVAL, CHECK_INTERVAL + 1):
        drain.tick(now)

    assert {k: n for k, n in commands(r).items() if k != "config|resetstat"} == {"exists": 2}


def test_a_job_an_old_worker_holds_moves_once_it_finishes_then_the_drain_is_logged(
    r: redis.Redis, v1: V1, upgrade: Upgrade, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="workerd.v1_drain")
    drain = V1Drain(upgrade)
    v1.enqueue(job_id(1), {"type": "t"}, now_ms=NOW)
    claimed = v1.claim("old", now_ms=NOW)
    assert claimed is not None
    drain.tick(0.0, now_ms=NOW)
    assert moved_lines(caplog) == [] and get_job(r, K, job_id(1)) is None

    v1.complete(job_id(1), claimed.token, now_ms=NOW)
    drain.tick(CHECK_INTERVAL, now_ms=NOW)
    drain.tick(CHECK_INTERVAL * 2, now_ms=NOW)

    assert moved_lines(caplog) == [{"moved": 1, "moved_completed": 1}]
    assert [rec.getMessage() for rec in caplog.records].count("v1_drained") == 1
    job = get_job(r, K, job_id(1))
    assert job is not None and job.status is JobState.COMPLETED


def test_the_walk_for_idempotency_keys_goes_on_over_several_ticks(
    r: redis.Redis, v1: V1, upgrade: Upgrade, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(v1_drain, "SCANS", 1)
    upgrade.scan_count = 10
    for n in range(1, 61):
        v1.enqueue(job_id(n), {"type": "t"}, key=f"k{n}", now_ms=T0)
    drain = V1Drain(upgrade)

    ticks = 0
    while (drain.cursor is not None or ticks == 0) and ticks < 100:
        drain.tick(float(ticks), now_ms=NOW)
        ticks += 1

    assert r.exists(*(K.idempotency(f"k{n}") for n in range(1, 61))) == 60
    assert r.exists(*(V1K.idempotency(f"k{n}") for n in range(1, 61))) == 0
    assert ticks > 2  # 60 jobs and 60 keys, ten keys a SCAN call: the walk took several ticks


def test_a_script_error_is_logged_and_pauses_the_duty_only(
    r: redis.Redis, v1: V1, upgrade: Upgrade, caplog: pytest.LogCaptureFixture
) -> None:
    v1.enqueue(job_id(1), {"type": "t"}, now_ms=T0)
    drain = V1Drain(upgrade)

    def broken(*args: object, **kwargs: object) -> None:
        raise redis.ResponseError("ERR something in the script")

    upgrade.move_jobs = broken  # type: ignore[method-assign]
    drain.tick(0.0)

    assert [rec.getMessage() for rec in caplog.records] == ["v1_drain_failed"]
    assert drain.next_check == FAILED_PAUSE


def test_a_connection_error_is_the_schedulers_to_back_off(upgrade: Upgrade) -> None:
    drain = V1Drain(upgrade)

    def down(*args: object) -> bool:
        raise redis.ConnectionError("gone")

    upgrade.v1_holds_jobs = down  # type: ignore[method-assign]
    with pytest.raises(redis.ConnectionError):
        drain.tick(0.0)
