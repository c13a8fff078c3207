"""bench.idle_scheduler end to end, small: a real scheduler idles beside named queues."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.tools import ROOT, require_tool


@pytest.mark.slow
def test_a_short_run_reports_an_idle_cost_that_does_not_grow_with_names(tmp_path: Path) -> None:
    require_tool("redis-server")
    result = tmp_path / "idle.json"
    args = ["--queues", "1", "300", "--seconds", "2", "--json", str(result)]
    subprocess.run(
        [sys.executable, "-m", "bench.idle_scheduler", *args],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=120,
    )
    one, many = json.loads(result.read_text())
    assert (one["queues"], many["queues"]) == (1, 300)
    # A tick is two commands, 20 ticks a second; the sweep adds at most ~32 EXISTS a second.
    assert 20 <= one["commands_per_s"] <= 150, one
    assert many["commands_per_s"] <= one["commands_per_s"] + 80, (one, many)
