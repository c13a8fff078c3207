"""bench.queues: its scenarios and report from canned figures, and a small run end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import queues
from tests.support.tools import ROOT, require_tool


def canned(jobs_per_s: float, evalsha: float) -> dict:
    """Return one drain's figures as bench.queues records them."""
    return {
        "jobs_per_s": jobs_per_s,
        "redis_cpu_us_per_job": 100.0,
        "commands_per_job": 12.0,
        "round_trips_per_job": evalsha + 0.01,
        "commands": {"evalsha": evalsha},
        "idle_per_s": {"evalsha": 22.0, "cpu_us": 4000.0, "commands": 60.0},
    }


@pytest.mark.parametrize("jobs", [1, 10, 999, 10_000])
def test_every_scenario_places_exactly_the_jobs_asked_for(jobs: int) -> None:
    for scenario in queues.SCENARIOS:
        counts = scenario.counts(jobs)
        assert sum(counts.values()) == jobs
        assert set(counts) == {queue for queue, _ in scenario.shares}
    weighted = next(s for s in queues.SCENARIOS if s.key == "weighted").counts(10_000)
    assert weighted == {"a": 6_000, "b": 3_000, "c": 1_000}
    first_empty = next(s for s in queues.SCENARIOS if s.key == "first_empty").counts(jobs)
    assert first_empty == {"a": 0, "b": 0, "c": jobs}


def test_the_report_has_a_row_per_scenario_and_worker_count_and_the_changes() -> None:
    labels = {"before": "one queue, a05e74a (before)", "one": "one queue", "weighted": "w"}
    results = {
        "1": {
            "before": [canned(1000, 1.0)],
            "one": [canned(1100, 1.0), canned(900, 1.0)],
            "weighted": [canned(800, 1.6)],
        }
    }
    doc = {
        "date": "2026-12-02",
        "commit": "abc1234",
        "rounds": 2,
        "jobs": 100,
        "load_average_median": 1.0,
        "minutes": 0.5,
        "labels": labels,
        "results": results,
    }

    text = queues.report(doc)

    assert "| one queue | 1 | 1,000 (900–1,100) | 100 (100–100) | 12 (12–12) |" in text
    assert "| w | 1 | 800 | 100 | 12 | 1.61 | 1.6 | 22 | 4,000 |" in text
    assert "1 worker(s), w vs one queue: CPU +0%, jobs/s -20%" in text
    assert "1 worker(s), one queue vs one queue, a05e74a (before): CPU +0%, jobs/s +0%" in text


def test_help_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench.queues", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "--before" in out.stdout and "--scenarios" in out.stdout


@pytest.mark.slow
def test_a_small_run_drains_every_scenario_and_weighted_pays_its_extra_claims(
    tmp_path: Path,
) -> None:
    require_tool("redis-server")
    result = tmp_path / "queues.json"
    args = ["--before", "none", "--jobs", "600", "--rounds", "1", "--workers", "1"]
    run = subprocess.run(
        [sys.executable, "-m", "bench.queues", *args, "--json", str(result)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    doc = json.loads(result.read_text())
    runs = {key: found[0] for key, found in doc["results"]["1"].items()}

    assert set(runs) == {s.key for s in queues.SCENARIOS}
    for key, figures in runs.items():
        assert figures["jobs"] == 600 and figures["jobs_per_s"] > 0, key
        # At least one script call per job: each job's complete.
        assert queues.evalsha(figures) >= 1.0, key
    # One queue: the complete claims the next job, so about one call per job (the rest is
    # start-up, idle polls and the scheduler, amortised over 600 jobs).
    assert queues.evalsha(runs["one"]) < 1.5
    # Weighted 6:3:1: the next claim's first queue is the job's own 46 % of the time
    # (0.6² + 0.3² + 0.1²); otherwise the complete goes alone and a claim follows.
    assert queues.evalsha(runs["weighted"]) > queues.evalsha(runs["one"]) + 0.3
    # Four served queues (default, a, b, c) against one: 20 times a second the idle scheduler
    # asks each served queue whether it holds retries (an EXISTS in one pipelined round trip).
    # Compared as a ratio of that one command: a loaded host slows the scheduler's ticks in
    # both runs alike, while the other idle commands (heartbeats, BLPOP timeouts) do not scale
    # with it (CI saw all commands at 175.5 against 2 x 103, EVALSHA 3.5 against 2 x 2.0).
    assert runs["strict"]["idle_per_s"]["exists"] > 2 * runs["one"]["idle_per_s"]["exists"]
    assert "| 3 busy, weighted a:6,b:3,c:1 | 1 |" in run.stdout
