"""Where enqueue → start goes, step by step: an idle worker's wake, claim and start, and the
gateway's road from a client's send to its enqueue script.

``worker``: a private redis-server, ``python -m workerd`` with one worker whose handlers
module is bench.latency_probe, and a producer enqueueing through the engine (Scripts.enqueue)
one job every --interval seconds, each carrying its send time. ``gateway``: the same Redis,
one gunicorn worker running the gateway's app with its steps timed
(bench.latency_probe:gateway_app), and one keep-alive client POSTing /enqueue every
--interval seconds. Prints each step's median (ms) over the jobs after the first --warmup that took the path
measured (latency_parts.in_order).
The wrappers add a few µs a step; medians of steps do not add up to the total's median.

    .venv/bin/python -m bench.latency_parts worker --jobs 300
    .venv/bin/python -m bench.latency_parts gateway --jobs 300
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import redis

from bench.latency_probe import GATEWAY_STEPS, WORKER_STEPS
from tests.support.gunicorn import run_gunicorn
from tests.support.redis_server import private_redis
from tests.support.tools import free_port, wait_until
from tests.support.workerd import start_workerd

RUN_TIMEOUT = 60.0  # seconds for the last job's line after the last send


def rows(probe_dir: Path, width: int) -> list[list[float]]:
    """Return every line the probed processes wrote, as floats (send time first)."""
    out = []
    for path in probe_dir.glob("*.txt"):
        out += [[float(x) for x in line.split()] for line in path.read_text().splitlines()]
    return [row for row in out if len(row) == width]


def in_order(lines: list[list[float]]) -> list[list[float]]:
    """Return the jobs whose steps were all stamped, each after the one before: the path
    measured. Left out: a job claimed on a wake that came before it was sent (a hint left by
    an earlier job), or whose early steps no probe saw (a connection's first request)."""
    return [row for row in lines if all(a <= b for a, b in itertools.pairwise(row))]


def medians(lines: list[list[float]], steps: tuple[str, ...]) -> dict[str, float]:
    """Return each step's median time since the step before it (ms), and the total's."""
    names = ("sent", *steps)
    figures = {
        f"{names[i]} → {names[i + 1]}": statistics.median((r[i + 1] - r[i]) * 1000 for r in lines)
        for i in range(len(steps))
    }
    figures["total"] = statistics.median((r[-1] - r[0]) * 1000 for r in lines)
    return figures


def wait_for_lines(probe_dir: Path, width: int, count: int) -> list[list[float]]:
    wait_until(lambda: len(rows(probe_dir, width)) >= count, RUN_TIMEOUT, f"{count} lines")
    return sorted(rows(probe_dir, width))


def run_worker(url: str, probe_dir: Path, tmp: Path, jobs: int, interval: float) -> list:
    settings = {
        "REDIS_URL": url,
        "PORT_WORKER": str(free_port()),
        "WORKER_COUNT": "1",
        "TASKFORGE_HANDLERS": "bench.latency_probe",
        "BENCH_PROBE_DIR": str(probe_dir),
        "LOG_LEVEL": "INFO",
    }
    workerd = start_workerd(settings, tmp / "workerd.log", tmp / "workerd.err")
    try:
        from shared.engine.scripts import Scripts
        from shared.model.jobs import validate_enqueue

        scripts = Scripts(redis.Redis.from_url(url))
        for _ in range(jobs):
            request = validate_enqueue({"type": "latency_probe", "payload": {"sent": time.time()}})
            scripts.enqueue(request, str(uuid.uuid4()))
            time.sleep(interval)  # the workers idle between jobs: the wait is the workload's
        return wait_for_lines(probe_dir, len(WORKER_STEPS) + 1, jobs)
    finally:
        workerd.stop()


def run_gateway(url: str, probe_dir: Path, tmp: Path, jobs: int, interval: float) -> list:
    probe = {"WEB_CONCURRENCY": "1", "BENCH_PROBE_DIR": str(probe_dir)}
    with run_gunicorn(url, tmp, app="bench.latency_probe:gateway_app()", **probe) as gw:
        conn = http.client.HTTPConnection(gw.host, gw.port, timeout=10)
        body = json.dumps({"type": "send_email", "payload": {"to": "a@example.com"}})
        try:
            for _ in range(jobs):
                headers = {"Content-Type": "application/json", "X-Sent": f"{time.time():.6f}"}
                conn.request("POST", "/enqueue", body=body, headers=headers)
                response = conn.getresponse()
                response.read()
                if response.status != 201:
                    raise RuntimeError(f"POST /enqueue answered {response.status}")
                time.sleep(interval)
        finally:
            conn.close()
        return wait_for_lines(probe_dir, len(GATEWAY_STEPS) + 1, jobs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", choices=["worker", "gateway"])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--interval", type=float, default=0.01, help="seconds between sends")
    parser.add_argument("--warmup", type=int, default=20, help="first jobs left out")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="taskforge-latency-") as tmp_name:
        tmp = Path(tmp_name)
        probe_dir = tmp / "probe"
        (tmp / "metrics").mkdir()
        probe_dir.mkdir()
        with private_redis() as server:
            run = run_worker if args.path == "worker" else run_gateway
            lines = run(server.url, probe_dir, tmp, args.jobs, args.interval)
    steps = WORKER_STEPS if args.path == "worker" else GATEWAY_STEPS
    measured = in_order(lines[args.warmup :])
    figures = medians(measured, steps)
    left_out = len(lines) - args.warmup - len(measured)
    print(f"{args.path}: medians of {len(measured)} jobs ({left_out} off the path left out), ms")
    for name, value in figures.items():
        print(f"  {name}: {value:.3f}")


if __name__ == "__main__":
    main()
