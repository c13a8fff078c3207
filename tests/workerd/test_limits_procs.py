"""Limits with real workerd processes: other types flow past a limited one, a SIGKILLed
worker's slot comes back (through the supervisor's release), no slot leaks, no worker spins."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import redis

from shared.engine.keys import Keys
from shared.model import limit_rules
from shared.model.jobs import JobState
from tests.support.tools import wait_until
from tests.support.workerd import Workerd
from tests.workerd.conftest import Engine, Journal

K = Keys()


def running_of(r: redis.Redis, job_type: str) -> int:
    return int(r.zlexcount(K.running, f"[{job_type}|", f"({job_type}}}"))


def test_a_limited_type_never_runs_past_its_limit_and_a_killed_workers_slot_comes_back(
    start_workerd: Callable[..., Workerd], engine: Engine, journal: Journal, r: redis.Redis
) -> None:
    doc = {"types": {"journal": {"concurrency": 1}}}
    engine.scripts.set_limits("default", limit_rules.parse_limits(doc).compact_json())
    workerd = start_workerd(WORKER_COUNT="3")
    slow = [engine.enqueue("journal", {"file": journal.file, "sleep": 0.5}) for _ in range(3)]
    quick = [engine.enqueue("demo.noop") for _ in range(6)]
    [first] = journal.wait_for("start")
    # The quick jobs run past the held journal jobs while the first one runs.
    engine.wait_all(quick, {JobState.COMPLETED}, timeout=10)
    assert running_of(r, "journal") == 1

    os.kill(first["pid"], signal.SIGKILL)
    killed_at = time.time()
    peak = 0

    def all_done() -> bool:
        nonlocal peak
        peak = max(peak, running_of(r, "journal"))
        pipe = r.pipeline(transaction=False)
        for job_id in slow:
            pipe.hget(K.job(job_id), "status")
        return all(s == b"completed" for s in pipe.execute())

    wait_until(all_done, 20, "the journal jobs to complete")
    assert peak <= 1
    ends = sorted(journal.entries("end"), key=lambda e: e["start"])
    starts = sorted(journal.entries("start"), key=lambda e: e["start"])
    assert len(ends) == 3 and len(starts) == 4  # the killed execution never ended
    # One at a time: each execution started after the one before it ended (or was killed).
    finished = {e["id"]: e["end"] for e in ends if e["attempt"] == 1}
    previous_end = None
    for start in starts:
        if previous_end is not None:
            assert start["start"] >= previous_end
        previous_end = killed_at if start["pid"] == first["pid"] else finished.get(start["id"])
    # No slot leaked, nothing left held.
    assert r.zcard(K.running) == 0 and r.zcard(K.held) == 0
    workerd.wait_for("job_recovered", job_id=first["id"])


def test_idle_workers_do_not_spin_on_a_saturated_limit(
    start_workerd: Callable[..., Workerd], engine: Engine, journal: Journal, r: redis.Redis
) -> None:
    doc = {"concurrency": 1, "types": {"journal": {"concurrency": 1}}}
    engine.scripts.set_limits("default", limit_rules.parse_limits(doc).compact_json())
    # The default lease: a short one shortens an idle worker's wait (workerd.worker).
    start_workerd(WORKER_COUNT="3", TASK_VISIBILITY_TIMEOUT="30s")
    held = [engine.enqueue("journal", {"file": journal.file, "sleep": 3}) for _ in range(20)]
    journal.wait_for("start")
    time.sleep(0.3)  # let the other workers settle on the empty answer (a measurement window)
    r.config_resetstat()
    window = 1.5
    time.sleep(window)
    calls = sum(v["calls"] for v in r.info("commandstats").values())
    # Two idle workers block on the wake list (1 BLPOP a second each, a claim behind it), the
    # running one renews, the scheduler ticks: tens of commands a second, not thousands.
    assert calls / window < 150, calls
    assert running_of(r, "journal") == 1
    assert engine.job(held[-1]).status is JobState.PENDING
