"""Every view agrees: gateway /stats, gateway /metrics, workerd /metrics and raw Redis.

Real processes (gunicorn with 2 workers, ``python -m workerd`` with 1 worker) on the private
Redis. The expected counts come from raw ZCARD/HGET on key names spelled out in the test, not
from shared.engine.queries, which both servers use.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest
import redis

from shared.engine.keys import Keys
from tests.observability.conftest import PREFIX, STATES, poll, samples, total
from tests.support.gunicorn import Gunicorn
from tests.support.workerd import Workerd

FAR_FUTURE = "2099-01-01T00:00:00Z"
WAIT = 15.0


def _enqueue(gw: Gunicorn, body: dict[str, Any]) -> str:
    status, _, doc = gw.request("POST", "/enqueue", body)
    assert status == 201, doc
    return doc["id"]


def _wait_status(gw: Gunicorn, job_ids: list[str], status: str) -> None:
    def reached() -> bool:
        return all(gw.request("GET", f"/jobs/{i}")[2]["status"] == status for i in job_ids)

    poll(reached, WAIT, f"{len(job_ids)} jobs to be {status}")


def _raw_states(r: redis.Redis) -> dict[str, int]:
    return {state: r.zcard(f"{PREFIX}{state}") for state in STATES}


def _raw_workers(r: redis.Redis) -> tuple[int, int]:
    live = busy = 0
    keys = Keys()  # the registry lives in the global slot, not under a queue's prefix
    for member in r.zrange(keys.workers, 0, -1):
        record = r.hmget(keys.worker(member.decode()), "workers", "busy")
        if record[0] is not None:
            live += int(record[0])
            busy += int(record[1] or 0)
    return live, busy


def _state_gauges(parsed: dict, queue: str = "default") -> dict[str, int]:
    return {
        state: int(parsed[("taskforge_jobs", (("queue", queue), ("state", state)))])
        for state in STATES
    }


@pytest.mark.slow
def test_stats_both_metrics_endpoints_and_raw_redis_agree_after_a_mixed_workload(
    r: redis.Redis,
    start_workerd: Callable[..., Workerd],
    start_gateway: Callable[..., contextlib.AbstractContextManager[Gunicorn]],
) -> None:
    # One worker, and retries far enough out that a retrying job stays retrying.
    workerd = start_workerd(WORKER_COUNT="1", TASK_RETRY_BASE_DELAY="60s")
    with start_gateway() as gw:
        completed = [_enqueue(gw, {"type": "demo.noop"}) for _ in range(3)]
        dead = [_enqueue(gw, {"type": "permanent"}) for _ in range(2)]
        retrying = [_enqueue(gw, {"type": "demo.fail", "max_retries": 3})]
        _wait_status(gw, completed, "completed")
        _wait_status(gw, dead, "dead")
        _wait_status(gw, retrying, "retrying")
        scheduled = [
            _enqueue(gw, {"type": "demo.noop", "scheduled_at": FAR_FUTURE}) for _ in range(3)
        ]
        status, _, _ = gw.request("POST", f"/jobs/{scheduled[0]}/cancel")
        assert status == 200
        running = _enqueue(gw, {"type": "demo.sleep", "payload": {"seconds": 30}, "timeout": 120})
        _wait_status(gw, [running], "processing")
        # The only worker is busy: these stay pending.
        pending = [_enqueue(gw, {"type": "demo.noop"}) for _ in range(2)]

        expected = {
            "pending": 2,
            "processing": 1,
            "scheduled": 2,
            "retrying": 1,
            "completed": 3,
            "dead": 2,
            "canceled": 1,
        }
        assert len(pending) == expected["pending"]
        raw = _raw_states(r)
        assert raw == expected
        # The registry is refreshed every 2 s: wait until it shows the running job.
        poll(lambda: _raw_workers(r) == (1, 1), WAIT, "the registry to show 1 live, 1 busy")
        raw_live, raw_busy = _raw_workers(r)

        status, _, stats = gw.request("GET", "/stats")
        assert status == 200
        assert stats["jobs"] == raw
        assert stats["total"] == sum(raw.values())
        assert stats["oldest_pending_age_seconds"] >= 0
        assert stats["queues"]["default"]["jobs"] == raw  # the only queue: all of it
        assert (stats["workers"]["live"], stats["workers"]["busy"]) == (raw_live, raw_busy)

        status, _, body = gw.request("GET", "/metrics")
        assert status == 200
        gw_metrics = samples(body.decode())
        claimed = len(completed) + len(dead) + len(retrying) + 1

        # A worker's counts reach /metrics up to 0.3 s after Redis shows the transition
        # (docs/OBSERVABILITY.md, "When a worker's counts arrive"): the running job's claim
        # among them, while the registry may already show it.
        def claim_counted() -> dict[Any, float] | None:
            code, _, wd_body = workerd.http("/metrics")
            assert code == 200
            found = samples(wd_body.decode())
            counted = (
                total(found, "taskforge_jobs_claimed_total") == claimed
                and total(found, "taskforge_queue_wait_seconds_count") == claimed
            )
            return found if counted else None

        wd_metrics = poll(
            claim_counted, WAIT, "workerd's counts to include the running job's claim"
        )

        for parsed in (gw_metrics, wd_metrics):
            assert _state_gauges(parsed) == raw
            assert parsed[("taskforge_fleet_workers_live", ())] == raw_live
            assert parsed[("taskforge_fleet_workers_busy", ())] == raw_busy
            assert parsed[("taskforge_fleet_workers_hosts", ())] == 1
            assert parsed[("taskforge_oldest_pending_age_seconds", (("queue", "default"),))] >= 0

        # Lifecycle counters: the gateway counts what it did, workerd what its workers did.
        assert total(gw_metrics, "taskforge_jobs_enqueued_total") == 12
        assert total(gw_metrics, "taskforge_jobs_canceled_total") == 1
        assert gw_metrics[("taskforge_enqueue_request_duration_seconds_count", ())] == 12
        assert total(wd_metrics, "taskforge_jobs_completed_total") == raw["completed"]
        assert total(wd_metrics, "taskforge_jobs_dead_total") == raw["dead"]
        assert total(wd_metrics, "taskforge_jobs_retried_total") == raw["retrying"]
        assert total(wd_metrics, "taskforge_jobs_failed_total") == 3
        assert total(wd_metrics, "taskforge_jobs_claimed_total") == claimed
        permanent = (("queue", "default"), ("type", "permanent"))
        assert wd_metrics[("taskforge_jobs_claimed_total", permanent)] == 2
        assert total(wd_metrics, "taskforge_queue_wait_seconds_count") == claimed
        assert wd_metrics[("taskforge_active_workers", ())] == 1
        assert wd_metrics[("taskforge_busy_workers", ())] == 1
