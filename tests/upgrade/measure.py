"""Measure the upgrade on a private redis-server: the command's rate on N v1 jobs, and the time
a scheduler tick of the v1 duty takes while moving and while v1 is empty.

    .venv/bin/python -m tests.upgrade.measure 100000
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import redis

from shared.keys import Keys
from shared.upgrade import Upgrade
from tests.support.redis_server import RedisServer
from tests.support.tools import require_tool
from tests.upgrade.v1 import V1
from workerd.v1_drain import CHECK_INTERVAL, V1Drain


def seed(r: redis.Redis, count: int) -> None:
    """Enqueue `count` pending v1 jobs (40-byte payloads) with v1's own script, pipelined."""
    v1 = V1(r)
    k = v1.keys
    keys = [k.state_index("pending"), k.pending_since, k.seq, f"{k.prefix}wake"]
    pipe = r.pipeline(transaction=False)
    for i in range(count):
        jid = str(uuid.uuid4())
        payload = json.dumps({"n": i, "pad": "x" * 24}, separators=(",", ":"))
        v1._scripts["enqueue"](
            keys=[k.job(jid), *keys, k.state_index("scheduled"), k.idempotency("")],
            args=[jid, "t", payload, 0, 3, "", "", "", 1, 1000, "", k.job_prefix, ""],
            client=pipe,
        )
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()


def main(count: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(require_tool("redis-server"), Path(tmp), unix_socket=True)
        server.start()
        try:
            r = redis.Redis.from_url(server.url)
            seed(r, count)
            r.config_resetstat()
            began = time.perf_counter()
            moved = Upgrade(r, Keys()).run()
            took = time.perf_counter() - began
            usec = sum(v["usec"] for v in r.info("commandstats").values())
            print(
                f"command: {moved.total:,} jobs in {took:.1f} s ({moved.total / took:,.0f} jobs/s), "
                f"Redis {usec / moved.total:.0f} µs of command time a job"
            )
            r.flushall()
            seed(r, 10_000)
            drain, ticks, now = V1Drain(Upgrade(r, Keys())), [], 0.0
            while drain.upgrade.v1_holds_jobs() or drain.cursor is not None:
                began = time.perf_counter()
                drain.tick(now)
                ticks.append(time.perf_counter() - began)
                now += 1.0
            idle = []
            for _ in range(100):
                now += CHECK_INTERVAL
                began = time.perf_counter()
                drain.tick(now)
                idle.append(time.perf_counter() - began)
            print(
                f"scheduler duty: 10,000 jobs in {len(ticks)} ticks, median "
                f"{statistics.median(ticks) * 1000:.0f} ms, max {max(ticks) * 1000:.0f} ms a "
                f"tick; v1 empty: {statistics.median(idle) * 1e6:.0f} µs a check (one EXISTS)"
            )
        finally:
            server.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
