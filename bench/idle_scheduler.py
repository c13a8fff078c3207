"""What an idle scheduler costs with 1 and with 10,000 named queues.

    .venv/bin/python -m bench.idle_scheduler                        # 1 and 10,000 names, 10 s
    .venv/bin/python -m bench.idle_scheduler --queues 1 650 10000 --seconds 20
    cd <an older tree, exported with git archive> && cp <this file> bench/ &&
        <this checkout>/.venv/bin/python -m bench.idle_scheduler     # "before"

For each count: a private redis-server; the names listed as the gateway lists them (SADD) and
one pending job in each (enqueued in batches), so each is a queue that held a job; then a real
SchedulerProcess (its own process, forked, serving the default queue as WORKER_QUEUES'
default does) runs untouched for a warm-up and then `--seconds`. Measured over those seconds:
Redis commands a second (INFO total_commands_processed, the bench's two INFO calls removed)
and the CPU of the scheduler process and of redis-server (utime + stime from /proc/<pid>/stat,
as a share of one core). Nothing else talks to Redis meanwhile. The file runs on its own
against any tree with a SchedulerProcess(scripts, slot, parent_pid, reconnect_grace=...)
whose run() loops, which is how "before" figures are taken from an exported older commit.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import time
import uuid
from pathlib import Path

import redis

from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import validate_enqueue
from tests.fakes import IdleSlot
from tests.support.redis_server import private_redis
from tests.support.tools import cpu_seconds
from workerd.scheduler import SchedulerProcess

BATCH = 500  # jobs per enqueue_many while filling (one MULTI/EXEC on one Redis)
WARM_UP_SECONDS = 3.0  # the first listing, recovery and trim passes, the sweep's first names


def fill(client: redis.Redis, count: int) -> None:
    """List `count` names and enqueue one pending job in each (names q00000, q00001, …)."""
    scripts = Scripts(client, Keys())
    names = [f"q{n:05d}" for n in range(count)]
    for start in range(0, count, BATCH):
        chunk = names[start : start + BATCH]
        client.sadd(Keys().queues, *chunk)
        jobs = [
            (validate_enqueue({"type": "demo.noop", "queue": q}), str(uuid.uuid4())) for q in chunk
        ]
        scripts.enqueue_many(jobs)


def start_scheduler(url: str) -> int:
    """Fork a process that runs a real scheduler until SIGTERM; return its pid."""
    parent = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        logging.basicConfig(level=logging.WARNING)
        client = redis.Redis.from_url(url)
        scripts = Scripts(client, Keys())
        scripts.load()
        process = SchedulerProcess(scripts, IdleSlot(), parent, reconnect_grace=0.0)
        process.install_signals()
        code = process.run()
    finally:
        os._exit(code)


def measure(count: int, seconds: float) -> dict[str, float]:
    """Return the idle scheduler's figures with `count` named queues."""
    with private_redis() as server:
        client = redis.Redis.from_url(server.url)
        fill(client, count)
        assert server.process is not None
        redis_pid = server.process.pid
        scheduler = start_scheduler(server.url)
        try:
            time.sleep(WARM_UP_SECONDS)
            commands = int(client.info("stats")["total_commands_processed"])
            cpu = cpu_seconds(scheduler), cpu_seconds(redis_pid)
            began = time.monotonic()
            time.sleep(seconds)
            elapsed = time.monotonic() - began
            cpu_after = cpu_seconds(scheduler), cpu_seconds(redis_pid)
            commands = int(client.info("stats")["total_commands_processed"]) - commands - 1
        finally:
            os.kill(scheduler, signal.SIGTERM)
            os.waitpid(scheduler, 0)
            client.close()
    return {
        "queues": count,
        "commands_per_s": round(commands / elapsed, 1),
        "scheduler_cpu_pct": round(100 * (cpu_after[0] - cpu[0]) / elapsed, 2),
        "redis_cpu_pct": round(100 * (cpu_after[1] - cpu[1]) / elapsed, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queues", type=int, nargs="+", default=[1, 10_000])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    rows = [measure(count, args.seconds) for count in args.queues]
    print(f"{'queues':>8} {'commands/s':>11} {'scheduler CPU %':>16} {'redis CPU %':>12}")
    for row in rows:
        print(
            f"{row['queues']:>8} {row['commands_per_s']:>11} {row['scheduler_cpu_pct']:>16} "
            f"{row['redis_cpu_pct']:>12}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
