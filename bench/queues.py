"""What serving several queues costs Redis per job, while workerd drains one queue or three.

    .venv/bin/python -m bench.queues                  # a05e74a (before queues), this checkout
    .venv/bin/python -m bench.queues --before none --jobs 3000 --rounds 1 --workers 1

The peers' drain method (bench/peers/harness.py) on the real workerd with the no-op
``bench_stamp`` handler: the jobs are enqueued first (untimed), ``INFO`` is read before workerd
starts and again once the last job ran. Per job: jobs/s (first job start to last job end),
Redis commands (those scripts run included), round trips (requests Redis read), EVALSHA calls
(script calls: one per job is a complete that claimed the next) and Redis CPU µs
(used_cpu_sys + used_cpu_user). Then, per second of the IDLE_SECONDS after the last job:
script calls and Redis CPU with every worker idle (the scheduler's calls per listed queue, idle
polls, heartbeats), the share of the per-job figures that does not grow with the jobs.
Scenarios, each with 1 and 2 worker processes:

- before: one queue on the ``--before`` revision (a05e74a, the commit before named queues),
  exported with ``git archive`` and run on its own code (its own producer fills), as bench.ab
  does;
- one queue: this checkout, ``WORKER_QUEUES=default``;
- 3 busy strict: ``a,b,c``, a third of the jobs in each;
- 3 busy weighted: ``a:6,b:3,c:1``, the jobs split 6:3:1 so all three stay busy to the end;
- first empty: strict ``a,b,c`` with a and b empty, every job in c (the worker asks a and b
  again every ``empty_recheck`` (workerd.claim_plan) while it works through c).

Every queue of a scenario is listed (as the gateway lists it), so the scheduler promotes,
recovers and trims each: its calls are in the figures. Rounds are interleaved; each figure is
the median (min–max) over rounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import redis

from bench import ab, redis_cost
from bench.peers import harness
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import validate_enqueue
from shared.read.directory import QueueDirectory
from tests.support.redis_server import private_redis

BATCH = 1_000  # jobs per enqueue_many call while filling
IDLE_SECONDS = 2.0


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One way of spreading the jobs over queues, and the WORKER_QUEUES that serves them."""

    key: str
    label: str
    worker_queues: str
    shares: tuple[tuple[str, float], ...]  # (queue, share of the jobs); listed queues too

    def counts(self, jobs: int) -> dict[str, int]:
        """Return how many jobs each queue gets (the last one takes the rounding)."""
        counts = {queue: int(jobs * share) for queue, share in self.shares}
        last = self.shares[-1][0]
        counts[last] += jobs - sum(counts.values())
        return counts


SCENARIOS = (
    Scenario("one", "one queue", "default", (("default", 1.0),)),
    Scenario("strict", "3 busy, strict a,b,c", "a,b,c", (("a", 1 / 3), ("b", 1 / 3), ("c", 1 / 3))),
    Scenario(
        "weighted",
        "3 busy, weighted a:6,b:3,c:1",
        "a:6,b:3,c:1",
        (("a", 0.6), ("b", 0.3), ("c", 0.1)),
    ),
    Scenario(
        "first_empty", "strict a,b,c, a and b empty", "a,b,c", (("a", 0.0), ("b", 0.0), ("c", 1.0))
    ),
)
BEFORE = "before"


def fill(url: str, counts: dict[str, int]) -> None:
    """Enqueue no-op stamp jobs into each queue as the gateway would: list it, then batches."""
    scripts = Scripts(redis.Redis.from_url(url), Keys())
    directory = QueueDirectory(scripts)
    for queue, count in counts.items():
        directory.ensure(queue)
        request = validate_enqueue({"type": "bench_stamp", "payload": {}, "queue": queue})
        for start in range(0, count, BATCH):
            size = min(BATCH, count - start)
            scripts.enqueue_many([(request, str(uuid.uuid4())) for _ in range(size)])
    scripts.redis.close()


def drain(
    scenario: Scenario | None,
    tree: Path,
    url: str,
    jobs: int,
    workers: int,
    ws: harness.Workspace,
) -> dict[str, object]:
    """Drain a scenario's jobs with `tree`'s workerd; return rate, Redis cost, idle cost.

    No scenario: `tree`'s own producer fills its one queue (an older commit knows no queues).
    Once the last job ran, the workers idle for IDLE_SECONDS: what Redis does then per second
    (idle polls, heartbeats, the scheduler's calls for every listed queue) is the part of the
    per-job figures that does not grow with the jobs.
    """
    config = redis_cost.tree_config(tree)
    client = redis.Redis.from_url(url)
    client.flushall()
    stamps = ws.stamps()
    env = harness.base_env(config, url, stamps)
    if scenario is None:
        harness.produce(config, env, "enqueue", "fill", str(jobs))
    else:
        env["WORKER_QUEUES"] = scenario.worker_queues
        fill(url, scenario.counts(jobs))
    before = harness.redis_info(client)
    label = scenario.label if scenario else "before"
    with harness.running(config, url, env, workers, ws.log) as group:
        harness.wait_stamps(stamps, jobs, max(120.0, jobs / 20), group, label)
        after = harness.redis_info(client)
        time.sleep(IDLE_SECONDS)  # a measuring window, not a wait for anything
        idle = harness.redis_info(client)
    out = summarise(stamps, jobs, before, after)
    out["idle_per_s"] = {
        "commands": (idle["calls"] - after["calls"] - 1) / IDLE_SECONDS,
        "evalsha": (idle["by_command"].get("evalsha", 0) - after["by_command"].get("evalsha", 0))
        / IDLE_SECONDS,
        "cpu_us": (idle["cpu"] - after["cpu"]) * 1e6 / IDLE_SECONDS,
        # The scheduler's retry check: an EXISTS per served queue, 20 times a second.
        "exists": (idle["by_command"].get("exists", 0) - after["by_command"].get("exists", 0))
        / IDLE_SECONDS,
    }
    return out


def summarise(stamps: Path, jobs: int, before: dict, after: dict) -> dict[str, object]:
    """Return jobs/s from the stamps and the Redis cost between two INFO snapshots."""
    ran = harness.stamp_count(stamps)
    if ran != jobs:
        raise RuntimeError(f"{ran} task runs for {jobs} jobs")
    rows = harness.read_stamps(stamps)
    seconds = max(row[2] for row in rows) - min(row[1] for row in rows)
    cost = harness.redis_cost(before, after, jobs)
    return {"jobs": jobs, "seconds": seconds, "jobs_per_s": jobs / seconds, **cost}


def evalsha(run: dict) -> float:
    """Return the script calls per job."""
    return run["commands"].get("evalsha", 0.0)


FIGURES = (
    ("jobs/s", lambda run: run["jobs_per_s"]),
    ("Redis CPU µs/job", lambda run: run["redis_cpu_us_per_job"]),
    ("commands/job", lambda run: run["commands_per_job"]),
    ("round trips/job", lambda run: run["round_trips_per_job"]),
    ("EVALSHA/job", evalsha),
    ("idle EVALSHA/s", lambda run: run["idle_per_s"]["evalsha"]),
    ("idle Redis CPU µs/s", lambda run: run["idle_per_s"]["cpu_us"]),
)


def table(results: dict[str, dict[str, list[dict]]], labels: dict[str, str]) -> str:
    """Return the markdown table: a row per scenario and worker count, median (min–max)."""
    head = "| scenario | workers | " + " | ".join(name for name, _ in FIGURES) + " |"
    lines = [head, "|---|---|" + "---|" * len(FIGURES)]
    for workers, by_scenario in results.items():
        for key, runs in by_scenario.items():
            if not runs:
                continue
            cells = [redis_cost.median_range([get(run) for run in runs]) for _, get in FIGURES]
            lines.append(f"| {labels[key]} | {workers} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def change(results: dict[str, dict[str, list[dict]]], workers: str, key: str, base: str) -> str:
    """Return a scenario's Redis CPU and jobs/s against another's, by medians."""
    runs, base_runs = results[workers][key], results[workers][base]
    cpu = [statistics.median(r["redis_cpu_us_per_job"] for r in rs) for rs in (runs, base_runs)]
    rate = [statistics.median(r["jobs_per_s"] for r in rs) for rs in (runs, base_runs)]
    return f"CPU {cpu[0] / cpu[1] - 1:+.0%}, jobs/s {rate[0] / rate[1] - 1:+.0%}"


def measure(args: argparse.Namespace, scenarios: list[Scenario]) -> dict[str, object]:
    """Run every scenario (and the before side) in interleaved rounds; return the figures."""
    started = time.monotonic()
    labels = {s.key: s.label for s in scenarios}
    results: dict[str, dict[str, list[dict]]] = {}
    with tempfile.TemporaryDirectory(prefix="taskforge-queues-") as scratch:
        trees = {key: harness.ROOT for key in labels}
        if args.before != "none":
            tree = ab.side_tree(args.before, Path(scratch) / "before")
            labels = {BEFORE: f"one queue, {redis_cost.label_of(tree)} (before)", **labels}
            trees[BEFORE] = tree
        results = {str(n): {key: [] for key in labels} for n in args.workers}
        with private_redis() as server:
            for round_no in range(args.rounds):
                for workers in args.workers:
                    for key in labels:
                        scenario = next((s for s in scenarios if s.key == key), None)
                        ws = harness.Workspace(redis_cost.tree_config(trees[key]))
                        try:
                            run = drain(scenario, trees[key], server.url, args.jobs, workers, ws)
                        finally:
                            ws.close()
                        run["load_average"] = os.getloadavg()[0]
                        results[str(workers)][key].append(run)
                    print(
                        f"round {round_no + 1} of {args.rounds}, {workers} worker(s): done "
                        f"(load {os.getloadavg()[0]:.1f})",
                        file=sys.stderr,
                    )
    loads = [r["load_average"] for by in results.values() for rs in by.values() for r in rs]
    return {
        "date": datetime.date.today().isoformat(),
        "commit": redis_cost.label_of(harness.ROOT),
        "minutes": (time.monotonic() - started) / 60,
        "rounds": args.rounds,
        "jobs": args.jobs,
        "load_average_median": statistics.median(loads),
        "labels": labels,
        "results": results,
    }


def report(doc: dict) -> str:
    """Return the table and each scenario's change against one queue (and one queue's vs before)."""
    labels, results = doc["labels"], doc["results"]
    lines = [
        f"{doc['date']}, {doc['commit']}: {doc['rounds']} interleaved round(s), "
        f"{doc['jobs']:,} jobs a drain, load average {doc['load_average_median']:.1f} "
        f"(median), {doc['minutes']:.1f} minutes",
        "",
        table(results, labels),
        "",
    ]
    for workers in results:
        if "one" not in labels:
            break
        for key in labels:
            if key == BEFORE:
                vs = change(results, workers, "one", BEFORE)
                lines.append(f"{workers} worker(s), one queue vs {labels[BEFORE]}: {vs}")
            elif key != "one":
                vs = change(results, workers, key, "one")
                lines.append(f"{workers} worker(s), {labels[key]} vs one queue: {vs}")
    return "\n".join(lines)


def main() -> None:
    """Measure every scenario in interleaved rounds; print the table and write JSON."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", default="a05e74a", help="revision or directory, or 'none'")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--scenarios",
        nargs="+",
        default=[s.key for s in SCENARIOS],
        choices=[s.key for s in SCENARIOS],
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    doc = measure(args, [s for s in SCENARIOS if s.key in args.scenarios])
    print(report(doc))
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
