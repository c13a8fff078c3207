"""Measure what durable mode costs: enqueue throughput and latency with WAIT off and WAIT 1.

Starts a private primary and its replica (tests/support/replicated.py), then two gateways under
real gunicorn on the primary (deploy/gunicorn.conf.py, WEB_CONCURRENCY 2): one with
TASKFORGE_WAIT_REPLICAS unset, one with 1. Each round drives each gateway in turn (alternating
which goes first) with `clients` keep-alive connections posting single ``POST /enqueue`` for
`seconds`, from a separate process, and records every request's latency. Prints each round and
the medians over rounds of jobs/s, p50 and p99 (nearest rank, tests/support/stats.py).

The gateway's own CPU (two processes on a shared 2-core machine) can hide what WAIT adds, so
the engine's enqueue path is measured too, the same way: one connection, one enqueue after
another (``Scripts.enqueue``, what the gateway calls), WAIT off and WAIT 1 alternating.

Run from the repository root: ``.venv/bin/python -m bench.durable`` (``--help``).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import multiprocessing
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import redis

from shared.engine.engine_types import Policy
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import validate_enqueue
from tests.support.gunicorn import Gunicorn, run_gunicorn
from tests.support.redis_server import redis_binary
from tests.support.replicated import replicated_redis
from tests.support.stats import percentile

BODY = json.dumps({"type": "bench", "payload": {"to": "user@example.com", "n": 1}})
MODES = {"off": {}, "wait1": {"TASKFORGE_WAIT_REPLICAS": "1", "TASKFORGE_WAIT_TIMEOUT": "500ms"}}


def _client(port: int, until: float, latencies: list[float], errors: list[int]) -> None:
    """Post enqueues on one keep-alive connection until `until` (monotonic).

    gunicorn replaces a worker after max_requests (deploy/gunicorn.conf.py), closing its
    keep-alive connections: the client then connects again, and counts it as error 0.
    """
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Content-Type": "application/json"}
    try:
        while time.monotonic() < until:
            started = time.perf_counter()
            try:
                conn.request("POST", "/enqueue", BODY, headers)
                response = conn.getresponse()
                response.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                errors.append(0)
                continue
            if response.status == 201:
                latencies.append(time.perf_counter() - started)
            else:
                errors.append(response.status)
    finally:
        conn.close()


def _load(port: int, clients: int, seconds: float, out: Any) -> None:
    """A separate process: `clients` threads, one connection each; send back the latencies."""
    latencies: list[float] = []
    errors: list[int] = []
    until = time.monotonic() + seconds
    threads = [
        threading.Thread(target=_client, args=(port, until, latencies, errors))
        for _ in range(clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=seconds + 30)
    out.send((latencies, errors))


def measure(gateway: Gunicorn, clients: int, seconds: float) -> dict[str, float]:
    """Drive one gateway; return jobs/s, p50 and p99 (ms) and the count of non-201 answers."""
    here, there = multiprocessing.Pipe(duplex=False)
    process = multiprocessing.Process(target=_load, args=(gateway.port, clients, seconds, there))
    process.start()
    if not here.poll(seconds + 60):
        process.kill()
        raise RuntimeError("the load process sent nothing back")
    latencies, errors = here.recv()
    process.join(timeout=10)
    return {
        "jobs_per_s": len(latencies) / seconds,
        "p50_ms": (percentile(latencies, 0.5) or 0.0) * 1000,
        "p99_ms": (percentile(latencies, 0.99) or 0.0) * 1000,
        "errors": float(len(errors)),
    }


def measure_engine(client: redis.Redis, replicas: int, seconds: float) -> dict[str, float]:
    """Enqueue one job after another on one connection for `seconds`; the same figures."""
    scripts = Scripts(client, Keys(), Policy(wait_replicas=replicas, wait_timeout_ms=500))
    scripts.load()
    request = validate_enqueue(json.loads(BODY))
    latencies: list[float] = []
    errors = 0
    until = time.monotonic() + seconds
    n = 0
    while time.monotonic() < until:
        n += 1
        started = time.perf_counter()
        result = scripts.enqueue(request, f"{replicas}-{n}-{until}")
        if result.confirmation is None or result.confirmation.confirmed:
            latencies.append(time.perf_counter() - started)
        else:
            errors += 1
    return {
        "jobs_per_s": len(latencies) / seconds,
        "p50_ms": (percentile(latencies, 0.5) or 0.0) * 1000,
        "p99_ms": (percentile(latencies, 0.99) or 0.0) * 1000,
        "errors": float(errors),
    }


def _line(label: str, figures: dict[str, float]) -> str:
    return (
        f"{label}: {figures['jobs_per_s']:8.0f} jobs/s  p50 {figures['p50_ms']:6.2f} ms  "
        f"p99 {figures['p99_ms']:6.2f} ms  not acknowledged {figures['errors']:.0f}"
    )


def _medians(results: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    return {
        mode: {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        for mode, rounds in results.items()
    }


def _summary(title: str, medians: dict[str, dict[str, float]]) -> None:
    print(title)
    for mode, figures in medians.items():
        print("  " + _line(f"{mode:5}", figures))
    off, on = medians["off"], medians["wait1"]
    print(
        f"  WAIT 1 costs {100 * (1 - on['jobs_per_s'] / off['jobs_per_s']):.1f} % of throughput, "
        f"{on['p50_ms'] - off['p50_ms']:+.2f} ms at p50, {on['p99_ms'] - off['p99_ms']:+.2f} ms "
        "at p99"
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.durable", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="load per gateway per round")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    engine: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tf-durable-")))
        pair = stack.enter_context(replicated_redis(redis_binary(), tmp / "redis"))
        gateways = {}
        for mode, env in MODES.items():
            (tmp / mode).mkdir()
            gateways[mode] = stack.enter_context(run_gunicorn(pair.primary.url, tmp / mode, **env))
        measure(gateways["off"], args.clients, 1.0)  # warm both up (imports, pools)
        measure(gateways["wait1"], args.clients, 1.0)
        client = stack.enter_context(contextlib.closing(pair.primary.client()))
        for n in range(args.rounds):
            order = list(MODES) if n % 2 == 0 else list(reversed(MODES))
            for mode in order:
                results[mode].append(measure(gateways[mode], args.clients, args.seconds))
                print(_line(f"round {n + 1} gateway {mode:5}", results[mode][-1]), flush=True)
            for mode in order:
                replicas = 1 if mode == "wait1" else 0
                engine[mode].append(measure_engine(client, replicas, args.seconds))
                print(_line(f"round {n + 1} engine  {mode:5}", engine[mode][-1]), flush=True)
    medians, engine_medians = _medians(results), _medians(engine)
    print(f"\nmedians of {args.rounds} rounds of {args.seconds:g} s")
    _summary(f"gateway, POST /enqueue, {args.clients} keep-alive clients:", medians)
    _summary("engine, Scripts.enqueue, one connection, one at a time:", engine_medians)
    if args.json:
        figures = {
            "command": f"python -m bench.durable --rounds {args.rounds} --seconds {args.seconds:g}",
            "gateway": {"rounds": results, "medians": medians},
            "engine": {"rounds": engine, "medians": engine_medians},
        }
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
