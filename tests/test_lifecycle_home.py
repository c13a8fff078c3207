"""One lifecycle home: no module but shared/engine/lifecycle.py counts a job outcome or logs a job_* line.

The scanner reads the source (ast), so a new caller that maps an outcome itself fails here
instead of drifting from the table in shared/engine/lifecycle.py; and every call of the home names
the job's queue (``queue=``), which Python would only refuse when the line runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.tools import ROOT

HOME = Path("shared/engine/lifecycle.py")
LOG_METHODS = {"debug", "info", "warning", "error", "exception", "critical", "log"}
RECORDERS = {"record", "record_batch"}


def outcome_calls(source: str) -> list[str]:
    """Return each line that counts a lifecycle metric or logs a job_* event, as "line: what"."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "shared.obs.metrics":
            found += [
                f"{node.lineno}: imports metrics.count" for a in node.names if a.name == "count"
            ]
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        func = node.func
        if func.attr == "count" and isinstance(func.value, ast.Name) and func.value.id == "metrics":
            found.append(f"{node.lineno}: metrics.count")
        if func.attr in LOG_METHODS:
            args = node.args[1:2] if func.attr == "log" else node.args[:1]
            for arg in args:
                if isinstance(arg, ast.Constant) and str(arg.value).startswith("job_"):
                    found.append(f"{node.lineno}: logs {arg.value}")
    return found


def test_the_scanner_finds_each_way_around_the_lifecycle() -> None:
    source = (
        "from shared.obs.metrics import count\n"
        "metrics.count('dead', t)\n"
        "log.warning('job_dead', extra={})\n"
        "log.log(logging.INFO, 'job_claimed')\n"
        "log.info('child_killed')\n"
        "counter.count(b'{')\n"
    )
    assert outcome_calls(source) == [
        "1: imports metrics.count",
        "2: metrics.count",
        "3: logs job_dead",
        "4: logs job_claimed",
    ]


def test_only_shared_lifecycle_counts_outcomes_or_logs_job_events() -> None:
    found = {}
    for package in ("gateway", "workerd", "shared"):
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if relative != HOME:
                calls = outcome_calls(path.read_text())
                if calls:
                    found[str(relative)] = calls
    assert found == {}, "record job outcomes through shared.engine.lifecycle.record instead"
    assert outcome_calls((ROOT / HOME).read_text()) != []  # the scanner sees the home itself


def calls_without_queue(source: str) -> list[str]:
    """Return each call of lifecycle's record or record_batch that passes no queue=."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        bare = isinstance(func, ast.Name) and func.id in RECORDERS
        dotted = (
            isinstance(func, ast.Attribute)
            and func.attr in RECORDERS
            and isinstance(func.value, ast.Name)
            and func.value.id == "lifecycle"
        )
        if (bare or dotted) and not any(k.arg in ("queue", None) for k in node.keywords):
            found.append(f"{node.lineno}: {ast.unparse(func)}")
    return found


def test_the_queue_scanner_finds_a_call_without_a_queue() -> None:
    source = (
        "record(Outcome.DEAD, job_id, t)\n"
        "lifecycle.record_batch(Outcome.ENQUEUED, jobs)\n"
        "record(Outcome.DEAD, job_id, t, queue=q)\n"
        "record(Outcome.DEAD, job_id, t, **named)\n"
        "tracing.record(name, trace)\n"
    )
    assert calls_without_queue(source) == ["1: record", "2: lifecycle.record_batch"]


def test_every_recorded_outcome_names_its_queue() -> None:
    found = {}
    for package in ("gateway", "workerd", "shared"):
        for path in sorted((ROOT / package).rglob("*.py")):
            calls = calls_without_queue(path.read_text())
            if calls:
                found[str(path.relative_to(ROOT))] = calls
    assert found == {}, "pass the job's queue: record(..., queue=job.queue)"
