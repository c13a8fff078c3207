"""bench.latency_parts: a real workerd and a real gunicorn with bench.latency_probe's timed
steps; a few jobs each, to show every step is stamped in order and the figures come out.
A redis-server of this module's own: the probed workerd serves the default queue."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from bench import latency_parts
from bench.latency_probe import GATEWAY_STEPS, WORKER_STEPS
from tests.support.own_redis_server import own_redis_server  # noqa: F401 (fixture)
from tests.support.redis_server import RedisServer

JOBS = 12


def check(lines: list[list[float]], steps: tuple[str, ...]) -> None:
    assert len(lines) == JOBS
    assert all(len(row) == len(steps) + 1 for row in lines)
    # Most jobs take the path measured, every step after the one before; a few may not (a
    # stale wake-up hint, a connection's first request), and those are left out.
    measured = latency_parts.in_order(lines)
    assert len(measured) >= JOBS // 2
    assert all(all(a <= b for a, b in itertools.pairwise(row)) for row in measured)
    figures = latency_parts.medians(measured, steps)
    assert figures["total"] > 0 and len(figures) == len(steps) + 1


@pytest.mark.slow
def test_an_idle_workers_wake_claim_and_start_are_timed(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    probe = tmp_path / "probe"
    probe.mkdir()
    lines = latency_parts.run_worker(redis_server.url, probe, tmp_path, JOBS, 0.01)
    check(lines, WORKER_STEPS)


@pytest.mark.slow
def test_the_gateways_road_to_its_enqueue_is_timed(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    probe = tmp_path / "probe"
    probe.mkdir()
    (tmp_path / "metrics").mkdir()
    lines = latency_parts.run_gateway(redis_server.url, probe, tmp_path, JOBS, 0.01)
    check(lines, GATEWAY_STEPS)
