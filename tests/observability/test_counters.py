"""Counters the scheduler keeps carry the job's type and queue; both labels are capped."""

from __future__ import annotations

import os
import time

import pytest
import redis
from prometheus_client import REGISTRY

from shared.engine.scripts import Scripts
from shared.model.jobs import validate_enqueue
from shared.model.queues import is_queue_name
from shared.obs import metrics
from tests.fakes import IdleSlot
from workerd.scheduler import SchedulerProcess


def _value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_recovered_jobs_are_counted_under_their_own_type(r: redis.Redis) -> None:
    scripts = Scripts(r)
    scheduler = SchedulerProcess(scripts, IdleSlot(), os.getppid(), reconnect_grace=0)
    job_type = "lost_kind"
    scripts.enqueue(validate_enqueue({"type": job_type}), "00000000-0000-4000-8000-000000000001")
    assert scripts.claim("a-worker-that-dies") is not None
    labels = {"type": job_type, "queue": "default"}
    before = _value("taskforge_jobs_recovered_total", **labels)
    lease_over = int(time.time() * 1000) + scripts.policy.lease_ms + 1000

    scheduler.step(time.monotonic(), now_ms=lease_over)

    assert _value("taskforge_jobs_recovered_total", **labels) == before + 1
    other = {"type": metrics.OTHER_TYPE, "queue": "default"}
    assert _value("taskforge_jobs_recovered_total", **other) == 0


def test_type_labels_are_capped_and_a_missing_type_counts_as_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metrics, "_seen_types", set())  # leave other tests' labels alone
    for index in range(metrics.TYPE_LABEL_CAP + 5):
        metrics.type_label(f"cap_test_{index}")
    assert metrics.type_label("one_too_many_for_the_cap") == metrics.OTHER_TYPE
    labels = {"type": metrics.OTHER_TYPE, "queue": "default"}
    before = _value("taskforge_jobs_timed_out_total", **labels)
    metrics.count("timed_out", None, "default")
    assert _value("taskforge_jobs_timed_out_total", **labels) == before + 1


def test_queue_labels_are_capped_under_a_label_no_queue_can_have(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metrics, "_seen_queues", set())
    for index in range(metrics.QUEUE_LABEL_CAP):
        assert metrics.queue_label(f"q{index}") == f"q{index}"
    assert metrics.queue_label("one_too_many") == metrics.OTHER_QUEUE
    assert metrics.queue_label("q0") == "q0"  # one seen before the cap keeps its own
    assert not is_queue_name(metrics.OTHER_QUEUE)  # never a real queue's series
    labels = {"type": "capped_kind", "queue": metrics.OTHER_QUEUE}
    before = _value("taskforge_jobs_enqueued_total", **labels)
    metrics.count("enqueued", "capped_kind", "one_too_many", 2)
    assert _value("taskforge_jobs_enqueued_total", **labels) == before + 2


def test_labelled_children_are_made_once_and_bounded_by_the_label_caps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metrics, "_seen_types", set())
    monkeypatch.setattr(metrics, "_seen_queues", set())
    monkeypatch.setattr(metrics, "_children", {})
    for index in range(metrics.TYPE_LABEL_CAP * 3):
        for queue in ("default", "q1"):
            metrics.count("purged", f"bounded_{index}", queue)
    # One child per (guarded type, queue): the cap's types, then "other", in each queue.
    assert len(metrics._children) == (metrics.TYPE_LABEL_CAP + 1) * 2
    other = {"type": metrics.OTHER_TYPE, "queue": "q1"}
    assert _value("taskforge_jobs_purged_total", **other) >= metrics.TYPE_LABEL_CAP * 2
