"""bench.soak's quick mode end to end: a real redis-server and workerd, half a minute."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.soak import QUICK_CAP
from tests.support.tools import ROOT, require_tool


@pytest.mark.slow
def test_quick_soak_loses_nothing_and_holds_the_completed_cap(tmp_path: Path) -> None:
    require_tool("redis-server")
    result = tmp_path / "soak.json"
    run = subprocess.run(
        [sys.executable, "-m", "bench.soak", "--minutes", "0.3", "--json", str(result)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    outcome = json.loads(result.read_text())

    assert outcome["problems"] == []
    assert outcome["finished_cap"] == QUICK_CAP
    assert outcome["completed_counter"] == outcome["enqueued"] > QUICK_CAP
    assert outcome["failed_counter"] == 0 and not any(outcome["live_left"].values())
    assert outcome["cap_reached_s"] is not None
    # Trimmed once a second: at most what one second of work adds, beyond the cap.
    assert outcome["completed_index_max"] <= QUICK_CAP + 2 * outcome["jobs_per_s"]
    assert len(outcome["samples"]) >= 15  # one a second, for 18 s
    assert "nothing lost" in run.stdout
