"""Fault scenarios of issue 7 against a real workerd on the private Redis.

Each prints its figures on a ``FAULT-FIGURES`` line (run with ``-s`` to see them) for
docs/RELIABILITY.md. Processes are started by tests/workerd/conftest.py's ``start_workerd``,
which fails the test if any process of the run is left behind.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from shared.keys import Keys
from shared.scripts import Scripts, load_source
from tests._tools import RedisServer
from tests.faults.checker import check, read_journal
from tests.faults.harness import (
    FAULT_ENV,
    enqueue_journaled,
    enqueue_one,
    kill_workers,
    percentile,
    print_figures,
    recovery_times,
    settled,
    wait_settled,
)
from tests.support.tcp_proxy import TcpProxy
from tests.workerd.conftest import Workerd, start_workerd  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow
KEYS = Keys()


def test_sigkill_workers_mid_job(
    start_workerd: Callable[..., Workerd],  # noqa: F811
    r: redis.Redis,
    tmp_path: Path,
) -> None:
    """Scenario 1: SIGKILL a random busy worker every 0.5 s for 8 s while 200 jobs run."""
    journal = tmp_path / "journal.jsonl"
    workerd = start_workerd(**FAULT_ENV)
    began = time.monotonic()
    records = enqueue_journaled(Scripts(r, KEYS), 200, journal, sleep=0.08)
    ids = [rec.job_id for rec in records]
    kills = kill_workers(
        workerd, duration=8.0, interval=0.5, rng=random.Random(7), stop_when=lambda: settled(r, ids)
    )
    finished = wait_settled(r, ids, timeout=20.0, workerd=workerd)
    report = check(records, read_journal(journal), r)
    recovery = recovery_times(workerd, kills)
    figures = {
        **report.summary(),
        "jobs": len(ids),
        "kills": len(kills),
        "recovery_s_p50": percentile(recovery, 0.5),
        "recovery_s_max": max(recovery, default=None),
        "recovered_measured": len(recovery),
        "throughput_jobs_per_s": round(len(ids) / (finished - began), 1),
    }
    print_figures("sigkill_workers", figures)
    assert kills, "no worker was killed"
    assert report.lost == [], report.lost
    assert report.overlapping_duplicates == 0, report.overlapping
    assert report.sequential_duplicates <= len(kills), figures
    assert report.unexpected == []
    assert report.violations == [], report.violations


def test_poison_pill_goes_dead_others_flow(
    start_workerd: Callable[..., Workerd],  # noqa: F811
    r: redis.Redis,
    tmp_path: Path,
) -> None:
    """Scenario 5: a `crash` job among 300 normal jobs is dead after the recovery cap."""
    journal = tmp_path / "journal.jsonl"
    cap = 3
    workerd = start_workerd(**FAULT_ENV, TASK_MAX_RECOVERIES=str(cap))
    scripts = Scripts(r, KEYS)
    began = time.monotonic()
    records = enqueue_journaled(scripts, 150, journal, sleep=0.005)
    pill = enqueue_one(scripts, {"type": "crash"})
    records += [pill, *enqueue_journaled(scripts, 150, journal, sleep=0.005)]
    ids = [rec.job_id for rec in records]
    finished = wait_settled(r, ids, timeout=25.0, workerd=workerd)
    normal = [i for i in ids if i != pill.job_id]
    report = check(records, read_journal(journal), r, journaled=normal)
    pill_state = {k.decode(): v.decode() for k, v in r.hgetall(KEYS.job(pill.job_id)).items()}
    figures = {
        **report.summary(),
        "jobs": len(ids),
        "pill_status": pill_state.get("status"),
        "pill_recoveries": pill_state.get("recoveries"),
        "recovery_cap": cap,
        "worker_deaths": len(workerd.events("child_exited", kind="worker")),
        "throughput_jobs_per_s": round(len(ids) / (finished - began), 1),
    }
    print_figures("poison_pill", figures)
    assert pill_state.get("status") == "dead", pill_state
    assert report.statuses == {"completed": len(normal), "dead": 1}, report.statuses
    assert report.lost == []
    assert report.duplicates == 0, figures
    assert report.completed_unexecuted == []
    assert report.violations == [], report.violations


def _sha(script: str) -> bytes:
    return hashlib.sha1(load_source(script).encode()).hexdigest().encode()


def test_lost_replies_on_claim_and_complete(
    start_workerd: Callable[..., Workerd],  # noqa: F811
    r: redis.Redis,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    """Scenario 9: the reply of a claim or a complete (it ran in Redis) never reaches the worker."""
    journal = tmp_path / "journal.jsonl"
    scripts = Scripts(r, KEYS)  # the test's own client goes straight to Redis
    targets = [b"claim", b"complete"]
    drops: dict[str, int] = {"claim": 0, "complete": 0}
    with TcpProxy(redis_server.host, redis_server.port) as proxy:
        workerd = start_workerd(**FAULT_ENV, REDIS_URL=f"redis://{proxy.host}:{proxy.port}/0")
        began = time.monotonic()
        records = []
        for round_ in range(6):
            records += enqueue_journaled(scripts, 50, journal, sleep=0.01)
            name = targets[round_ % 2].decode()
            lost = proxy.drop_next_reply(_sha(name))
            if lost.wait(timeout=10.0):
                drops[name] += 1
            else:
                pytest.fail(f"no {name} call went through the proxy within 10 s\n{workerd.tail()}")
        records += enqueue_journaled(scripts, 50, journal, sleep=0.01)
        ids = [rec.job_id for rec in records]
        finished = wait_settled(r, ids, timeout=25.0, workerd=workerd)
    report = check(records, read_journal(journal), r)
    total_drops = sum(drops.values())
    figures = {
        **report.summary(),
        "jobs": len(ids),
        "dropped_replies": drops,
        "worker_deaths": len(workerd.events("child_exited", kind="worker")),
        "throughput_jobs_per_s": round(len(ids) / (finished - began), 1),
    }
    print_figures("lost_replies", figures)
    assert report.lost == [], report.lost
    assert report.overlapping_duplicates == 0, report.overlapping
    assert report.sequential_duplicates <= total_drops, figures
    assert report.completed_unexecuted == []
    assert report.statuses == {"completed": len(ids)}, report.statuses
    assert report.violations == [], report.violations
