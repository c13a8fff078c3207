"""The observability port, and what an idle workerd costs in CPU and Redis commands."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable

import pytest
import redis

from tests.support.redis_server import RedisServer
from tests.support.tools import cpu_seconds, wait_until
from tests.support.workerd import Workerd

IDLE_WINDOW = 5.0


def _gauge(text: str, name: str) -> float | None:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else None


def test_health_ready_and_metrics_answer_and_other_requests_are_refused(
    start_workerd: Callable[..., Workerd],
) -> None:
    workerd = start_workerd(WORKER_COUNT="3")

    status, _, body = workerd.http("/health")
    serves = {"mode": "strict", "names": ["default"], "weights": None}  # WORKER_QUEUES unset
    expected = {"status": "ok", "redis": "ok", "queues": serves, "quiet": False}
    assert (status, json.loads(body)) == (200, expected)
    status, _, body = workerd.http("/ready")
    assert (status, json.loads(body)) == (200, {"status": "ready", "redis": "ok", "quiet": False})

    def active_workers() -> float | None:
        status, _, body = workerd.http("/metrics")
        assert status == 200
        return _gauge(body.decode(), "taskforge_active_workers")

    # Each worker sets its gauge as it starts: /ready may answer a moment before the last.
    wait_until(lambda: active_workers() == 3, 5, "taskforge_active_workers to be 3")
    status, headers, body = workerd.http("/metrics")
    text = body.decode()
    assert headers["Content-Type"].startswith("text/plain")
    assert _gauge(text, "taskforge_busy_workers") == 0
    assert _gauge(text, 'taskforge_jobs{queue="default",state="pending"}') == 0

    for path in ("/health", "/ready", "/metrics"):
        status, headers, _ = workerd.http(path, method="POST")
        assert status == 405, path
        assert "GET" in headers["Allow"]
    status, _, body = workerd.http("/nope")
    assert status == 404
    assert json.loads(body) == {"error": "not found"}


@pytest.mark.slow
def test_idle_workers_use_under_1_percent_cpu_and_about_two_redis_commands_a_second(
    start_workerd: Callable[..., Workerd], redis_server: RedisServer
) -> None:
    # The default lease: a shorter one shortens an idle worker's wait (workerd.worker).
    workerd = start_workerd(WORKER_COUNT="2", TASK_VISIBILITY_TIMEOUT="30s")
    workers = workerd.children("worker")
    assert len(workers) == 2
    wait_until(  # past start-up: each worker is blocked in its wake-up wait
        lambda: len(workerd.events("worker_started")) == 2, 5, "both workers to start"
    )
    client = redis.Redis.from_url(redis_server.url, socket_timeout=2)
    expected = {f"taskforge-worker-{pid}" for pid in workers} | {
        f"taskforge-scheduler-{workerd.children('scheduler')[0]}",
        f"taskforge-supervisor-{workerd.pid}",
    }

    def named_connections() -> dict[str, str]:
        listed = {c["addr"]: c["name"] for c in client.client_list() if c["name"]}
        return listed if expected <= set(listed.values()) else {}

    # Every child must have connected before the window opens, or its commands look anonymous.
    names = wait_until(named_connections, 10, "every child's named Redis connection")
    pids = {"supervisor": workerd.pid, "scheduler": workerd.children("scheduler")[0]}
    pids |= {f"worker-{pid}": pid for pid in workers}
    cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}

    commands: Counter[str] = Counter()
    with client.monitor() as monitor:  # every command each client sends, with its address
        started = time.monotonic()
        while (elapsed := time.monotonic() - started) < IDLE_WINDOW:
            command = monitor.next_command()
            if command["client_type"] == "tcp":
                address = f"{command['client_address']}:{command['client_port']}"
                commands[names.get(address, "other")] += 1
    cpu = {name: (cpu_seconds(pid) - cpu_before[name]) / elapsed for name, pid in pids.items()}
    client.close()

    # Other tests' gateways may share this redis-server: each process's fleet view reads the
    # host registry (one command a second); they are not this workerd's.
    rates = {
        name: count / elapsed
        for name, count in commands.items()
        if not name.startswith("taskforge-gateway-")
    }
    report = ", ".join(f"{n}: {100 * v:.2f}% CPU" for n, v in cpu.items())
    print(f"\nidle over {elapsed:.1f} s — {report}")
    print("Redis commands/s — " + ", ".join(f"{n}: {v:.2f}" for n, v in sorted(rates.items())))
    for pid in workers:
        assert cpu[f"worker-{pid}"] < 0.01
        # One BLPOP a second, and the claim sent behind it (workerd.worker, _wait_then_claim).
        assert rates.get(f"taskforge-worker-{pid}", 0) <= 2.5
    assert set(rates) <= {f"taskforge-worker-{p}" for p in workers} | {
        f"taskforge-scheduler-{pids['scheduler']}",
        f"taskforge-supervisor-{workerd.pid}",
        f"taskforge-observer-{workerd.children('observer')[0]}",
    }, rates


def test_worker_gauges_count_job_threads(start_workerd: Callable[..., Workerd]) -> None:
    # With WORKER_THREADS, both gauges count job threads, as GET /workers does: busy ≤ active
    # (a new user saw active 3 beside busy 12 when active still counted processes).
    workerd = start_workerd(WORKER_COUNT="2", WORKER_THREADS="3")

    def gauges() -> tuple[float | None, float | None]:
        status, _, body = workerd.http("/metrics")
        assert status == 200
        text = body.decode()
        return (
            _gauge(text, "taskforge_active_workers"),
            _gauge(text, "taskforge_busy_workers"),
        )

    wait_until(lambda: gauges() == (6, 0), 10, "6 live and 0 busy job threads")
