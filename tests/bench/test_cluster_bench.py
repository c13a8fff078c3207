"""bench.cluster: the CPU cap holds a busy process to its share, and a short run measures both
layouts on a real cluster with a real workerd."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from bench.cluster import LAYOUTS, ROWS, report
from bench.cpu_cap import CpuCap, can_cap
from tests.support.tools import ROOT, cpu_seconds, wait_until

SPIN = [sys.executable, "-c", "while True: pass"]


# Under CI the machine is one we run as root with a writable cgroup tree: there a missing cap is
# a failure (the benchmark's claim rests on it), never a quiet skip.
@pytest.mark.skipif(
    can_cap() is not None and os.environ.get("CI") != "true",
    reason=f"no cgroup to cap with: {can_cap()}",
)
def test_a_capped_process_gets_its_share_of_a_core_and_is_throttled() -> None:
    spinner = subprocess.Popen(SPIN)
    cap = CpuCap.create(f"taskforge-test-{spinner.pid}", percent=10, period_us=20_000)
    try:
        cap.add(spinner.pid)
        before, started = cpu_seconds(spinner.pid), time.monotonic()
        periods_before = cap.throttled()
        wait_until(lambda: time.monotonic() - started >= 1.5, 3, "a measuring window")
        share = (cpu_seconds(spinner.pid) - before) / (time.monotonic() - started)
        periods, throttled, _ = (
            a - b for a, b in zip(cap.throttled(), periods_before, strict=True)
        )
    finally:
        spinner.kill()
        spinner.wait()
        cap.remove()
    assert share < 0.2, share  # 10% of a core, with /proc's 10 ms ticks of slack
    assert throttled > periods * 0.8, (periods, throttled)


def test_the_report_has_a_row_per_figure_and_the_ratio_of_the_medians() -> None:
    run = {
        "jobs_per_s": 100.0,
        "redis_cpu_us_per_job": 190.0,
        "redis_core_share_each": 0.02,
        "commands_per_job": 3.0,
        "redis_use_of_cap": 0.99,
        "periods_throttled": 0.97,
        "idle_redis_cpu_us_per_s_each": 900.0,
        "workerd_cores": 0.1,
        "host_idle_cores": 1.2,
    }
    doc = {
        "date": "2026-12-02",
        "platform": "Linux, 2 cpus",
        "minutes": 1.0,
        "args": {"cpu_percent": 2.0, "period_us": 50_000, "rounds": 2, "jobs": 4000, "workers": 12},
        "queues": {"one_master": ["m0"], "three_masters": ["q0"]},
        "results": {
            "one_master": [run, run],
            "three_masters": [{**run, "jobs_per_s": 250.0}, {**run, "jobs_per_s": 290.0}],
        },
    }
    text = report(doc)
    assert len([line for line in text.splitlines() if line.startswith("| ")]) == len(ROWS) + 1
    assert "| jobs/s | 100 (100–100) | 270 (250–290) |" in text
    assert text.endswith("3 masters / 1 master, jobs/s (medians): 2.70×")
    assert set(doc["results"]) == set(LAYOUTS)


@pytest.mark.slow
def test_a_short_run_drains_both_layouts_on_a_real_cluster() -> None:
    capped = can_cap() is None
    args = ["--cpu-percent", "2", "--jobs", "600"] if capped else ["--cpu-percent", "0"]
    done = subprocess.run(
        [sys.executable, "-m", "bench.cluster", "--rounds", "1", "--workers", "6", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert "| jobs/s |" in done.stdout, done.stdout + done.stderr
    assert "3 masters / 1 master, jobs/s (medians):" in done.stdout
