"""The dashboard's overview (GET /ui) and its live fragment: server time with 1,000,000 jobs.

A private redis-server holds N jobs spread over four queues and six states (bench.listing's
loader: one job per state made by the engine's own scripts, copied with HSET and ZADD, so the
hashes and indexes have the engine's shapes). The gateway app (create_app, as gunicorn runs
it) answers GET /ui and GET /ui/live/overview through Flask's test client in this process:
the time is the server's whole work for a request (routing, the stats round trip, the chart,
Jinja), without a network hop. The overview reads counts with ZCARD per state index and one
ZRANGE for the oldest pending job per queue, so its cost should not grow with N; the bench
measures it at N and at 1,000 to show it.

    .venv/bin/python -m bench.ui_overview                      # 1,000,000 and 1,000 jobs
    .venv/bin/python -m bench.ui_overview --jobs 20000 --reads 50
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from bench.listing import load, template
from gateway import create_app
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState
from shared.settings.config import Settings
from tests.support.redis_server import private_redis
from tests.support.stats import percentile

QUEUES = ("default", "mail", "pdf", "reports")
# How N splits over the states (processing is bounded by live workers: a few).
SHARES = {
    JobState.PENDING: 0.40,
    JobState.SCHEDULED: 0.10,
    JobState.RETRYING: 0.05,
    JobState.COMPLETED: 0.30,
    JobState.DEAD: 0.10,
    JobState.CANCELED: 0.05,
}
PATHS = ("/ui", "/ui/live/overview")


def fill(client: Any, keys: Keys, jobs: int) -> None:
    """Load `jobs` jobs over QUEUES and SHARES."""
    # template() empties Redis after making its job: every template first, then the copies.
    shapes = {state: template(client, keys, state) for state in SHARES}
    for state, share in SHARES.items():
        per_queue = int(jobs * share) // len(QUEUES)
        for queue in QUEUES:
            load(client, keys.for_queue(queue), state, shapes[state], per_queue)


def reads_of(web: Any, reads: int) -> dict[str, list[float]]:
    """Return the milliseconds of `reads` reads of each path."""
    times: dict[str, list[float]] = {path: [] for path in PATHS}
    for path in PATHS:
        assert web.get(path).status_code == 200  # warm: templates compiled, key loaded
        for _ in range(reads):
            begin = time.perf_counter()
            response = web.get(path)
            times[path].append((time.perf_counter() - begin) * 1000)
            assert response.status_code == 200
    return times


def total(client: Any, keys: Keys) -> int:
    """Return how many jobs the state indexes hold."""
    return sum(client.zcard(keys.for_queue(q).state_index(s)) for q in QUEUES for s in JobState)


def measure(jobs: int, reads: int) -> dict[str, dict[str, list[float]]]:
    """Return the milliseconds of each read of each path with `jobs` jobs in Redis: before
    any trim (the chart then counts the whole hour live: 60 ZCOUNTs and 3,600 failure seconds
    a queue) and after one trim per queue (the scheduler trims every busy queue every second:
    the chart then reads trim's buckets and a second or two of tail)."""
    keys = Keys()
    with private_redis(**{"hash-max-listpack-value": "512"}) as server:
        client = server.client(socket_timeout=60)
        started = time.perf_counter()
        fill(client, keys, jobs)
        scripts = Scripts(client, keys)
        for queue in QUEUES:
            scripts.register_queue(queue)
        scripts.load()
        print(f"{total(client, keys):,} jobs loaded in {time.perf_counter() - started:.1f} s")
        app = create_app(Settings.from_env({"REDIS_URL": server.url}), scripts=scripts)
        web = app.test_client()
        times = {"no trim yet": reads_of(web, reads)}
        for queue in QUEUES:
            scripts.trim(queue=queue)
        print(f"{total(client, keys):,} jobs after one trim per queue", flush=True)
        times["after trim"] = reads_of(web, reads)
        client.close()
    return times


def main(argv: list[str] | None = None) -> None:
    """Run the bench and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--reads", type=int, default=200)
    args = parser.parse_args(argv)
    rows = []
    for jobs in (args.jobs, args.small):
        for when, paths in measure(jobs, args.reads).items():
            for path, ms in paths.items():
                p95 = percentile(ms, 0.95) or 0.0
                rows.append((jobs, when, path, statistics.median(ms), p95, max(ms)))
    print(
        f"\n{'jobs':>10}  {'chart':<12} {'path':<18} {'median ms':>9} {'p95 ms':>7} {'max ms':>7}"
    )
    for jobs, when, path, median, p95, worst in rows:
        print(f"{jobs:>10,}  {when:<12} {path:<18} {median:>9.2f} {p95:>7.2f} {worst:>7.2f}")


if __name__ == "__main__":
    main()
