"""Measure the operator API's reads and bulk actions on a private redis-server.

1. Bulk DLQ replay (shared/read/bulk.py): seed dead jobs, then replay them all by filter, a page of
   `--limit` per call, following the cursor; and purge a batch of ids. Milliseconds per call
   and jobs per second.
2. Throughput over the last hour (shared/read/throughput.py): `--queues` queues, each with
   `--completed` entries in its completed index and an hour of rolled-up buckets; the time of
   one `last_hour` read over one queue and over all, and the Redis commands it costs.

Run from the repository root: ``.venv/bin/python -m bench.operator_api`` (``--help``).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable

import redis

from shared.engine.engine_types import Code
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import validate_enqueue
from shared.read.bulk import bulk_dead
from shared.read.throughput import MINUTE_MS, last_hour
from tests.support.redis_server import private_redis

K = Keys()


def seed_dead(scripts: Scripts, queue: str, count: int) -> list[str]:
    """Create `count` dead jobs in `queue` through the scripts (enqueue, claim, fail)."""
    scripts.register_queue(queue)
    ids = []
    request = validate_enqueue({"type": "bench", "queue": queue, "max_retries": 1})
    for _ in range(count):
        job_id = str(uuid.uuid4())
        scripts.enqueue(request, job_id)
        job = scripts.claim("bench-w", queue=queue)
        assert job is not None and job.id == job_id
        assert scripts.fail(job_id, job.token, "E: bench", queue=queue).code is Code.DEAD
        ids.append(job_id)
    return ids


def bench_bulk(scripts: Scripts, jobs: int, limit: int) -> None:
    seed_dead(scripts, "bulk", jobs)
    calls: list[float] = []
    done, cursor = 0, None
    while True:
        began = time.perf_counter()
        result = bulk_dead(scripts, "replay", queues=["bulk"], limit=limit, cursor=cursor)
        calls.append(time.perf_counter() - began)
        done += len(result.done)
        cursor = result.next_cursor
        if cursor is None:
            break
    total = sum(calls)
    print(
        f"bulk replay by filter: {done} jobs in {len(calls)} calls of {limit}: "
        f"{statistics.median(calls) * 1000:.1f} ms a call (median), {done / total:,.0f} jobs/s"
    )
    ids = seed_dead(scripts, "purged", limit)
    began = time.perf_counter()
    result = bulk_dead(scripts, "purge", queues=["bulk", "purged"], ids=ids)
    elapsed = time.perf_counter() - began
    print(f"bulk purge of {len(result.done)} ids (looked up in 2 queues): {elapsed * 1000:.1f} ms")


def seed_throughput(scripts: Scripts, queues: list[str], completed: int, now_ms: int) -> None:
    """Fill each queue's completed index over the last minute and an hour of buckets."""
    for queue in queues:
        k = scripts.q(queue)
        pipe = scripts.redis.pipeline(transaction=False)
        for start in range(0, completed, 10_000):
            chunk = range(start, min(start + 10_000, completed))
            pipe.zadd(k.completed, {f"job-{n}": now_ms - 50_000 + n % 50_000 for n in chunk})
        minute = now_ms // MINUTE_MS
        buckets = {f"c:{m}": 1000 for m in range(minute - 61, minute)}
        buckets |= {f"f:{m}": 10 for m in range(minute - 61, minute)}
        pipe.hset(k.throughput, mapping={**buckets, "mark": now_ms - 3_000})
        pipe.execute()


def timed(call: Callable[[], object], rounds: int) -> float:
    """Return the median seconds of `rounds` calls."""
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def commands(client: redis.Redis, call: Callable[[], object]) -> int:
    client.config_resetstat()
    call()
    stats = client.info("commandstats")
    own = {"cmdstat_evalsha", "cmdstat_info", "cmdstat_config|resetstat"}
    return sum(v["calls"] for name, v in stats.items() if name not in own)


def bench_throughput(scripts: Scripts, queues: int, completed: int, rounds: int) -> None:
    names = [f"q{n}" for n in range(queues)]
    seconds, micros = scripts.redis.time()
    now_ms = seconds * 1000 + micros // 1000
    seed_throughput(scripts, names, completed, now_ms)
    one = timed(lambda: last_hour(scripts, names[:1]), rounds)
    every = timed(lambda: last_hour(scripts, names), rounds)
    per_queue = commands(scripts.redis, lambda: last_hour(scripts, names[:1]))
    print(
        f"last_hour, {completed:,} completed entries a queue: 1 queue {one * 1000:.2f} ms, "
        f"{queues} queues {every * 1000:.2f} ms (median of {rounds}); "
        f"{per_queue} Redis commands a queue"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5000, help="dead jobs to replay")
    parser.add_argument("--limit", type=int, default=1000, help="jobs per bulk call")
    parser.add_argument("--queues", type=int, default=10)
    parser.add_argument("--completed", type=int, default=100_000, help="entries per queue")
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    with private_redis() as server:
        client = redis.Redis.from_url(server.url)
        scripts = Scripts(client, K)
        scripts.load()
        bench_bulk(scripts, args.jobs, args.limit)
        bench_throughput(scripts, args.queues, args.completed, args.rounds)


if __name__ == "__main__":
    main()
