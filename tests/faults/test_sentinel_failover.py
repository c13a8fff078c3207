"""Scenario 16: kill -9 of the Redis primary under Sentinel, with jobs flowing.

All real processes on loopback: a primary, one replica and three sentinels
(tests/support/sentinel.py), the gateway under gunicorn and a workerd, both given the
``redis+sentinel://`` URL. A steady enqueue load goes through HTTP, recording which enqueues
were acknowledged (2xx) and their ids; the ``journaled`` handler records every execution. The
primary is SIGKILLed mid-flow; the sentinels promote the replica.

Measured: seconds from the kill until enqueues resume (the first 2xx of a request sent after
the kill) and until completions resume (the first job_completed workerd logs after it);
acknowledged jobs lost (no job on the new primary, or never finished); duplicates (jobs whose
handler ran more than once). Replication is asynchronous, so without the durable mode
(``wait_replicas``, TASKFORGE_WAIT_REPLICAS=1) the writes of the last
moment before the kill may be lost: the figures say how many, and the test asserts only what
is guaranteed whatever was lost (see the asserts). With the durable mode (the ``durable`` runs)
no acknowledged job may be lost; the killed server then returns as the new primary's replica,
since a primary without one can confirm nothing.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from shared.engine.keys import Keys
from tests.faults.checker import OK, EnqueueRecord, check, finished_or_gone, read_journal
from tests.faults.harness import FAULT_ENV, log_time, print_figures
from tests.faults.http_load import QueueLoad
from tests.support.gunicorn import run_gunicorn
from tests.support.sentinel import sentinel_deployment
from tests.support.tools import free_port, wait_until
from tests.support.workerd import start_workerd, stop_all

pytestmark = pytest.mark.slow
KEYS = Keys()
PACE = 0.02  # seconds between two enqueues: a steady 50 a second, above what is drained
JOB_SLEEP = 0.01  # seconds each journaled job takes
WARM_UP_COMPLETIONS = 30  # jobs completed before the kill: the flow is established
RESUME_BOUND = 20.0  # seconds from the kill within which enqueues and completions must resume
AFTER_RESUME = 3.0  # seconds of load kept up once enqueues resumed
SETTLE_TIMEOUT = 60.0  # seconds for every surviving job to finish after the load stops
HTTP_TIMEOUT = 5.0


def run_failover(tmp_path: Path, *, wait_replicas: bool, replica_behind: float) -> dict[str, Any]:
    """Run the scenario; return its figures (after asserting what is guaranteed).

    `replica_behind`: seconds before the kill during which the replica receives nothing
    (tests/support/sentinel.py, stop_replication), so the kill loses what the primary
    acknowledged meanwhile; 0 kills the primary with the replica as up to date as it gets.
    """
    journal = tmp_path / "journal.jsonl"
    extra = {"TASKFORGE_WAIT_REPLICAS": "1"} if wait_replicas else {}
    with sentinel_deployment() as deployment:
        env = {**FAULT_ENV, "LOG_LEVEL": "INFO", "TASKFORGE_BIND_HOST": "127.0.0.1", **extra}
        workerd = start_workerd(
            {**env, "REDIS_URL": deployment.url, "PORT_WORKER": str(free_port())},
            tmp_path / "workerd.log",
            tmp_path / "workerd.err",
        )
        try:
            with run_gunicorn(deployment.url, tmp_path, **extra) as gateway:
                load = QueueLoad(
                    gateway, journal, pace=PACE, job_sleep=JOB_SLEEP, http_timeout=HTTP_TIMEOUT
                )
                load.thread.start()
                try:
                    wait_until(
                        lambda: len(workerd.events("job_completed")) >= WARM_UP_COMPLETIONS,
                        30.0,
                        "the flow of jobs before the kill",
                    )
                    old_port = deployment.primary_port()
                    assert old_port is not None
                    cut = time.time()
                    behind = deployment.stop_replication() if replica_behind else None
                    if behind is not None:
                        started = time.monotonic()
                        wait_until(  # the fault's duration, not a synchronisation
                            lambda: time.monotonic() - started >= replica_behind,
                            replica_behind + 1,
                            "the replica to fall behind",
                        )
                    dead = deployment.kill_primary()
                    killed = time.time()
                    if behind is not None:
                        behind.thaw()
                    new = deployment.wait_for_promotion(old_port)
                    promoted = time.time()
                    if wait_replicas:
                        # The promoted primary has no replica left, so with the durable mode
                        # nothing could be confirmed until one joins. The deployment has one
                        # replica (production runs two): the old primary's server comes back
                        # empty, as from a fresh disk, and replicates the new primary at once,
                        # as a second replica would have from the start. (Left to the
                        # sentinels, it is made a replica some 15 s later.)
                        dead.start()
                        rejoined = dead.client()
                        try:
                            rejoined.replicaof("127.0.0.1", new.port)
                        finally:
                            rejoined.close()
                    wait_until(
                        lambda: load.first_ack_sent_after(killed),
                        RESUME_BOUND,
                        "enqueues after the failover",
                    )
                    wait_until(
                        lambda: [
                            e for e in workerd.events("job_completed") if log_time(e) > killed
                        ],
                        RESUME_BOUND,
                        "completions after the failover",
                    )
                    resumed = time.monotonic()
                    # Both probes answer from the promoted replica, and say so.
                    address = f"127.0.0.1:{new.port}"
                    status, _, ready = gateway.request("GET", "/ready")
                    assert (status, ready.get("primary")) == (200, address), ready
                    status, _, raw = workerd.http("/ready")
                    assert status == 200 and json.loads(raw)["primary"] == address, raw
                    wait_until(
                        lambda: time.monotonic() - resumed >= AFTER_RESUME,
                        AFTER_RESUME + 1,
                        "the load after resuming",
                    )
                finally:
                    load.stop.set()
                    load.thread.join(HTTP_TIMEOUT + 1)
                client = new.client(socket_timeout=10)
                acked_ids = [job_id for _, _, job_id in load.acked]
                wait_until(
                    lambda: finished_or_gone(client, KEYS, acked_ids),
                    SETTLE_TIMEOUT,
                    "every surviving job to finish",
                    0.1,
                )
                records = [EnqueueRecord(job_id, OK) for job_id in acked_ids]
                executions = read_journal(journal)
                report = check(records, executions, client)
                completions = [log_time(e) for e in workerd.events("job_completed")]
                first_completion = min((t for t in completions if t > killed), default=None)
                enqueue_resumed = load.first_ack_sent_after(killed)
                acked_before_kill = sum(1 for _, answered, _ in load.acked if answered <= killed)
                acked_while_behind = sum(
                    1 for _, answered, _ in load.acked if cut <= answered <= killed
                )
                lost_ids = set(report.lost)
                missing = sum(1 for job_id in lost_ids if not client.exists(KEYS.job(job_id)))
                client.close()
        finally:
            problems = stop_all([workerd])
    figures = {
        **report.summary(),
        "jobs": len(acked_ids) + len(load.refused),
        "wait_replicas": wait_replicas,
        "replica_behind_s": replica_behind,
        "acked_while_behind": acked_while_behind if replica_behind else None,
        "promotion_s": round(promoted - killed, 2),
        "enqueue_resume_s": round(enqueue_resumed - killed, 2) if enqueue_resumed else None,
        "completion_resume_s": round(first_completion - killed, 2) if first_completion else None,
        "acked_before_kill": acked_before_kill,
        "lost_missing_job": missing,
        "refused_enqueues": len(load.refused),
        "refused_statuses": sorted({status for _, status in load.refused}),
    }
    name = "sentinel_failover" + (f"_replica_behind_{replica_behind:g}s" if replica_behind else "")
    print_figures(name + ("_wait_replicas" if wait_replicas else ""), figures)
    assert problems == [], problems

    # What is guaranteed whatever asynchronous replication lost:
    # - the system resumes: enqueues and completions within the bound (the waits above);
    # - the promoted primary is consistent: every script's writes reach the replica whole;
    assert report.violations == [], report.violations
    # - a job that ran more than once was touched by the old primary: its first execution
    #   started before the kill (a completion lost with the primary runs again); a job that
    #   started on the new primary alone runs once;
    by_job: dict[str, list[float]] = {}
    for execution in executions:
        by_job.setdefault(execution.job_id, []).append(execution.start)
    twice = set(report.overlapping) | set(report.sequential)
    unexplained = [job_id for job_id in twice if min(by_job[job_id]) > killed]
    assert unexplained == [], unexplained
    # - an execution of a job never acknowledged is one of the enqueues that got no 2xx;
    assert len(report.unexpected) <= len(load.refused), report.unexpected
    # - an acknowledged job lost was written by the old primary: sent before the kill (its
    #   answer may reach us just after it; nothing written to the new primary is lost);
    #   with the durable mode, none is.
    sent_at = {job_id: sent for sent, _, job_id in load.acked}
    acked_at = {job_id: answered for _, answered, job_id in load.acked}
    assert all(sent_at[job_id] <= killed for job_id in lost_ids), sorted(lost_ids)
    if replica_behind:
        # ... and, with the replica cut off, after the cut (less the instant replication takes).
        assert all(acked_at[job_id] >= cut - 0.1 for job_id in lost_ids), sorted(lost_ids)
    if wait_replicas:
        assert report.lost == [], report.lost
    return figures


# With the durable mode (TASKFORGE_WAIT_REPLICAS=1 on the gateway and workerd) lost must be 0.
@pytest.mark.parametrize("wait_replicas", [False, True], ids=["async", "durable"])
@pytest.mark.parametrize("replica_behind", [0.0, 0.5], ids=["replica_current", "replica_behind"])
def test_sentinel_failover_under_load(
    tmp_path: Path, wait_replicas: bool, replica_behind: float
) -> None:
    """Scenario 16: SIGKILL the primary while the gateway and workerd move jobs through it;
    once with the replica as current as replication makes it, once 0.5 s behind."""
    figures = run_failover(tmp_path, wait_replicas=wait_replicas, replica_behind=replica_behind)
    if replica_behind and not wait_replicas:
        # What the durable mode is for: the writes of the cut-off half second are gone.
        assert figures["lost"] > 0, figures
