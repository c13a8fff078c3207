"""Measure what a saturated limit costs: Redis commands per second and the throughput of the
jobs that flow past it.

Runs ``python -m workerd`` (WORKER_COUNT 4) against a private redis-server, three ways, each
on a fresh Redis:

- ``limited``: type ``demo.sleep`` limited to 2 running, 500 of them enqueued (2 run, 498 held),
  then the unlimited ``demo.noop`` jobs behind them;
- ``unlimited, 2 sleeping``: no limits, 2 ``demo.sleep`` jobs running (so the same 2 workers are
  busy), the same ``demo.noop`` jobs;
- ``unlimited, idle``: no limits, no ``demo.sleep`` job, the same ``demo.noop`` jobs.

For each: ``demo.noop`` jobs per second, Redis commands per second and per ``demo.noop`` job while
they run (INFO commandstats deltas), and Redis commands per second once they are done (the
limited type still saturated, its jobs held: what idle workers and the scheduler cost).

Run from the repository root: ``.venv/bin/python -m bench.limits`` (``--help``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model import limit_rules
from shared.model.jobs import validate_enqueue
from tests.support.redis_server import private_redis
from tests.support.tools import free_port, wait_until
from tests.support.workerd import Workerd, running_workerd

WORKERS = 4
SLOW = 500
SLEEP_SECONDS = 600  # longer than any run: the limited type stays saturated throughout


@contextmanager
def workerd(url: str) -> Iterator[Workerd]:
    """Run `python -m workerd` on the default queue until the block ends."""
    settings = {
        "REDIS_URL": url,
        "WORKER_COUNT": str(WORKERS),
        "PORT_WORKER": str(free_port()),
        "LOG_LEVEL": "WARNING",
        "TASKFORGE_HANDLERS": "workerd.demo",
        "WORKER_DRAIN_GRACE": "1s",
    }
    with running_workerd(settings, "taskforge-bench-limits-") as supervisor:
        yield supervisor


def commands(client: redis.Redis) -> int:
    """Return the commands Redis has run since its stats were reset (INFO commandstats)."""
    return sum(v["calls"] for v in client.info("commandstats").values())


def enqueue(scripts: Scripts, body: dict[str, Any], count: int) -> list[str]:
    ids = [str(uuid.uuid4()) for _ in range(count)]
    pipe_batch = [(validate_enqueue(body), job_id) for job_id in ids]
    for start in range(0, count, 500):
        scripts.enqueue_many(pipe_batch[start : start + 500])
    return ids


def completed(client: redis.Redis, keys: Keys) -> int:
    return int(client.zcard(keys.completed))


def run(mode: str, quick: int, idle_seconds: float) -> dict[str, Any]:
    """Measure one mode on a fresh Redis and workerd."""
    with private_redis() as server:
        client = redis.Redis.from_url(server.url)
        keys = Keys()
        scripts = Scripts(client, keys)
        slow = {"type": "demo.sleep", "payload": {"seconds": SLEEP_SECONDS}}
        if mode == "limited":
            doc = {"types": {"demo.sleep": {"concurrency": 2}}}
            scripts.set_limits("default", limit_rules.parse_limits(doc).compact_json())
            enqueue(scripts, slow, SLOW)
        elif mode == "unlimited, 2 sleeping":
            enqueue(scripts, slow, 2)
        with workerd(server.url):
            if mode != "unlimited, idle":
                wait_until(lambda: client.zcard(keys.processing) >= 2, 10, "two sleep jobs running")
            time.sleep(1.0)  # past start-up: the idle workers block on their wake list
            client.config_resetstat()
            began = time.monotonic()
            enqueue(scripts, {"type": "demo.noop"}, quick)
            wait_until(
                lambda: completed(client, keys) >= quick, 120, "the demo.noop jobs", interval=0.01
            )
            took = time.monotonic() - began
            during = commands(client)
            client.config_resetstat()
            time.sleep(idle_seconds)  # the measurement window (nothing left to run)
            after = commands(client)
            held = client.zcard(keys.held)
            running = client.zcard(keys.running)
    return {
        "noop_jobs_per_s": round(quick / took, 1),
        "redis_commands_per_s_while_flowing": round(during / took),
        "redis_commands_per_noop_job": round(during / quick, 2),
        "redis_commands_per_s_after": round(after / idle_seconds, 1),
        "held": held,
        "running_slots": running,
    }


def main() -> None:
    """Run the three modes, interleaved, `--rounds` times; print (and optionally save) the
    median of each figure and every round's."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3000, help="demo.noop jobs per mode")
    parser.add_argument("--idle", type=float, default=5.0, help="seconds measured after them")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the three modes")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    modes = ("limited", "unlimited, 2 sleeping", "unlimited, idle")
    rounds: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    for _ in range(args.rounds):
        for mode in modes:  # interleaved: a load that comes and goes hits every mode
            rounds[mode].append(run(mode, args.jobs, args.idle))
    results: dict[str, Any] = {
        mode: {figure: statistics.median(r[figure] for r in found) for figure in found[0]}
        | {"rounds": found}
        for mode, found in rounds.items()
    }
    results["workers"] = WORKERS
    results["cpus"] = os.cpu_count()
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
