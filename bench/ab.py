"""The hot-path work's before → after table in one command: two checkouts measured in interleaved rounds.

    .venv/bin/python -m bench.ab                         # dd7970e (before) → this checkout
    .venv/bin/python -m bench.ab --before 43c9d7a --after HEAD --rounds 5

A side names a directory (a checkout) or a git revision, exported with ``git archive`` to a
temporary directory. Every round measures both sides, one after the other, each figure on the
side's own code (bench.redis_cost runs its producer, workerd and scripts):

- Redis CPU µs, commands, round trips per job and drain jobs/s while 1 / 2 / 4 workers drain
  (the peers' method, bench/peers/harness.py), with the CPU breakdown of bench.redis_cost;
- the same cost for one process draining through shared.engine.scripts (no workerd);
- enqueue→start latency with 2 idle workers (the peers' method: 300 jobs 10 ms apart), beside
  the floor: a bare round trip (PING p50 from Python) times two, for the wake-up and the claim;
- ``bench.engine --repeat 1`` run from the side's checkout (engine enqueue, 1 process);
- once per side, when valgrind is installed, Redis's instructions per enqueue and per
  complete-and-claim-next (bench.instructions: a count machine load cannot move).

Prints markdown tables (median and range over rounds; load averages per round) and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis

from bench import instructions, redis_cost
from bench.peers import harness
from tests.support.redis_server import private_redis
from tests.support.stats import percentile

ROOT = harness.ROOT
PINGS = 2_000
INSTRUCTION_JOBS = 1_000
ENGINE_TIMEOUT = 900.0


def side_tree(spec: str, export_to: Path) -> Path:
    """Return the checkout a side names: a directory as it is, or a revision exported there."""
    if Path(spec).is_dir():
        return Path(spec).resolve()
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", spec], capture_output=True, text=True, check=True
    ).stdout.strip()
    tree = export_to
    tree.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    (tree / "COMMIT").write_text(commit + "\n")
    return tree


def ping_p50_ms(url: str) -> float:
    """Return the median time of a PING from Python (redis-py), in milliseconds."""
    client = redis.Redis.from_url(url)
    client.ping()
    times = []
    for _ in range(PINGS):
        started = time.perf_counter()
        client.ping()
        times.append((time.perf_counter() - started) * 1000)
    return percentile(times, 0.5)


def engine(tree: Path, jobs: int) -> dict:
    """Run the side's own bench.engine once; return its JSON (jobs/s by process count)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.engine",
                "--jobs",
                str(jobs),
                "--repeat",
                "1",
                "--json",
                out.name,
            ],
            cwd=tree,
            env={**os.environ, "PYTHONPATH": str(tree)},
            check=True,
            capture_output=True,
            timeout=ENGINE_TIMEOUT,
        )
        return json.loads(Path(out.name).read_text())["results"]


def one_round(tree: Path, url: str, args: argparse.Namespace) -> dict[str, object]:
    """Measure every figure of one side once."""
    ws = harness.Workspace(redis_cost.tree_config(tree))
    out: dict[str, object] = {"load_average": os.getloadavg()[0]}
    try:
        out["drain"] = {
            str(n): redis_cost.measure_workerd(tree, url, args.jobs, n, ws) for n in args.workers
        }
        out["in_process"] = redis_cost.measure_in_process(tree, url, args.jobs, ws)
        latency = harness.latency(redis_cost.tree_config(tree), url, args.latency_jobs, 0.01, ws)
        out["latency"] = {**latency, "ping_p50_ms": ping_p50_ms(url)}
    finally:
        ws.close()
    out["engine"] = engine(tree, args.jobs)
    return out


Getter = Callable[[dict], float]


def figures(workers: list[int], counted: bool) -> list[tuple[str, Getter]]:
    """Return the rows of the before → after table: a label and how to read it from a round."""
    rows: list[tuple[str, Getter]] = [
        (
            "Redis CPU µs per job, 1 worker draining",
            lambda r: r["drain"]["1"]["redis_cpu_us_per_job"],
        ),
        ("Redis commands per job, 1 worker", lambda r: r["drain"]["1"]["commands_per_job"]),
        ("round trips per job, 1 worker", lambda r: r["drain"]["1"]["round_trips_per_job"]),
        (
            "Redis CPU µs per job, one process through shared.engine.scripts",
            lambda r: r["in_process"]["redis_cpu_us_per_job"],
        ),
    ]
    for n in workers:
        rows.append(
            (
                f"drain jobs/s, {n} worker(s) (peers' method)",
                lambda r, n=n: r["drain"][str(n)]["jobs_per_s"],
            )
        )
    rows += [
        (
            "engine enqueue jobs/s, 1 process (bench.engine)",
            lambda r: r["engine"]["1"]["enqueue_per_s"],
        ),
        ("enqueue→start p50 ms, 2 idle workers", lambda r: r["latency"]["p50_ms"]),
        ("enqueue→start p99 ms", lambda r: r["latency"]["p99_ms"]),
        ("PING p50 ms (one round trip from Python)", lambda r: r["latency"]["ping_p50_ms"]),
        (
            "p50 minus 2 round trips ms",
            lambda r: r["latency"]["p50_ms"] - 2 * r["latency"]["ping_p50_ms"],
        ),
        ("load average (1 min) at the round's start", lambda r: r["load_average"]),
    ]
    if counted:
        rows[4:4] = [
            (
                "Redis instructions per complete + claim next (callgrind)",
                lambda r: r["instructions"]["complete_claim_next"],
            ),
            ("Redis instructions per enqueue (callgrind)", lambda r: r["instructions"]["enqueue"]),
        ]
    return rows


def table(results: dict[str, list[dict]], workers: list[int]) -> str:
    """Return the before → after markdown table (median and range over rounds, change)."""
    before, after = list(results)
    lines = [f"| figure | {before} (before) | {after} (after) | change |", "|---|---|---|---|"]
    counted = all("instructions" in r for runs in results.values() for r in runs)
    for label, get in figures(workers, counted):
        old = [get(r) for r in results[before]]
        new = [get(r) for r in results[after]]
        change = (
            statistics.median(new) / statistics.median(old) - 1 if statistics.median(old) else 0
        )
        lines.append(
            f"| {label} | {redis_cost.median_range(old)} | {redis_cost.median_range(new)} "
            f"| {change:+.0%} |"
        )
    return "\n".join(lines)


def main() -> None:
    """Measure both sides in interleaved rounds; print the tables and write JSON."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", default="dd7970e", help="revision or directory (dd7970e)")
    parser.add_argument("--after", default=str(ROOT), help="revision or directory (this one)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--latency-jobs", type=int, default=300)
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "ab.json")
    args = parser.parse_args()
    if 1 not in args.workers:
        args.workers.insert(0, 1)  # the cost rows are the 1-worker drain's
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="taskforge-ab-") as scratch:
        trees = [
            side_tree(args.before, Path(scratch) / "before"),
            side_tree(args.after, Path(scratch) / "after"),
        ]
        labels = [redis_cost.label_of(tree) for tree in trees]
        if labels[0] == labels[1]:
            labels = [f"{labels[0]} (1)", f"{labels[1]} (2)"]
        results: dict[str, list[dict]] = {label: [] for label in labels}
        with private_redis() as server:
            for round_no in range(args.rounds):
                for tree, label in zip(trees, labels, strict=True):
                    results[label].append(one_round(tree, server.url, args))
                    print(
                        f"round {round_no + 1} of {args.rounds}: {label} measured", file=sys.stderr
                    )
        if instructions.available():  # deterministic: once per side is enough
            for tree, label in zip(trees, labels, strict=True):
                counts = instructions.measure(tree, INSTRUCTION_JOBS)
                for run in results[label]:
                    run["instructions"] = counts
        else:
            print("valgrind not installed: no instruction counts", file=sys.stderr)
    minutes = (time.monotonic() - started) / 60
    print(f"{args.rounds} interleaved rounds, {args.jobs:,} jobs per drain, {minutes:.1f} minutes")
    print()
    print(table(results, args.workers))
    for n in args.workers[:1]:
        print()
        drains = {label: [r["drain"][str(n)] for r in runs] for label, runs in results.items()}
        print(redis_cost.report(drains, f"Redis cost per job, workerd with {n} worker"))
    print()
    in_process = {label: [r["in_process"] for r in runs] for label, runs in results.items()}
    print(
        redis_cost.report(
            in_process, "Redis cost per job, one process through shared.engine.scripts"
        )
    )
    args.json.write_text(json.dumps({"minutes": minutes, "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
