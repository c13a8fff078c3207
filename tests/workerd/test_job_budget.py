"""The worker's Python budget per job, in counts a timer cannot blur (bench/PER_JOB_COST.md).

A real WorkerProcess runs trivial jobs from the private Redis, stepped in this process with
tracing off (the default). Per job it may make two log records at INFO (job_started and its
outcome's line; none at all when INFO is off), six metric writes (the claimed and completed
counters, one observation in each of the two histograms: a bucket and a sum each; the busy
gauge is counted at scrape time, workerd.obs_server) and build no span attributes. Each was
cut on purpose: a change that adds one per job changes a number here, with its measured cost.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable

import redis

import workerd.demo  # noqa: F401 (registers demo.noop)
from shared.engine.scripts import Scripts
from shared.model.jobs import validate_enqueue
from shared.obs import tracing
from shared.settings.config import Settings
from tests.fakes import IdleSlot
from tests.support.tally import Tally
from workerd.worker import WorkerProcess

JOBS = 5
LOG_RECORDS_PER_JOB = 2  # job_started, job_completed
METRIC_WRITES_PER_JOB = 6
SPAN_ATTRIBUTE_BUILDS_PER_JOB = 0  # tracing off


def run_jobs(r: redis.Redis, count: int) -> WorkerProcess:
    """Enqueue `count` demo.noop jobs and step a worker until it has run them all (bounded)."""
    scripts = Scripts(r)
    scripts.load()
    request = validate_enqueue({"type": "demo.noop"})
    for _ in range(count):
        scripts.enqueue(request, str(uuid.uuid4()))
    worker = WorkerProcess(Settings.from_env({}), scripts, IdleSlot(), "w-budget", os.getppid())
    deadline = time.monotonic() + 10
    while worker.jobs_done < count:
        assert time.monotonic() < deadline, f"the worker ran {worker.jobs_done} of {count} jobs"
        worker.step()
    return worker


def test_a_job_costs_two_info_lines_six_metric_writes_and_no_span_attributes(
    r: redis.Redis, tally: Tally, root_level: Callable[[int], None]
) -> None:
    assert not tracing.enabled()
    root_level(logging.INFO)
    run_jobs(r, 1)  # the first job makes each labelled metric child: not counted
    tally.clear()

    run_jobs(r, JOBS)

    assert dict(tally.records) == {"job_started": JOBS, "job_completed": JOBS}
    assert sum(tally.records.values()) == LOG_RECORDS_PER_JOB * JOBS
    assert tally.metric_writes == METRIC_WRITES_PER_JOB * JOBS
    assert tally.span_builds == SPAN_ATTRIBUTE_BUILDS_PER_JOB * JOBS


def test_a_disabled_level_builds_no_log_record(
    r: redis.Redis, tally: Tally, root_level: Callable[[int], None]
) -> None:
    root_level(logging.WARNING)

    run_jobs(r, JOBS)

    assert sum(tally.records.values()) == 0
