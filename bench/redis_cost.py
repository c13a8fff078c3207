"""Redis's cost per job while workers drain: CPU µs, commands, round trips, where the CPU goes.

Measured by the peers' method (bench/peers/harness.py: ``INFO`` before the workers start and
once the last job ran, so worker start-up and idle polling are in the window) on the real
workerd, and with ``--in-process`` on one process draining through shared.engine.scripts
(complete + claim next, as a worker does, and nothing else). ``--tree PATH`` measures another
checkout's code (its producer, workerd and scripts; for an older commit, a ``git archive``
export): this checkout only measures. Several trees are measured in interleaved rounds.

The breakdown comes from ``INFO commandstats``: Redis 7 counts the commands a script runs, and
a script call's own usec includes theirs. Per job:

- scripts: usec of EVALSHA (EVAL, FCALL) calls, of which
  - commands: usec of the commands the scripts ran (named in the tree's shared/engine/lua), and
  - Lua: the rest, running the chunk and converting arguments and replies;
- other commands: usec of top-level commands besides scripts (BLPOP, INFO, SCRIPT, ...);
- outside commands: CPU minus both, i.e. reading, parsing and answering requests, the event
  loop and the kernel's share (used_cpu_sys).

    .venv/bin/python -m bench.redis_cost                       # this checkout, 1 worker
    .venv/bin/python -m bench.redis_cost --tree /tmp/old --tree . --in-process --rounds 3
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import redis

from bench.peers import configs, harness
from shared.engine.keys import Keys
from tests.support.redis_server import private_redis

SCRIPT_CALLS = ("evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro")
REDIS_CALL = re.compile(r"redis\.p?call\(\s*'([A-Za-z]+)'")
IN_PROCESS_TIMEOUT = 600.0


def tree_config(tree: Path) -> configs.Config:
    """Return TaskForge's side-by-side configuration, running `tree`'s code."""
    return dataclasses.replace(configs.BY_KEY["taskforge"], tree=tree.resolve())


def script_commands(tree: Path) -> set[str]:
    """Return the Redis commands `tree`'s Lua scripts call (commandstats names, lower case)."""
    names = set()
    for path in (tree / "shared" / "engine" / "lua").rglob("*.lua"):
        names.update(name.lower() for name in REDIS_CALL.findall(path.read_text()))
    return names


def breakdown(cost: dict, cpu_us: float, inner: set[str]) -> dict[str, float]:
    """Split Redis CPU µs per job into scripts (their commands, Lua), other commands, outside."""
    usec: dict[str, float] = cost["usec_per_job"]
    calls: dict[str, float] = cost["commands"]
    scripts = sum(usec.get(name, 0.0) for name in SCRIPT_CALLS)
    commands = sum(v for name, v in usec.items() if name.split("|")[0] in inner)
    top = {n: v for n, v in usec.items() if n not in SCRIPT_CALLS and n.split("|")[0] not in inner}
    other = sum(top.values())
    return {
        "cpu_us": cpu_us,
        "scripts_us": scripts,
        "script_commands_us": commands,
        "lua_us": scripts - commands,
        "other_commands_us": other,
        "outside_commands_us": cpu_us - scripts - other,
        "top_level_calls": sum(v for n, v in calls.items() if n.split("|")[0] not in inner),
    }


def measure_workerd(
    tree: Path, url: str, jobs: int, workers: int, ws: harness.Workspace
) -> dict[str, object]:
    """Drain `jobs` jobs with `workers` workerd workers of `tree`; return rate, cost, breakdown."""
    out = harness.drain(tree_config(tree), url, jobs, workers, ws)
    out["breakdown"] = breakdown(out, out["redis_cpu_us_per_job"], script_commands(tree))  # type: ignore[arg-type]
    return out


def measure_in_process(tree: Path, url: str, jobs: int, ws: harness.Workspace) -> dict[str, object]:
    """Drain `jobs` jobs in one process through `tree`'s shared.engine.scripts; return the cost."""
    config = tree_config(tree)
    client = redis.Redis.from_url(url)
    client.flushall()
    env = harness.base_env(config, url, ws.stamps())
    harness.produce(config, env, "enqueue", "fill", str(jobs))
    before = harness.redis_info(client)
    drain_in_process(config, url, env)
    after = harness.redis_info(client)
    done = completed_count(client)
    if done != jobs:
        raise RuntimeError(f"in-process drain completed {done} of {jobs} jobs")
    out = harness.redis_cost(before, after, jobs)
    out["breakdown"] = breakdown(out, out["redis_cpu_us_per_job"], script_commands(tree))  # type: ignore[arg-type]
    return out


def completed_count(client: redis.Redis) -> int:
    """Return the jobs completed in the default queue."""
    return client.zcard(Keys().completed)


def drain_in_process(config: configs.Config, url: str, env: dict[str, str]) -> None:
    """Complete and claim next until the queue is empty, in one process of the config's tree."""
    # bench.engine's loop of complete-and-claim-next calls, from the tree measured.
    drain = (
        "import sys; from bench.engine import run_complete_claiming_next as d; d(sys.argv[1], 0)"
    )
    subprocess.run(
        [harness.python(config), "-c", drain, url],
        cwd=harness.root(config),
        env=env,
        check=True,
        timeout=IN_PROCESS_TIMEOUT,
    )


def number(value: float) -> str:
    """Return a figure for a table: thousands separated, else three significant digits."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def median_range(values: list[float]) -> str:
    """Return 'median (min–max)' of one figure over rounds."""
    if len(values) == 1:
        return number(values[0])
    return f"{number(statistics.median(values))} ({number(min(values))}–{number(max(values))})"


def report(rows: dict[str, list[dict]], title: str) -> str:
    """Return a markdown table of one measurement across trees: cost and its breakdown."""
    names = list(rows)
    lines = [f"{title}", "", "| per job | " + " | ".join(names) + " |"]
    lines.append("|---|" + "---|" * len(names))
    figures = [
        ("Redis CPU µs", lambda r: r["redis_cpu_us_per_job"]),
        ("· in scripts (EVALSHA) µs", lambda r: r["breakdown"]["scripts_us"]),
        ("· · commands the scripts ran µs", lambda r: r["breakdown"]["script_commands_us"]),
        ("· · Lua: the chunk, arguments, replies µs", lambda r: r["breakdown"]["lua_us"]),
        ("· in other top-level commands µs", lambda r: r["breakdown"]["other_commands_us"]),
        (
            "· outside commands: I/O, parsing, event loop µs",
            lambda r: r["breakdown"]["outside_commands_us"],
        ),
        ("Redis commands (inside scripts included)", lambda r: r["commands_per_job"]),
        ("top-level commands", lambda r: r["breakdown"]["top_level_calls"]),
        ("round trips (requests read)", lambda r: r["round_trips_per_job"]),
    ]
    if all("jobs_per_s" in r for runs in rows.values() for r in runs):
        figures.append(("drain jobs/s (peers' method)", lambda r: r["jobs_per_s"]))
    for label, get in figures:
        cells = [median_range([get(r) for r in rows[name]]) for name in names]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def commands_table(rows: dict[str, list[dict]]) -> str:
    """Return the commands per job by name, median over rounds, for each tree."""
    names = list(rows)
    commands = sorted({c for runs in rows.values() for r in runs for c in r["commands"]})
    lines = [
        "| command (calls per job) | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for command in commands:
        cells = [
            f"{statistics.median(r['commands'].get(command, 0.0) for r in rows[n]):.3g}"
            for n in names
        ]
        lines.append(f"| {command} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    """Measure every tree in interleaved rounds and print the tables (and JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tree",
        type=Path,
        action="append",
        help="checkout to measure (repeatable; default: this one)",
    )
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--rounds", type=int, default=3, help="interleaved rounds; median (min–max) shown"
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="also drain in one process through shared.engine.scripts",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    trees = args.tree or [harness.ROOT]
    labels = [label_of(tree) for tree in trees]
    results: dict[str, dict[str, list[dict]]] = {
        "workerd": {n: [] for n in labels},
        "in_process": {n: [] for n in labels},
    }
    with private_redis() as server:
        for round_no in range(args.rounds):
            for tree, label in zip(trees, labels, strict=True):
                ws = harness.Workspace(tree_config(tree))
                try:
                    run = measure_workerd(tree, server.url, args.jobs, args.workers, ws)
                    run["load_average"] = os.getloadavg()[0]
                    results["workerd"][label].append(run)
                    if args.in_process:
                        run = measure_in_process(tree, server.url, args.jobs, ws)
                        run["load_average"] = os.getloadavg()[0]
                        results["in_process"][label].append(run)
                finally:
                    ws.close()
                print(
                    f"round {round_no + 1}, {label}: done (load {os.getloadavg()[0]:.1f})",
                    file=sys.stderr,
                )
    print(report(results["workerd"], f"workerd, {args.workers} worker(s), {args.jobs:,} jobs"))
    print()
    print(commands_table(results["workerd"]))
    if args.in_process:
        print()
        print(
            report(
                results["in_process"],
                f"one process through shared.engine.scripts, {args.jobs:,} jobs",
            )
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


def label_of(tree: Path) -> str:
    """Return a tree's label: its commit (+ when it has uncommitted changes), else its name."""
    git = ["git", "-C", str(tree)]
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if commit.returncode == 0:
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "-uno"], capture_output=True, text=True
        )
        return commit.stdout.strip() + ("+" if dirty.stdout.strip() else "")
    stamp = tree / "COMMIT"
    return stamp.read_text().strip()[:7] if stamp.exists() else tree.resolve().name


if __name__ == "__main__":
    main()
