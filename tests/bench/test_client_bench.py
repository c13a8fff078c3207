"""bench.client end to end on a short run: every case measured, no job lost or doubled."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.support.tools import ROOT


def test_every_case_runs_and_every_acknowledged_job_is_stored_once() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.client", "--seconds", "0.1", "--rounds", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    for case in (
        "Client.enqueue, 1 thread",
        "Client.enqueue, 8 threads",
        "Client.enqueue_many, 1,000 a call",
    ):
        line = next(line for line in done.stdout.splitlines() if line.startswith(case))
        assert int(line.split()[-3].replace(",", "")) > 0, line
    counts = re.search(r"acknowledged ([\d,]+), jobs in Redis ([\d,]+)", done.stdout)
    assert counts is not None, done.stdout
    assert counts.group(1) == counts.group(2)
