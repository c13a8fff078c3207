"""GET /jobs/<id> with 1 and with 10,000 queues listed: server time per request, and Redis
commands per request.

A private redis-server; N queue names listed as the gateway lists them
(Scripts.register_queue), one job enqueued through POST /enqueue into a queue in the middle
of them. The gateway app (create_app, as gunicorn runs it) answers through Flask's test
client in this process, so the time is the server's whole work for a request (routing, the
lookup, the JSON) without a network hop. Measured: GET /jobs/<that id> (found), GET /jobs/<a
random UUIDv4> (404), and POST /jobs/<id>/cancel's lookup (locate, through GET's neighbour:
a cancel of a job already canceled answers 200 again and changes nothing).

Nothing here depends on how the checkout finds a job, so the same file runs on an older
revision (export it with ``git archive`` and run it there) to compare before and after:

    .venv/bin/python -m bench.job_lookup                    # 1 and 10,000 queues
    .venv/bin/python -m bench.job_lookup --queues 1 1000 --reads 100

Measured on the 2-core development VM under other engineers' load, one sitting (before:
a010cf4, exported and run with this file): GET /jobs/<id> found, p50, 1 → 10,000
queues: before 0.48 → 217 ms (10,001 Redis commands a request: one HGETALL per queue), a 404
2,756 ms (the list re-read, then every queue again); after 0.77 → 0.75 ms and 0.68 → 0.66 ms,
one command each (HGETALL, or the tag's SMEMBERS). The 1-queue difference between before and
after is the machine's: both run the same Python calls (2,482,001 per 2,000 GETs under
cProfile) and the same one HGETALL.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

from gateway import create_app
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.settings.config import Settings
from tests.support.redis_server import private_redis
from tests.support.stats import percentile


def timed(web: Any, method: str, path: str, status: int, reads: int) -> list[float]:
    """Return the milliseconds of `reads` requests (after one untimed warm-up)."""
    assert web.open(path, method=method).status_code == status
    times = []
    for _ in range(reads):
        begin = time.perf_counter()
        response = web.open(path, method=method)
        times.append((time.perf_counter() - begin) * 1000)
        assert response.status_code == status, response.get_data(as_text=True)
    return times


def commands(client: Any, web: Any, method: str, path: str) -> int:
    """Return the Redis commands one request causes (INFO commandstats, its own excluded)."""
    client.config_resetstat()
    web.open(path, method=method)
    stats = client.info("commandstats")
    own = ("cmdstat_info", "cmdstat_config|resetstat")
    return sum(v["calls"] for name, v in stats.items() if name not in own)


def measure(queues: int, reads: int) -> dict[str, tuple[list[float], int]]:
    """Return, per request kind, the milliseconds of each read and its Redis commands."""
    keys = Keys()
    with private_redis() as server:
        client = server.client(socket_timeout=60)
        scripts = Scripts(client, keys)
        scripts.load()
        names = [f"q{n:05d}" for n in range(queues)] if queues > 1 else ["default"]
        started = time.perf_counter()
        for name in names:
            scripts.register_queue(name)
        print(f"{queues:,} queues listed in {time.perf_counter() - started:.1f} s", flush=True)
        app = create_app(Settings.from_env({"REDIS_URL": server.url}), scripts=scripts)
        web = app.test_client()
        target = names[len(names) // 2]
        made = web.post("/enqueue", json={"type": "t", "queue": target})
        assert made.status_code == 201, made.get_data(as_text=True)
        job_id = made.get_json()["id"]
        assert web.post(f"/jobs/{job_id}/cancel").status_code == 200
        stranger = str(uuid.uuid4())
        kinds = {
            "GET found": ("GET", f"/jobs/{job_id}", 200),
            "GET 404": ("GET", f"/jobs/{stranger}", 404),
            "cancel again": ("POST", f"/jobs/{job_id}/cancel", 200),
        }
        result = {
            kind: (timed(web, method, path, status, reads), commands(client, web, method, path))
            for kind, (method, path, status) in kinds.items()
        }
        client.close()
    return result


def main(argv: list[str] | None = None) -> None:
    """Run the bench and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queues", type=int, nargs="+", default=[1, 10_000])
    parser.add_argument("--reads", type=int, default=300)
    args = parser.parse_args(argv)
    rows = []
    for queues in args.queues:
        for kind, (ms, count) in measure(queues, args.reads).items():
            rows.append((queues, kind, statistics.median(ms), percentile(ms, 0.95) or 0.0, count))
    print(f"\n{'queues':>7}  {'request':<13} {'p50 ms':>8} {'p95 ms':>8} {'commands':>9}")
    for queues, kind, p50, p95, count in rows:
        print(f"{queues:>7,}  {kind:<13} {p50:>8.3f} {p95:>8.3f} {count:>9}")


if __name__ == "__main__":
    main()
