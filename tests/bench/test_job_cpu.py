"""bench.job_cpu: its profile summary from canned stacks, and one small real drain."""

from __future__ import annotations

import logging

import pytest

from bench import job_cpu, job_parts
from shared.obs import log
from tests.support.redis_server import RedisServer
from tests.support.tools import ROOT

STACKS = "\n".join(
    [
        "main (workerd/__main__.py:10);WorkerProcess.step (workerd/worker.py:1);"
        "WorkerProcess._execute (workerd/worker.py:2);send (redis/connection.py:3) 6",
        "main (workerd/__main__.py:10);WorkerProcess.step (workerd/worker.py:1);"
        "WorkerProcess._execute (workerd/worker.py:2);record (shared/engine/lifecycle.py:4) 3",
        "main (workerd/__main__.py:10);WorkerProcess.step (workerd/worker.py:1) 1",
        "main (workerd/__main__.py:10);Supervisor.step (workerd/supervisor.py:9) 40",
    ]
)


def test_the_profile_counts_only_samples_inside_a_job_step_by_own_time_and_time_under() -> None:
    own, under = job_cpu.top_frames(STACKS, 3)
    assert own == [
        ("send (connection.py)", 60.0),
        ("record (lifecycle.py)", 30.0),
        ("WorkerProcess.step (worker.py)", 10.0),
    ]
    # The frames every sample passes through (main, the step) say nothing: left out.
    assert under[0] == ("WorkerProcess._execute (worker.py)", 90.0)
    assert all(not frame.startswith(("main", "WorkerProcess.step")) for frame, _ in under)


@pytest.mark.slow
def test_a_small_drain_reports_worker_cpu_per_job_and_the_rate(redis_server: RedisServer) -> None:
    run = job_cpu.drain(ROOT, redis_server.url, 300, 1, None)
    assert 0 < run["worker_cpu_us_per_job"] < 100_000
    assert run["jobs_per_s"] > 0


def test_every_piece_bench_job_parts_times_runs_and_says_how_often_a_job_runs_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        pieces = job_parts.pieces()  # configures logging as workerd does: undone below
        for _, per_job, call in pieces:
            call()
            assert per_job >= 0
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        log._configured = None
    assert '"event": "job_started"' in capsys.readouterr().out
    assert sum(per_job for what, per_job, _ in pieces if what.startswith("an INFO line")) == 2
