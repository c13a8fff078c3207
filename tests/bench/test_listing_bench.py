"""bench.listing end to end on small sizes: every case measured, a page's commands the same
whatever the number of jobs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.tools import ROOT, require_tool


def test_a_page_runs_the_same_commands_at_both_sizes(tmp_path: Path) -> None:
    require_tool("redis-server")
    result = tmp_path / "listing.json"
    sizes = ["--jobs", "6000", "--small", "1200", "--reads", "3"]
    run = subprocess.run(
        [sys.executable, "-m", "bench.listing", *sizes, "--json", str(result)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    figures = json.loads(result.read_text())
    large = {case["name"]: case for case in figures["large"]}
    small = {case["name"]: case for case in figures["small"]}

    assert set(large) == set(small) and len(large) == 19
    for name, case in large.items():
        # With a type filter, where the middle falls among the ten types moves the count by one.
        slack = 10 if "type filter" in name else 0
        assert abs(case["commands"] - small[name]["commands"]) <= slack, name
        assert case["listed"] == small[name]["listed"], name
    assert large["pending deep page"]["listed"] == 50
    assert large["completed deep, type filter (none)"]["listed"] == 0
    # A type no job has: the page examines its bound, 500 entries (a HGET each), and stops.
    assert 500 < large["completed deep, type filter (none)"]["commands"] < 520
    assert large["completed first page, limit 1000"]["listed"] == 1000
    # The cursor's job gone among 1,200 of one priority: a ZCOUNT of them, then the probe's
    # ZADD and ZREM, three commands more.
    left = large["pending after the cursor's job left"]["commands"]
    assert left == large["pending deep page"]["commands"] + 3
    assert "n = 6,000" in run.stdout and "n = 1,200" in run.stdout and "Redis µs" in run.stdout
