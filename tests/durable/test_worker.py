"""Durable mode in a worker, stepped by hand on a real primary and replica: a completion or a
failure is counted only once WAIT confirms it; otherwise one warning, one count, and on."""

from __future__ import annotations

import logging
import os
import time

import pytest
import redis
from prometheus_client import REGISTRY

import workerd.demo  # noqa: F401 (registers the demo handlers)
from shared.engine.engine_types import Policy
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import validate_enqueue
from shared.settings.config import Settings
from tests.fakes import IdleSlot
from tests.support.replicated import Replicated
from workerd.worker import WorkerProcess

K = Keys()
SECRET = "payload-secret-7f3a"  # must never reach a log line


def counter(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def make_worker(pair: Replicated, primary: redis.Redis) -> WorkerProcess:
    env = {
        "REDIS_URL": pair.primary.url,
        "TASKFORGE_WAIT_REPLICAS": "1",
        "TASKFORGE_WAIT_TIMEOUT": "300ms",
    }
    settings = Settings.from_env(env)
    scripts = Scripts(primary, K, Policy.from_settings(settings))
    scripts.load()
    return WorkerProcess(settings, scripts, IdleSlot(), "w1", os.getppid())


def run_one(worker: WorkerProcess) -> None:
    """Step the worker until it has run one job (bounded)."""
    deadline = time.monotonic() + 5
    before = worker.jobs_done
    while worker.jobs_done == before:
        assert time.monotonic() < deadline, "the worker ran no job"
        worker.step()


@pytest.mark.parametrize(
    ("job_type", "counted", "op"),
    [
        ("demo.noop", "taskforge_jobs_completed_total", "complete"),
        ("demo.fail", "taskforge_jobs_dead_total", "fail"),
    ],
)
def test_an_outcome_is_counted_only_once_a_replica_has_it(
    pair: Replicated,
    primary: redis.Redis,
    replica: redis.Redis,
    caplog: pytest.LogCaptureFixture,
    job_type: str,
    counted: str,
    op: str,
) -> None:
    worker = make_worker(pair, primary)
    labels = {"type": job_type, "queue": "default"}
    body = {"type": job_type, "max_retries": 1, "payload": {"secret": SECRET}}
    worker.scripts.enqueue(validate_enqueue(body), "j-1")
    worker.scripts.enqueue(validate_enqueue(body), "j-2")
    before = counter(counted, **labels)
    timeouts = counter("taskforge_wait_replicas_timeouts_total", op=op)

    run_one(worker)
    assert counter(counted, **labels) == before + 1
    assert replica.hget(K.job("j-1"), "status") in (b"completed", b"dead")

    pair.replica.freeze()
    caplog.clear()
    with caplog.at_level(logging.INFO):
        run_one(worker)
    # Done on the primary, not counted: a failover may still undo it (the job then runs again).
    assert primary.hget(K.job("j-2"), "status") in (b"completed", b"dead")
    assert counter(counted, **labels) == before + 1
    assert counter("taskforge_wait_replicas_timeouts_total", op=op) == timeouts + 1
    lines = [rec for rec in caplog.records if rec.getMessage() == "write_not_replicated"]
    assert len(lines) == 1
    line = lines[0]
    assert (line.levelno, line.job_id, line.op, line.replicas, line.wanted) == (
        logging.WARNING,
        "j-2",
        op,
        0,
        1,
    )
    finished = {"job_completed", "job_dead", "job_retry_scheduled"}
    assert not [rec for rec in caplog.records if rec.getMessage() in finished]
    assert SECRET not in caplog.text
