"""Counters the scheduler keeps carry the job's type, read from the scripts' replies."""

from __future__ import annotations

import os
import time

import pytest
import redis
from prometheus_client import REGISTRY

from shared import metrics
from shared.jobs import validate_enqueue
from shared.scripts import Scripts
from workerd.scheduler import SchedulerProcess


class _Slot:
    def beat(self) -> None:
        pass


def _value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_recovered_jobs_are_counted_under_their_own_type(r: redis.Redis) -> None:
    scripts = Scripts(r)
    scheduler = SchedulerProcess(scripts, _Slot(), os.getppid(), reconnect_grace=0)
    job_type = "lost_kind"
    scripts.enqueue(validate_enqueue({"type": job_type}), "00000000-0000-4000-8000-000000000001")
    assert scripts.claim("a-worker-that-dies") is not None
    before = _value("taskforge_jobs_recovered_total", type=job_type)
    lease_over = int(time.time() * 1000) + scripts.policy.lease_ms + 1000

    scheduler.step(time.monotonic(), now_ms=lease_over)

    assert _value("taskforge_jobs_recovered_total", type=job_type) == before + 1
    assert _value("taskforge_jobs_recovered_total", type=metrics.OTHER_TYPE) == 0


def test_type_labels_are_capped_and_a_missing_type_counts_as_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metrics, "_seen_types", set())  # leave other tests' labels alone
    for index in range(metrics.TYPE_LABEL_CAP + 5):
        metrics.type_label(f"cap_test_{index}")
    assert metrics.type_label("one_too_many_for_the_cap") == metrics.OTHER_TYPE
    before = _value("taskforge_jobs_timed_out_total", type=metrics.OTHER_TYPE)
    metrics.count("timed_out", None)
    assert _value("taskforge_jobs_timed_out_total", type=metrics.OTHER_TYPE) == before + 1
