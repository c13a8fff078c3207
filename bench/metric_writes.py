"""What a job's metric writes cost a worker: instructions per job, written at once or held.

Each job moves two lifecycle counters and two histograms (shared.obs.metrics: ``count``
claimed and completed, ``observe_queue_wait``, ``observe_handler``) in a multiprocess
directory, as a worker child does. A worker child holds them (shared.obs.held_writes) and a
flusher writes the sums; this counts both ways under valgrind's callgrind (instructions do not
move with the host's load, as these shared VMs' timings do by half): a child Python runs the
four calls N times and once with none, and the difference over N is one job's share, the
held mode's final flush included.

    .venv/bin/python -m bench.metric_writes --jobs 20000

Needs valgrind (``apt install valgrind``; bin/test installs it).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("direct", "held")

_CHILD = """
import os, sys
from shared.obs import metrics
if sys.argv[1] == "held":
    metrics.hold_job_writes()
for _ in range(int(sys.argv[2])):
    metrics.count("claimed", "t", "default")
    metrics.observe_queue_wait("t", "default", 1000, 1003)
    metrics.observe_handler("t", "default", 0.0004)
    metrics.count("completed", "t", "default")
metrics.flush_job_writes()
"""


def instructions(mode: str, jobs: int) -> int:
    """Instructions a child Python runs doing `jobs` jobs' metric writes in `mode`."""
    with tempfile.TemporaryDirectory() as scratch:
        env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": scratch, "PYTHONPATH": str(ROOT)}
        run = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={Path(scratch) / 'callgrind.out'}",
                sys.executable,
                "-c",
                _CHILD,
                mode,
                str(jobs),
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    if run.returncode != 0:
        raise RuntimeError(f"callgrind run failed: {run.stderr[-2000:]}")
    found = re.search(r"Collected : (\d+)", run.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output: {run.stderr[-2000:]}")
    return int(found.group(1))


def per_job(jobs: int) -> dict[str, float]:
    """Instructions per job in each mode (N jobs minus none, over N)."""
    return {mode: (instructions(mode, jobs) - instructions(mode, 0)) / jobs for mode in MODES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    args = parser.parse_args()
    if not shutil.which("valgrind"):
        raise SystemExit("valgrind is not installed: apt install valgrind")
    figures = per_job(args.jobs)
    for mode, count in figures.items():
        print(f"{mode}: {count:,.0f} instructions a job's metric writes ({args.jobs:,} jobs)")
    print(f"held ÷ direct: {figures['held'] / figures['direct']:.2f}")


if __name__ == "__main__":
    main()
