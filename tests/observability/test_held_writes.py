"""A worker's held per-job metric writes (shared.obs.held_writes) give the samples direct writes
give, reach the files without a flush call, and a stopping worker writes them first."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

from shared.engine.scripts import Scripts
from shared.model.jobs import validate_enqueue
from shared.obs import metrics
from shared.obs.held_writes import HeldWrites
from shared.settings.config import Settings
from tests.fakes import IdleSlot
from tests.support.tools import ROOT, wait_until
from workerd import JobContext, handler
from workerd.worker import WorkerProcess

CRASHING = "test.held_writes_crash"


@handler(CRASHING)
def _noop(payload: dict[str, Any], job: JobContext) -> None:
    pass


# Bounds, between them, under the first and above the last (+Inf), zero and the odd negative.
VALUES = (0.0, 0.005, 0.0051, 0.1, 0.25, 0.3, 7.5, 10.0, 11.0, 1e6, -0.5, 0.001)


def _pair() -> tuple[tuple[Counter, Histogram], tuple[Counter, Histogram]]:
    made = []
    for name in ("direct", "held"):
        registry = CollectorRegistry()
        made.append(
            (
                Counter(f"{name}_total", "c", ["type", "queue"], registry=registry),
                Histogram(f"{name}_seconds", "h", ["type", "queue"], registry=registry),
            )
        )
    return made[0], made[1]


def _samples(metric: Counter | Histogram) -> list[tuple[str, list, float]]:
    return sorted(
        (sample.name.split("_", 1)[1], sorted(sample.labels.items()), sample.value)
        for family in metric.collect()
        for sample in family.samples
        if not sample.name.endswith("_created")
    )


def test_held_counts_and_observations_flush_to_the_samples_direct_writes_give() -> None:
    (counter, histogram), (held_counter, held_histogram) = _pair()
    held = HeldWrites(interval=3600)  # no flusher flush within the test: only ours
    for n, value in enumerate(VALUES):
        labels = ("t", "q") if n % 3 else ("u", "q")
        counter.labels(*labels).inc(n + 1)
        histogram.labels(*labels).observe(value)
        held.inc(held_counter.labels(*labels), n + 1)
        held.observe(held_histogram.labels(*labels), value)
    assert all(sample[2] == 0 for sample in _samples(held_counter))  # nothing written yet
    held.flush()
    assert _samples(held_counter) == _samples(counter)
    assert _samples(held_histogram) == _samples(histogram)
    held.flush()  # nothing held: nothing added twice
    assert _samples(held_histogram) == _samples(histogram)


def test_a_nan_observation_is_counted_in_no_bucket_as_observe_counts_it() -> None:
    # prometheus_client's observe() adds NaN to the sum and to no bucket (NaN <= bound is
    # false for every bound, +Inf's too); bisect would put it in the first bucket.
    (_, histogram), (_, held_histogram) = _pair()
    held = HeldWrites(interval=3600)
    for value in (0.3, float("nan"), float("inf")):
        histogram.labels("t", "q").observe(value)
        held.observe(held_histogram.labels("t", "q"), value)
    held.flush()
    direct, written = _samples(histogram), _samples(held_histogram)
    assert [s for s in written if s[0] != "seconds_sum"] == [
        s for s in direct if s[0] != "seconds_sum"
    ]
    assert math.isnan(held_histogram.labels("t", "q")._sum.get())


def test_the_flusher_writes_what_is_held_within_its_interval_and_again_later() -> None:
    (_, _), (counter, histogram) = _pair()
    held = HeldWrites(interval=0.05)
    held.inc(counter.labels("t", "q"), 2)
    wait_until(lambda: counter.labels("t", "q")._value.get() == 2, 5, "the first flush")
    held.observe(histogram.labels("t", "q"), 0.3)  # after a flush: the flusher wakes again
    held.inc(counter.labels("t", "q"))
    wait_until(lambda: counter.labels("t", "q")._value.get() == 3, 5, "the second flush")
    assert histogram.labels("t", "q")._sum.get() == 0.3
    assert not held._held.is_set()  # nothing held: the flusher waits, no timed wake-ups


def test_in_a_multiprocess_directory_held_writes_match_direct_ones(tmp_path: Path) -> None:
    """The files workerd's and the gateway's /metrics read: the same totals and buckets from a
    process that held its writes (flushed as a stopping worker does) as from one that did not."""
    merged = {}
    for mode in ("direct", "held"):
        directory = tmp_path / mode
        directory.mkdir()
        script = textwrap.dedent(
            f"""
            import json, os
            from prometheus_client import CollectorRegistry
            from prometheus_client.multiprocess import MultiProcessCollector
            from shared.obs import metrics
            if {mode == "held"!r}:
                metrics.hold_job_writes()
            for n, value in enumerate({VALUES!r}):
                metrics.count("completed", "t", "q")
                metrics.count_running_cancel("handler", "q")
                metrics.observe_handler("t", "q", abs(value))
                metrics.observe_queue_wait("t", "q", 1000, 1000 + int(abs(value) * 1000))
            metrics.flush_job_writes()
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=os.environ["PROMETHEUS_MULTIPROC_DIR"])
            print(json.dumps(sorted(
                [s.name, sorted(s.labels.items()), s.value]
                for family in registry.collect() for s in family.samples
            )))
            """
        )
        run = subprocess.run(
            [sys.executable, "-c", script],
            cwd=ROOT,
            env={"PROMETHEUS_MULTIPROC_DIR": str(directory), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert run.returncode == 0, run.stderr
        merged[mode] = json.loads(run.stdout)
    assert merged["held"] == merged["direct"]
    names = {sample[0] for sample in merged["held"]}
    assert {"taskforge_jobs_completed_total", "taskforge_handler_duration_seconds_bucket"} <= names


def test_a_worker_that_crashes_writes_what_it_held_first(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug that ends a worker's run (child_crashed, then os._exit) is no SIGKILL: the counts
    it held, its last jobs' completions among them, are written as a clean stop's are."""
    monkeypatch.setattr(metrics, "_held", HeldWrites(interval=3600))  # only a flush writes
    monkeypatch.setattr(metrics, "_seen_types", set())  # other tests' types: not "other" here
    scripts = Scripts(r)
    scripts.load()
    scripts.enqueue(validate_enqueue({"type": CRASHING, "payload": {}}), str(uuid.uuid4()))
    worker = WorkerProcess(Settings.from_env({}), scripts, IdleSlot(), "w-held", os.getppid())
    labels = {"type": CRASHING, "queue": "default"}
    before = REGISTRY.get_sample_value("taskforge_jobs_completed_total", labels) or 0.0
    real_step, steps = worker.step, []

    def step_until_the_job_ran_then_raise() -> None:
        steps.append(1)
        assert len(steps) < 50, "the job never ran"
        if worker.jobs_done:
            raise RuntimeError("a bug")
        real_step()

    monkeypatch.setattr(worker, "step", step_until_the_job_ran_then_raise)
    with pytest.raises(RuntimeError, match="a bug"):
        worker.run()
    after = REGISTRY.get_sample_value("taskforge_jobs_completed_total", labels) or 0.0
    assert after - before == 1


def test_a_worker_going_idle_writes_what_it_held_without_waiting_for_the_flusher(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last jobs of a burst reach /metrics when their worker finds no more work, not an
    interval later (the flusher here would wait an hour), while the worker runs on."""
    monkeypatch.setattr(metrics, "_held", HeldWrites(interval=3600))  # only a flush writes
    monkeypatch.setattr(metrics, "_seen_types", set())
    scripts = Scripts(r)
    scripts.load()
    scripts.enqueue(validate_enqueue({"type": CRASHING, "payload": {}}), str(uuid.uuid4()))
    worker = WorkerProcess(Settings.from_env({}), scripts, IdleSlot(), "w-idle", os.getppid())
    labels = {"type": CRASHING, "queue": "default"}
    before = REGISTRY.get_sample_value("taskforge_jobs_completed_total", labels) or 0.0
    for _ in range(50):
        if worker.jobs_done:
            break
        worker.step()
    assert worker.jobs_done == 1
    assert (REGISTRY.get_sample_value("taskforge_jobs_completed_total", labels) or 0.0) == before
    worker.step()  # nothing left: the worker waits for work, and writes first
    after = REGISTRY.get_sample_value("taskforge_jobs_completed_total", labels) or 0.0
    assert after - before == 1


def test_a_flusher_thread_that_cannot_start_fails_no_write_and_is_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (_, _), (counter, _) = _pair()
    held = HeldWrites(interval=0.05)
    monkeypatch.setattr(threading.Thread, "start", _cannot_start)
    held.inc(counter.labels("t", "q"))  # no exception into the job's path
    assert held._flusher is None
    held.flush()  # what a worker does before an idle wait
    assert counter.labels("t", "q")._value.get() == 1
    monkeypatch.undo()
    held.inc(counter.labels("t", "q"))  # a later wake starts it
    wait_until(lambda: counter.labels("t", "q")._value.get() == 2, 5, "the flusher's write")


def _cannot_start(self: threading.Thread) -> None:
    raise RuntimeError("can't start new thread")
