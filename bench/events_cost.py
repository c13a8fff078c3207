"""What the live events cost Redis per job: enqueue → claim → complete, events on and off.

Each job is enqueued (one call each, as a producer does), then one worker drains the queue as
workerd's workers do: a claim, then complete-and-claim-next until nothing is left. Every job
so writes three events with events on (enqueued, claimed, completed); with
``TASKFORGE_EVENTS=off`` the scripts write none. The engine is built from the environment as
the gateway and workerd build theirs (``Settings`` → ``Policy.from_settings``), so the switch
measured is the real one.

Per job, from a private redis-server's ``INFO`` before and after the workload (the peers'
method, bench/peers/harness.py): Redis CPU µs (used_cpu_sys + used_cpu_user), Redis commands
(those the scripts run included), XADDs, and the stream's memory per event (MEMORY USAGE /
XLEN). With ``--callgrind``, also Redis's user-space instructions per job under valgrind's
callgrind (bench/instructions.py's server): a figure machine load cannot move, where CPU time
on a shared machine swings by a third between runs. Modes run in interleaved rounds; each
figure is the median (min–max) over rounds.

    .venv/bin/python -m bench.events_cost                          # 10,000 jobs, 3 rounds
    .venv/bin/python -m bench.events_cost --jobs 2000 --rounds 1 --callgrind
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

import redis

from bench import instructions
from bench.peers import harness
from shared.engine.engine_types import Policy
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import validate_enqueue
from shared.settings.config import Settings
from tests.support.redis_server import NO_PERSISTENCE, private_redis, redis_binary

MODES = ("on", "off")
EVENTS_PER_JOB = 3  # enqueued, claimed, completed
REQUEST = validate_enqueue({"type": "bench", "payload": {"n": 1}})


def engine(url: str, events: str) -> Scripts:
    """Return the engine a TaskForge process builds with TASKFORGE_EVENTS=`events`."""
    settings = Settings.from_env({"REDIS_URL": url, "TASKFORGE_EVENTS": events})
    client = redis.Redis.from_url(url)
    scripts = Scripts(client, Keys(settings.namespace), Policy.from_settings(settings))
    scripts.load()
    return scripts


def workload(scripts: Scripts, jobs: int) -> None:
    """Enqueue `jobs` jobs, then drain them as one worker does (complete claims the next)."""
    for _ in range(jobs):
        scripts.enqueue(REQUEST, str(uuid.uuid4()))
    worker = "bench-events"
    job = scripts.claim(worker)
    done = 0
    while job is not None:
        job = scripts.complete(job.id, job.token, "null", claim_next_for=worker).next_job
        done += 1
    if done != jobs:
        raise RuntimeError(f"drained {done} jobs of {jobs}")


def measure(url: str, events: str, jobs: int) -> dict[str, float]:
    """Run the workload once on an emptied server; return its Redis cost per job."""
    client = redis.Redis.from_url(url)
    client.flushall()
    scripts = engine(url, events)
    before = harness.redis_info(client)
    workload(scripts, jobs)
    after = harness.redis_info(client)
    cost = harness.redis_cost(before, after, jobs)
    stream = scripts.keys.fleet_events  # one Redis: one stream for every queue
    length = client.xlen(stream)
    usage = client.memory_usage(stream, samples=0) if length else 0
    return {
        "cpu_us": float(cost["redis_cpu_us_per_job"]),  # type: ignore[arg-type]
        "commands": float(cost["commands_per_job"]),  # type: ignore[arg-type]
        "xadd": float(cost["commands"].get("xadd", 0.0)),  # type: ignore[attr-defined]
        "events": length / jobs,
        "bytes_per_event": usage / length if length else 0.0,
    }


def measure_instructions(events: str, jobs: int) -> float:
    """Return Redis's user-space instructions per job for the workload, under callgrind."""
    with tempfile.TemporaryDirectory(prefix="taskforge-callgrind-") as tmp:
        server = instructions.CallgrindRedis(redis_binary(), Path(tmp), dict(NO_PERSISTENCE))
        server.start()
        try:
            scripts = engine(server.url, events)
            server.instructions()  # start-up and script loading, out of the figure
            with server.counting():
                workload(scripts, jobs)
            return server.instructions() / jobs
        finally:
            server.close()


def spread(values: list[float], fmt: Callable[[float], str]) -> str:
    """Return 'median (min–max)' of one figure over rounds."""
    if len(values) == 1:
        return fmt(values[0])
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{fmt(mid)} ({fmt(low)}–{fmt(high)})"


def table(runs: dict[str, list[dict[str, float]]]) -> str:
    """Return the figures as a markdown table: one column per mode, then the difference."""
    rows: list[tuple[str, str, Callable[[float], str]]] = [
        ("Redis CPU µs", "cpu_us", lambda v: f"{v:.1f}"),
        ("Redis commands", "commands", lambda v: f"{v:.2f}"),
        ("· XADD", "xadd", lambda v: f"{v:.2f}"),
        ("events in the stream", "events", lambda v: f"{v:.2f}"),
        ("stream bytes per event", "bytes_per_event", lambda v: f"{v:.1f}"),
    ]
    if all("instructions" in r for runs_ in runs.values() for r in runs_):
        rows.append(("Redis instructions (callgrind)", "instructions", lambda v: f"{v:,.0f}"))
    lines = [
        "| per job (enqueue + claim + complete) | events on | events off | on − off |",
        "|---|---|---|---|",
    ]
    for label, key, fmt in rows:
        on = [r[key] for r in runs["on"]]
        off = [r[key] for r in runs["off"]]
        diff = statistics.median(on) - statistics.median(off)
        lines.append(f"| {label} | {spread(on, fmt)} | {spread(off, fmt)} | {fmt(diff)} |")
    return "\n".join(lines)


def main() -> None:
    """Measure both modes in interleaved rounds and print the table (and JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="also count Redis's instructions per job under valgrind (slow: --callgrind-jobs)",
    )
    parser.add_argument("--callgrind-jobs", type=int, default=1_000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.callgrind and not instructions.available():
        raise SystemExit("valgrind (callgrind) is not installed: apt install valgrind")
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    with private_redis() as server:
        for _ in range(args.rounds):
            for mode in MODES:
                runs[mode].append(measure(server.url, mode, args.jobs))
    if args.callgrind:
        # Counts move by about 1 % between runs too (Redis's cron ticks with the wall time,
        # which valgrind stretches): a count per round, and the median.
        for round_ in range(args.rounds):
            for mode in MODES:
                runs[mode][round_]["instructions"] = measure_instructions(mode, args.callgrind_jobs)
    print(f"{args.jobs:,} jobs, {args.rounds} round(s), median (min–max):\n")
    print(table(runs))
    if args.json:
        args.json.write_text(json.dumps({"jobs": args.jobs, "runs": runs}, indent=2) + "\n")


if __name__ == "__main__":
    main()
