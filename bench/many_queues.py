"""What many named queues cost when nothing runs: the figures at 1 and 10,000 queues.

For each N it starts its own redis-server, a gateway under gunicorn (deploy/gunicorn.conf.py,
two workers) and a workerd (one worker process, its scheduler, WORKER_QUEUES=default); lists
N queues the cheapest real way (one pending job in each: POST /enqueue/batch, 1,000 jobs a
request, each to its own queue; N=1 is the default queue alone), waits for the first scheduler
passes to settle, then measures:

- idle: scheduler and redis-server CPU (% of a core, /proc/<pid>/stat over --idle seconds),
  Redis commands a second (INFO commandstats, before and after the same window), the gateway
  untouched meanwhile;
- GET /jobs/<id> (a job in the last queue listed): p50 over --reads requests;
- the overview (GET /ui), GET /stats, GET /metrics: p50 and max over --pages requests each
  (the first request of each is left out: it may run the first sweep of the totals), and the
  size of /metrics;
- the Redis commands one request of each of those runs (INFO commandstats, scripts' own
  commands included, workerd stopped with SIGSTOP meanwhile): unlike times, not noisy;
- the reads that used to list every queue (``READS``: the queues page,
  listings and the DLQ without a queue, GET /limits, the throughput of all queues): p50, max
  and Redis commands of one request each, as above;
- the event stream: the length of an event's ``id:``, and whether a reconnect with
  ``Last-Event-ID`` is answered and delivers a job enqueued while the client was away.

    .venv/bin/python -m bench.many_queues                          # N = 1 and 10,000
    .venv/bin/python -m bench.many_queues --queues 1 2000 --idle 5 --reads 100
    .venv/bin/python -m bench.many_queues --repo /work/wt/overview-base   # another checkout

``--repo`` runs this same file against another checkout's code (its gateway, workerd and
tests/support), e.g. a worktree of main, for a before/after in one sitting. On a shared
2-core machine the figures are noisy: compare runs made one after the other.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.gunicorn import Gunicorn, run_gunicorn
from tests.support.redis_server import RedisServer, private_redis
from tests.support.stats import percentile
from tests.support.tools import cpu_seconds, free_port, wait_until
from tests.support.workerd import Workerd, running_workerd

BATCH = 1000  # jobs per POST /enqueue/batch: the gateway's cap
SETTLE = 3.0  # seconds after the queues are listed before the idle window
EVENT_TIMEOUT = 10.0  # seconds to wait for an event on the stream
# Reads across queues, measured as the pages above are: name -> path.
READS = {
    "queues_page": "/ui/queues",
    "jobs_pending": "/jobs?state=pending",
    "jobs_scheduled": "/jobs?state=scheduled",
    "ui_jobs": "/ui/jobs",
    "ui_dlq": "/ui/dlq",
    "dlq": "/dlq",
    "limits": "/limits",
    "throughput": "/stats/throughput",
}


def list_queues(web: Gunicorn, n: int) -> str:
    """List `n` queues (default, then bench-00001 ...) with one pending job each; return the
    id of the job in the last one."""
    names = ["default"] + [f"bench-{i:05d}" for i in range(1, n)]
    last = ""
    for at in range(0, n, BATCH):
        jobs = [{"type": "demo.noop", "payload": {}, "queue": q} for q in names[at : at + BATCH]]
        status, _, doc = web.request("POST", "/enqueue/batch", {"jobs": jobs}, timeout=120)
        assert status == 201, (status, doc)
        last = doc["jobs"][-1]["id"]
    return last


def commands(client: Any) -> int:
    """Return every command Redis has run so far (INFO commandstats, summed)."""
    return sum(int(v["calls"]) for k, v in client.info("commandstats").items())


def idle(server: RedisServer, scheduler: int, seconds: float) -> dict[str, float]:
    """Return the scheduler's and Redis's CPU (% of a core) and Redis commands/s over `seconds`."""
    client = server.client()
    c0, s0, r0, t0 = commands(client), cpu_seconds(scheduler), cpu_seconds(server.pid), time.time()
    time.sleep(seconds)  # the window measured: nothing waits on it
    c1, s1, r1, t1 = commands(client), cpu_seconds(scheduler), cpu_seconds(server.pid), time.time()
    span = t1 - t0
    return {
        "scheduler_cpu_pct": round(100 * (s1 - s0) / span, 1),
        "redis_cpu_pct": round(100 * (r1 - r0) / span, 1),
        "redis_commands_per_s": round((c1 - c0 - 2) / span),  # less the two INFO calls
    }


def timed(call: Callable[[], tuple[int, Any]], count: int) -> tuple[dict[str, Any], Any]:
    """Return p50 and max milliseconds of `count` calls (after one untimed), the statuses
    other than 200 (a page that times out is a figure too), and the last body."""
    status, body = call()
    times, failed = [], []
    for _ in range(count):
        started = time.perf_counter()
        status, body = call()
        times.append((time.perf_counter() - started) * 1000)
        if status != 200:
            failed.append(status)
    figures: dict[str, Any] = {
        "p50_ms": round(percentile(times, 0.5) or 0, 2),
        "max_ms": round(max(times), 2),
    }
    if failed:
        figures["not_200"] = failed
    return figures, body


def commands_of(server: RedisServer, workerd: Workerd, call: Callable[[], object]) -> int:
    """Return the Redis commands one call runs (scripts' own included), workerd stopped
    meanwhile (SIGSTOP) so that its scheduler's commands are not counted with it."""
    client = server.client()
    pids = workerd.processes()
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        before = commands(client)
        call()
        return commands(client) - before - 1  # less the INFO of `before`
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def get(web: Gunicorn, path: str) -> Callable[[], tuple[int, Any]]:
    def call() -> tuple[int, Any]:
        try:
            status, _, body = web.request("GET", path, timeout=60)
        except TimeoutError:
            return 0, b""
        return status, body

    return call


class Stream:
    """One raw connection to GET /events (a header may be sent however long it is)."""

    def __init__(self, web: Gunicorn, last_event_id: str | None = None) -> None:
        self.sock = socket.create_connection((web.host, web.port), timeout=EVENT_TIMEOUT)
        extra = f"Last-Event-ID: {last_event_id}\r\n" if last_event_id else ""
        self.sock.sendall(
            f"GET /events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n{extra}\r\n".encode()
        )
        self.buffer = b""
        head = self._until(b"\r\n\r\n")
        self.status = int(head.split(b" ", 2)[1]) if head else 0

    def _until(self, mark: bytes) -> bytes:
        deadline = time.monotonic() + EVENT_TIMEOUT
        while mark not in self.buffer and time.monotonic() < deadline:
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            self.buffer += chunk
        if mark not in self.buffer:
            return b""
        found, self.buffer = self.buffer.split(mark, 1)
        return found

    def event_with(self, needle: str) -> str | None:
        """Return the id of the first event whose data holds `needle` (None: none in time)."""
        deadline = time.monotonic() + EVENT_TIMEOUT
        while time.monotonic() < deadline:
            message = self._until(b"\n\n").decode(errors="replace")
            if not message and not self.buffer:
                return None
            if needle in message:
                ids = [line[4:] for line in message.splitlines() if line.startswith("id: ")]
                return ids[0] if ids else ""
        return None

    def close(self) -> None:
        self.sock.close()


def enqueue_one(web: Gunicorn, queue: str = "default") -> str:
    status, _, doc = web.request(
        "POST", "/enqueue", {"type": "demo.noop", "payload": {}, "queue": queue, "delay": 3600}
    )
    assert status == 201, (status, doc)
    return str(doc["id"])


def resume(web: Gunicorn) -> dict[str, Any]:
    """Tell whether a reconnect with Last-Event-ID gets what was enqueued while away."""
    first = Stream(web)
    if first.status != 200:
        return {"first_status": first.status}
    seen = first.event_with(enqueue_one(web))
    first.close()
    if seen is None:
        return {"first_status": 200, "resume": "no event on the first connection"}
    missed = enqueue_one(web)
    again = Stream(web, seen)
    got = again.event_with(missed) if again.status == 200 else None
    again.close()
    return {
        "id_bytes": len(seen),
        "resume_status": again.status,
        "resume_works": got is not None,
    }


@contextmanager
def stack(n: int, tmp: Path) -> Iterator[tuple[RedisServer, Gunicorn, Workerd]]:
    """Run redis-server, the gateway and workerd (one worker, default queue) for one N."""
    with private_redis() as server, run_gunicorn(server.url, tmp) as web:
        settings = {
            "REDIS_URL": server.url,
            "PORT_WORKER": str(free_port()),
            "WORKER_COUNT": "1",
            "WORKER_QUEUES": "default",
            "TASKFORGE_BIND_HOST": "127.0.0.1",
            "TASKFORGE_HANDLERS": "workerd.demo",
        }
        with running_workerd(settings, f"many-queues-{n}-") as workerd:
            yield server, web, workerd


def measure(n: int, args: argparse.Namespace) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="many-queues-") as tmp,
        stack(n, Path(tmp)) as (
            server,
            web,
            workerd,
        ),
    ):
        started = time.monotonic()
        job = list_queues(web, n)
        listed = round(time.monotonic() - started, 1)
        wait_until(lambda: workerd.children("scheduler"), 10, "the scheduler")
        time.sleep(SETTLE)  # the first passes over the new queues end: not measured
        result: dict[str, Any] = {"queues": n, "listing_s": listed}
        result["idle"] = idle(server, workerd.children("scheduler")[0], args.idle)
        pages = {"get_job": f"/jobs/{job}", "overview": "/ui", "stats": "/stats"}
        pages["metrics"] = "/metrics"
        pages.update(READS)
        bodies = {}
        for name, path in pages.items():
            result[name], bodies[name] = timed(
                get(web, path), args.reads if name == "get_job" else args.pages
            )
            result[name]["redis_commands"] = commands_of(server, workerd, get(web, path))
        body = bodies["metrics"]
        result["metrics"]["bytes"] = len(body)
        result["metrics"]["series"] = sum(
            1 for line in body.decode().splitlines() if line and not line.startswith("#")
        )
        result["events"] = resume(web)
        return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queues", type=int, nargs="+", default=[1, 10_000])
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of the idle window")
    parser.add_argument("--reads", type=int, default=200, help="GET /jobs/<id> requests")
    parser.add_argument("--pages", type=int, default=20, help="requests of each page")
    parser.add_argument("--repo", type=Path, help="run against this checkout's code instead")
    parser.add_argument("--json", action="store_true", help="print one JSON line per N")
    args = parser.parse_args(argv)
    if args.repo is not None:
        rest = [a for a in (argv or sys.argv[1:]) if a != "--repo" and a != str(args.repo)]
        env = {**os.environ, "PYTHONPATH": str(args.repo.resolve())}
        command = [sys.executable, str(Path(__file__).resolve()), *rest]
        raise SystemExit(subprocess.call(command, cwd=args.repo, env=env))
    for n in args.queues:
        result = measure(n, args)
        print(json.dumps(result) if args.json else report(result), flush=True)


def report(r: dict[str, Any]) -> str:
    i, e = r["idle"], r["events"]
    return (
        f"N={r['queues']:,} (listed in {r['listing_s']} s)\n"
        f"  idle: scheduler {i['scheduler_cpu_pct']} % CPU, redis-server {i['redis_cpu_pct']} % "
        f"CPU, {i['redis_commands_per_s']:,} Redis commands/s\n"
        f"  GET /jobs/<id> {timing(r['get_job'])}\n"
        f"  GET /ui {timing(r['overview'])}\n"
        f"  GET /stats {timing(r['stats'])}\n"
        f"  GET /metrics {timing(r['metrics'])}, {r['metrics']['bytes']:,} bytes, "
        f"{r['metrics']['series']:,} series\n"
        + "".join(f"  GET {path} {timing(r[name])}\n" for name, path in READS.items())
        + f"  events: {json.dumps(e)}"
    )


def timing(figures: dict[str, Any]) -> str:
    failed = figures.get("not_200")
    more = f", not 200: {failed}" if failed else ""
    return (
        f"p50 {figures['p50_ms']} ms (max {figures['max_ms']}{more}), "
        f"{figures['redis_commands']:,} Redis commands"
    )


if __name__ == "__main__":
    main()
