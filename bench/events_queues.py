"""GET /events with many queues listed: the id's size, opening a stream, a resume.

With 650 queues the id used to be 14,408 bytes (a position per queue), which gunicorn refuses
as a header (431). On one Redis the id is now one stream id. For each queue count, against a
private redis-server through Flask's test client: the first message's id, the median time to
open a stream (until its first message), and a resume with Last-Event-ID that must deliver the
five jobs enqueued into queues spread over the list after that id.

    .venv/bin/python -m bench.events_queues                    # 1 and 10,000 queues
    .venv/bin/python -m bench.events_queues --queues 1 650 10000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import redis

from gateway import create_app
from gateway import events_api as gateway_events
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import EnqueueRequest
from shared.settings.config import Settings
from tests.support.redis_server import RedisServer
from tests.support.tools import require_tool

OPENS = 20  # streams opened per queue count (the median is reported)
JOBS = 5  # jobs a resume must deliver


def first_id(client: object) -> tuple[str, float]:
    """Open a stream; return its first id and the seconds until it came."""
    started = time.perf_counter()
    response = client.get("/events", buffered=False)  # type: ignore[attr-defined]
    try:
        first = next(response.iter_encoded()).decode()
    finally:
        response.close()
    cursor = next(line[4:] for line in first.split("\n") if line.startswith("id: "))
    return cursor, time.perf_counter() - started


def measure(r: redis.Redis, queues: int) -> str:
    """Return one line of figures for `queues` listed queues."""
    keys = Keys()
    r.flushall()
    names = [f"q{i}" for i in range(queues)]
    r.sadd(keys.queues, *names)
    scripts = Scripts(r, keys)
    scripts.enqueue(EnqueueRequest(type="t", payload_json="{}", queue=names[0]), str(uuid.uuid4()))
    app = create_app(Settings.from_env({"REDIS_URL": "redis://unused"}), scripts=scripts)
    app.extensions[gateway_events.EXTENSION].keepalive = 0.2
    client = app.test_client()
    opens = [first_id(client) for _ in range(OPENS)]
    cursor = opens[-1][0]
    jobs = [str(uuid.uuid4()) for _ in range(JOBS)]
    for i, job in enumerate(jobs):
        queue = names[i * len(names) // JOBS]
        scripts.enqueue(EnqueueRequest(type="t", payload_json="{}", queue=queue), job)
    started = time.perf_counter()
    response = client.get("/events", headers={"Last-Event-ID": cursor}, buffered=False)
    seen, text = 0, ""
    try:
        for chunk in response.iter_encoded():
            text += chunk.decode()
            seen = sum(job in text for job in jobs)
            if seen == JOBS or time.perf_counter() - started > 10:
                break
    finally:
        response.close()
        app.extensions[gateway_events.EXTENSION].tail.stop()
    resumed = time.perf_counter() - started
    opened = statistics.median(seconds for _, seconds in opens)
    return (
        f"{queues} queues: id {len(cursor)} bytes; open {opened * 1000:.1f} ms (median of "
        f"{OPENS}); a resume delivered {seen}/{JOBS} jobs in {resumed * 1000:.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, nargs="+", default=[1, 10_000])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="taskforge-events-queues-") as tmp:
        server = RedisServer(require_tool("redis-server"), Path(tmp) / "redis")
        server.dir.mkdir(parents=True)
        server.start()
        try:
            r = redis.Redis.from_url(server.url)
            for queues in args.queues:
                print(measure(r, queues))
        finally:
            server.close()


if __name__ == "__main__":
    main()
