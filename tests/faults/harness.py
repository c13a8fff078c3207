"""The fault harness: enqueue with records, inject faults into a real workerd, measure.

Builds on tests/workerd/conftest.py (the ``start_workerd`` factory, leftover-process checks by
marker) and tests/support/tcp_proxy.py. Every wait polls a condition against a deadline; the
only sleeps are the deliberate fault cadence.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import signal
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import redis

from shared.engine.keys import Keys
from shared.engine.scripts import Scripts, load_source
from shared.model.jobs import validate_enqueue
from tests.faults.checker import OK, SETTLED, UNKNOWN, EnqueueRecord
from tests.support.tools import alive, wait_until
from tests.support.workerd import Workerd

HANDLERS = "workerd.demo,tests.faults.handlers_for_faults"
# The settings of the issue: a 2 s visibility timeout so a lost lease is recovered quickly.
FAULT_ENV = {
    "WORKER_COUNT": "2",
    "TASK_VISIBILITY_TIMEOUT": "2s",
    "TASKFORGE_HANDLERS": HANDLERS,
}


def enqueue_journaled(
    scripts: Scripts, count: int, journal: Path, *, sleep: float = 0.0
) -> list[EnqueueRecord]:
    """Enqueue `count` journaled jobs through the engine; record each as ok or unknown."""
    records = []
    for _ in range(count):
        records.append(enqueue_one(scripts, journaled_body(journal, sleep)))
    return records


def journaled_body(journal: Path, sleep: float = 0.0) -> dict[str, Any]:
    """Return the enqueue body of one journaled job."""
    return {"type": "journaled", "payload": {"file": str(journal), "sleep": sleep}}


def enqueue_one(scripts: Scripts, body: dict[str, Any]) -> EnqueueRecord:
    """Enqueue one job under a fresh id; a connection error leaves its outcome unknown."""
    job_id = str(uuid.uuid4())
    try:
        result = scripts.enqueue(validate_enqueue(body), job_id)
    except (redis.ConnectionError, redis.TimeoutError):
        return EnqueueRecord(job_id, UNKNOWN)
    assert result.created, result
    return EnqueueRecord(job_id, OK)


def settled(client: redis.Redis, job_ids: Sequence[str], keys: Keys | None = None) -> bool:
    """Return whether every job is completed, canceled or dead (raw HGETs in one pipeline)."""
    keys = keys or Keys()
    pipe = client.pipeline(transaction=False)
    for job_id in job_ids:
        pipe.hget(keys.job(job_id), "status")
    return all(s is not None and s.decode() in SETTLED for s in pipe.execute())


def wait_settled(
    client: redis.Redis, job_ids: Sequence[str], timeout: float, workerd: Workerd | None = None
) -> float:
    """Wait until every job is finished; return when that was seen (time.monotonic())."""

    def done() -> bool:
        _fail_if_exited(workerd)
        return settled(client, job_ids)

    wait_until(done, timeout, f"{len(job_ids)} jobs to finish")
    return time.monotonic()


def wait_drained(
    client: redis.Redis, timeout: float, workerd: Workerd | None = None, keys: Keys | None = None
) -> None:
    """Wait until the queue has no job pending or processing: also the jobs of requests that
    got no answer, which wait_settled cannot name. The invariant check reads the indexes and
    the hashes apart, so a job that moves between the two reads shows as in two states."""
    keys = keys or Keys()

    def drained() -> bool:
        _fail_if_exited(workerd)
        pipe = client.pipeline(transaction=False)
        pipe.zcard(keys.state_index("pending"))
        pipe.zcard(keys.state_index("processing"))
        return pipe.execute() == [0, 0]

    wait_until(drained, timeout, "no job pending or processing")


def _fail_if_exited(workerd: Workerd | None) -> None:
    """Fail a wait at once when the workerd it waits on has exited."""
    if workerd is not None and workerd.proc.poll() is not None:
        raise AssertionError(f"workerd exited ({workerd.proc.returncode})\n{workerd.tail()}")


@dataclass
class Kill:
    """One SIGKILL the harness sent."""

    pid: int
    at: float  # time.time()
    job_id: str | None  # the job the worker last started, per its log


def log_time(record: dict[str, Any]) -> float:
    """Return a JSON log line's ``ts`` as seconds since the epoch."""
    return datetime.fromisoformat(record["ts"].replace("Z", "+00:00")).timestamp()


def script_sha(name: str) -> bytes:
    """Return the SHA1 Redis knows a script by: what an EVALSHA request of it contains."""
    return hashlib.sha1(load_source(name).encode()).hexdigest().encode()


# A worker's log events that end its current job (it is then idle until the next job_started).
FINISH_EVENTS = frozenset(
    {"job_completed", "job_retry_scheduled", "job_dead", "job_released", "job_stale_ack"}
)


def running_jobs(records: Iterable[dict[str, Any]]) -> dict[int, list[str]]:
    """Return each pid's jobs started and not yet finished, per its log records, oldest first.

    Kept per job thread (the worker id a ``job_started`` line names: one per process, or
    ``<child>.t<k>`` with WORKER_THREADS): a thread's next start replaces its last job, so a
    job that ended by a line not in FINISH_EVENTS (a cancel) is not counted as running.
    """
    running: dict[tuple[int, str], str] = {}
    for rec in records:
        event, pid = rec.get("event"), rec.get("pid", -1)
        if event == "job_started":
            thread = (pid, rec.get("worker_id") or "")
            running.pop(thread, None)  # re-inserted last: the newest start comes last
            running[thread] = rec["job_id"]
        elif event in FINISH_EVENTS:
            for thread, job_id in list(running.items()):
                if thread[0] == pid and job_id == rec.get("job_id"):
                    del running[thread]
    by_pid: dict[int, list[str]] = {}
    for (pid, _), job_id in running.items():
        by_pid.setdefault(pid, []).append(job_id)
    return by_pid


def busy_workers(workerd: Workerd) -> dict[int, str]:
    """Return live worker pids running a job (started, not yet finished), with the job (with
    WORKER_THREADS, the one started last of the process's jobs)."""
    started = running_jobs(workerd.logs())
    return {pid: started[pid][-1] for pid in workerd.children("worker") if pid in started}


def kill_workers(
    workerd: Workerd,
    *,
    duration: float,
    interval: float,
    rng: random.Random,
    stop_when: Any = None,
) -> list[Kill]:
    """SIGKILL a random worker that is mid-job every `interval` s for `duration` s.

    Only workers that already started a job are chosen, so no child dies while booting (the
    supervisor halts after five boot failures in a row, which is not this fault).
    """
    kills: list[Kill] = []
    deadline = time.monotonic() + duration
    while time.monotonic() < deadline:
        if stop_when is not None and stop_when():
            break
        candidates = busy_workers(workerd)
        if candidates:
            pid = rng.choice(sorted(candidates))
            if alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    kills.append(Kill(pid, time.time(), candidates[pid]))
        time.sleep(interval)  # the fault cadence, not a synchronisation
    return kills


def recovery_times(workerd: Workerd, kills: Iterable[Kill]) -> list[float]:
    """For each kill, seconds until the killed job started again in another process."""
    started = [(rec["job_id"], rec["pid"], log_time(rec)) for rec in workerd.events("job_started")]
    times = []
    for kill in kills:
        again = [
            t
            for job_id, pid, t in started
            if job_id == kill.job_id and pid != kill.pid and t >= kill.at - 0.001
        ]
        if again:
            times.append(max(0.0, min(again) - kill.at))
    return times


def print_figures(scenario: str, figures: dict[str, Any]) -> None:
    """Print one scenario's figures as a single JSON line (``pytest -s`` shows them)."""
    print(f"\nFAULT-FIGURES {scenario} " + json.dumps(figures, sort_keys=True, default=str))
