"""5,000 idle connections and 1,000 slowloris clients against the real gateway under
gunicorn, while enqueues run at a fixed 200 a second (bench/abuse_connections.py does the work).

`.venv/bin/python -m pytest -s tests/gateway/test_connection_abuse.py` prints the figures.
"""

from __future__ import annotations

import json
import resource
from dataclasses import asdict
from functools import partial
from pathlib import Path

import pytest

from bench.abuse_connections import (
    NEEDED_FILES,
    AbuseReport,
    abuse,
    open_files,
    raise_files_limit,
)
from gateway.app import POOL_SIZE
from tests.support.gunicorn import run_gunicorn
from tests.support.redis_server import RedisServer
from tests.support.tools import wait_until

IDLE = 5000
TRICKLE = 1000
SECONDS = 60.0  # of attack
WORKERS = 2  # tests.support.gunicorn's WEB_CONCURRENCY
RATE = 200.0  # enqueues a second, before, during and after the attack
BASELINE = 30.0  # seconds of unloaded enqueues before the attack, and again after it: as
# many samples as the attack's, and as exposed to a neighbour's burst on a shared machine
# Milliseconds the enqueue p99 under the attack may exceed the unloaded one by, however small
# that is (below): a timing bound, not a guarantee; every enqueue must still succeed.
LATENCY_SLACK_MS = 10.0
# Runs of the whole measurement at most, the latency bound deciding whether another is made:
# on this shared VM a neighbour's stall can land in the attack's 60 s (docs/RELIABILITY.md,
# "Connection floods and slowloris", has the CI run that showed it). A stall of the attack's
# own comes in every run, so it still fails the test; a neighbour's seldom twice.
ATTEMPTS = 2
SETTLE = 15.0  # seconds for the workers to close what the attacker left
# Beyond its descriptors before the attack, a worker may keep its full Redis pool and a few
# keep-alive or log descriptors: nothing that grows with the connections it was sent.
FDS_AFTER_MARGIN = POOL_SIZE + 16


@pytest.mark.slow
@pytest.mark.serial
def test_idle_and_slowloris_floods_leave_enqueues_and_health_unharmed(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    try:
        raise_files_limit(NEEDED_FILES)  # gunicorn and the attacker inherit it
    except RuntimeError as exc:
        pytest.fail(str(exc))  # never a skip: the figures need these descriptors
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= NEEDED_FILES
    # No recycling (max_requests): the run sends ~24,000 requests, and the kernel may hand most
    # of them to one worker, which gunicorn would then replace mid-run, as it did in a CI run;
    # this test checks that no worker dies or is replaced by the attack.
    with run_gunicorn(redis_server.url, tmp_path, "--max-requests", "0") as gw:
        first: AbuseReport | None = None
        for _ in range(ATTEMPTS):
            report = abuse(gw, tmp_path, IDLE, TRICKLE, SECONDS, RATE, BASELINE, WORKERS)
            print(json.dumps(asdict(report), indent=2))
            first = first or report
            assert wait_until(
                partial(back_to_their_descriptors, first),
                SETTLE,
                "the workers to close the attacker's connections",
                interval=0.2,
            )
            assert gw.request("GET", "/health", timeout=3)[0] == 200  # as `curl -m3 /health`
            # None died or was replaced.
            assert sorted(gw.worker_pids()) == sorted(first.worker_pids)
            # The attack reached the workers, and they closed what never sent a complete head.
            assert sum(report.worker_fds_peak) >= (IDLE + TRICKLE) // 2
            assert report.attack.opened >= IDLE + TRICKLE
            assert report.attack.closed_by_gateway >= IDLE + TRICKLE
            assert report.enqueue_failures == 0
            assert report.enqueues == int(RATE * SECONDS)
            assert (report.probe_failures, report.probes) == (0, int(SECONDS * 2))
            if report.loaded_p99_ms <= latency_bound(report):
                break
    assert report.loaded_p99_ms <= latency_bound(report), report


def latency_bound(report: AbuseReport) -> float:
    """Return the enqueue p99 (ms) the attack may cause, given the unloaded one.

    Within 2x of the unloaded p99, or LATENCY_SLACK_MS above it where that is more: on a
    quiet host the unloaded p99 is ~4 ms, and 2x of that is one scheduler hiccup (a CI run:
    8.9 ms under the attack against 4.1 unloaded, every enqueue answered 201)."""
    return max(2 * report.unloaded_p99_ms, report.unloaded_p99_ms + LATENCY_SLACK_MS)


def back_to_their_descriptors(before: AbuseReport) -> bool:
    """Tell whether each worker holds no more descriptors than before the first attack, but
    for FDS_AFTER_MARGIN."""
    return all(
        open_files(pid) <= fds + FDS_AFTER_MARGIN
        for pid, fds in zip(before.worker_pids, before.worker_fds_before, strict=True)
    )
