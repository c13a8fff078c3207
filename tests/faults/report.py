"""Run the fault suite and print its figures as the markdown table of bench/FAULTS.md.

    .venv/bin/python -m tests.faults.report            # every scenario (about 8 minutes)
    .venv/bin/python -m tests.faults.report -k chaos   # extra arguments go to pytest

Each scenario test prints one ``FAULT-FIGURES <name> {json}`` line (tests/faults/harness.py);
this collects them from a real pytest run, so the table in the document is whatever the
suite measured, never typed in by hand. The run's pass/fail is the exit code. The scenarios
that are long by design run at their full length here (TASKFORGE_FAULT_SCALE=1, unless set:
tests/faults/scale.py); bin/test runs them shorter.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.faults.scale import FULL_SCALE, SCALE_ENV

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "FAULT-FIGURES "
# Columns every scenario may fill; whatever else a scenario measured goes under "also".
COLUMNS = [
    ("jobs", "jobs"),
    ("acknowledged", "acked"),
    ("lost", "lost"),
    ("overlapping", "overlapping"),
    ("sequential", "sequential"),
    ("unexpected", "unexpected"),
    ("stale_writes_rejected", "stale writes refused"),
    ("recovery_s_p50", "recovery p50 s"),
    ("recovery_s_p99", "recovery p99 s"),
    ("recovery_s_max", "recovery max s"),
    ("throughput_jobs_per_s", "jobs/s"),
    ("violations", "invariant violations"),
    ("event_mismatches", "event mismatches"),
    ("events_checked", "jobs' events checked"),
]
LEFT_OUT = {"duplicates", "executions", "completed_unexecuted", "statuses", "events_capped"}


def collect(output: str) -> list[tuple[str, dict[str, Any]]]:
    """Return (scenario, figures) for every FAULT-FIGURES line of a pytest run's output."""
    rows = []
    for line in output.splitlines():
        if line.startswith(PREFIX):
            name, _, payload = line[len(PREFIX) :].partition(" ")
            rows.append((name, json.loads(payload)))
    return rows


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3g}" if value < 100 else f"{value:,.0f}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_cell(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_cell(v) for v in value)
    return str(value)


def table(rows: list[tuple[str, dict[str, Any]]]) -> str:
    """Return the figures as a markdown table, one row per scenario."""
    head = ["scenario", *(title for _, title in COLUMNS), "also measured"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    known = {key for key, _ in COLUMNS} | LEFT_OUT
    for name, figures in rows:
        cells = [name, *(_cell(figures.get(key)) for key, _ in COLUMNS)]
        extra = {k: v for k, v in sorted(figures.items()) if k not in known}
        cells.append("; ".join(f"{k}: {_cell(v)}" for k, v in extra.items()) or "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_env(environ: Mapping[str, str]) -> dict[str, str]:
    """Return the environment of the report's pytest run: full-length scenarios, unless the
    caller set TASKFORGE_FAULT_SCALE."""
    return {SCALE_ENV: str(FULL_SCALE), **environ}


def main(argv: list[str]) -> int:
    """Run tests/faults under pytest with ``-s``; print the table; return pytest's exit code."""
    command = [sys.executable, "-m", "pytest", "tests/faults", "-q", "-s", "-p", "no:cacheprovider"]
    run = subprocess.run(
        [*command, *argv],
        cwd=ROOT,
        env=run_env(os.environ),
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    summary = [line for line in run.stdout.splitlines() if " passed" in line or " failed" in line]
    print(f"commit {commit} · {platform.platform()} · pytest: {' '.join(summary[-1:])}\n")
    print(table(collect(run.stdout)))
    if run.returncode != 0:
        print("\n" + run.stdout[-4000:] + run.stderr[-2000:], file=sys.stderr)
    return run.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
