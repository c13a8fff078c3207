"""bench.job_budget: its probe, run in a checkout, counts one job's commands as the budget says."""

from __future__ import annotations

from pathlib import Path

from bench import job_budget
from tests.engine.test_budgets import PER_JOB_COMPLETE, PER_JOB_ENQUEUE
from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]


def test_the_probe_counts_the_budgeted_commands_of_a_job(redis_server: RedisServer) -> None:
    run = job_budget.run_probe(ROOT, redis_server.url, 20, "on", "on")

    # The gateway's enqueue is the enqueue script and nothing else; the worker's claims are in
    # its completes (the first claim and the last, empty, complete are 1/20 of a job each).
    enqueue = {k: v for k, v in run["enqueue"]["calls"].items() if k != "evalsha"}
    assert enqueue == {k: float(v) for k, v in PER_JOB_ENQUEUE.items()}
    worker = run["worker"]["calls"]
    assert worker["evalsha"] == 1.05 and worker["xadd"] == PER_JOB_COMPLETE["xadd"]
    assert "time" not in worker  # the claim and the completes take their time from events
    assert run["worker"]["cpu_us"] > 0 and run["enqueue"]["bytes_in"] > 0


def test_history_off_empties_the_entries_and_nothing_else() -> None:
    head = "local function history_add(history, code, created, now, attempt, worker, error_type)\n"
    lua = f"-- x\n{head}  return history .. code\nend\n"
    assert (
        job_budget.history_off(lua)
        == f"-- x\n{head}  do return '' end\n  return history .. code\nend\n"
    )


def test_the_report_shows_every_checkout_side_by_side() -> None:
    phase = {"cpu_us": 40.0, "bytes_in": 600.0, "bytes_out": 200.0, "calls": {"evalsha": 1.0}}
    run = {
        "enqueue": {**phase, "usec": {"evalsha": 20.0, "hset": 3.0}},
        "worker": {**phase, "usec": {}},
    }
    text = job_budget.report({"before": [run], "after": [run]})
    assert "| per job | before | after |" in text
    assert "| Redis CPU µs, total | 80.0 | 80.0 |" in text
    assert "| bytes in + out on the wire, total | 1,600 | 1,600 |" in text
