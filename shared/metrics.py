"""Prometheus metrics: names, the multiprocess set-up, and the Redis-reading state gauges.

Naming: every metric starts with ``taskforge_``, units are in the name (``_seconds``), and
lifecycle counters are ``taskforge_jobs_<event>_total`` labelled by job type.

Multiprocess mode (gunicorn workers, workerd children): prometheus_client picks its value
storage when it is first imported, so ``PROMETHEUS_MULTIPROC_DIR`` must be set before that —
entry points call :func:`shared.multiproc.prepare_multiprocess_dir` before importing this
module or anything that imports it. Each scrape builds a fresh registry.

Fleet-wide gauges (jobs per state, oldest pending age, live/busy workers and hosts) are read
from Redis at scrape time by every process that serves ``/metrics`` — each gateway and each
workerd host reports the same fleet-wide figure, so aggregate them with ``max``, never ``sum``.
Counters and histograms are per process (summed across a server's children by the
multiprocess collector): aggregate those with ``sum``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from shared.jobs import JobState
from shared.multiproc import MULTIPROC_ENV
from shared.queries import QueueCounts, WorkerCounts

# A client chooses job types; past this many distinct types per process, the rest count as
# "other" so a client cannot explode the number of time series.
TYPE_LABEL_CAP = 50
OTHER_TYPE = "other"

LIFECYCLE_EVENTS = (
    "enqueued",
    "claimed",
    "completed",
    "failed",
    "retried",
    "dead",
    "replayed",
    "recovered",
    "released",
    "canceled",
    "timed_out",
    "purged",
    "stale_acks",
)

LIFECYCLE: dict[str, Counter] = {
    event: Counter(
        f"taskforge_jobs_{event}_total", f"Jobs {event.replace('_', ' ')}, by type.", ["type"]
    )
    for event in LIFECYCLE_EVENTS
}
HANDLER_SECONDS = Histogram(
    "taskforge_handler_duration_seconds", "Time a handler ran, by type.", ["type"]
)
QUEUE_WAIT_SECONDS = Histogram(
    "taskforge_queue_wait_seconds", "Time from claimable to claimed, by type.", ["type"]
)
SCHEDULE_LATENESS_SECONDS = Histogram(
    "taskforge_schedule_lateness_seconds",
    "Time from a scheduled or retrying job's due time to its promotion.",
    ["kind"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
ENQUEUE_SECONDS = Histogram(
    "taskforge_enqueue_request_duration_seconds", "Time to answer an enqueue request."
)
ACTIVE_WORKERS = Gauge(
    "taskforge_active_workers",
    "Live worker processes of this supervisor.",
    multiprocess_mode="livesum",
)
BUSY_WORKERS = Gauge(
    "taskforge_busy_workers",
    "Worker processes of this supervisor running a job.",
    multiprocess_mode="livesum",
)

PROCESS_METRICS = (
    *LIFECYCLE.values(),
    HANDLER_SECONDS,
    QUEUE_WAIT_SECONDS,
    SCHEDULE_LATENESS_SECONDS,
    ENQUEUE_SECONDS,
    ACTIVE_WORKERS,
    BUSY_WORKERS,
)

_seen_types: set[str] = set()


def type_label(job_type: str) -> str:
    """Return the label for a job type, or "other" once this process has seen too many."""
    if job_type in _seen_types:
        return job_type
    if len(_seen_types) >= TYPE_LABEL_CAP:
        return OTHER_TYPE
    _seen_types.add(job_type)
    return job_type


def count(event: str, job_type: str | None, amount: int = 1) -> None:
    """Increment one lifecycle counter (an unknown type counts under "other")."""
    LIFECYCLE[event].labels(type=type_label(job_type or OTHER_TYPE)).inc(amount)


def observe_queue_wait(
    job_type: str, eligible_at_ms: int | None, started_at_ms: int | None
) -> None:
    """Record eligible → claimed from the claimed job's own fields (no Redis call)."""
    if eligible_at_ms is None or started_at_ms is None:
        return
    wait = max(0, started_at_ms - eligible_at_ms) / 1000
    QUEUE_WAIT_SECONDS.labels(type=type_label(job_type)).observe(wait)


def multiprocess_enabled() -> bool:
    """Tell whether this process writes its metrics to a multiprocess directory."""
    return bool(os.environ.get(MULTIPROC_ENV))


def mark_dead(pid: int) -> None:
    """Forget a dead child's live gauges (its counters stay, summed into the totals)."""
    # Its counter and histogram files stay, so scrape time grows with every process that lived
    # since the server started (the directory is wiped then; docs/MEASUREMENTS.md).
    if multiprocess_enabled():
        mark_process_dead(pid)


class QueueStateCollector:
    """Exports counts per state read from Redis at scrape time (fleet-wide: aggregate by max)."""

    def __init__(self, counts: QueueCounts, workers: WorkerCounts | None = None) -> None:
        self.counts = counts
        self.workers = workers

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Yield the per-state gauge and the oldest pending age."""
        jobs = GaugeMetricFamily(
            "taskforge_jobs",
            "Jobs in each state, read from Redis at scrape time.",
            labels=["state"],
        )
        for state in JobState:
            jobs.add_metric([str(state)], self.counts.by_state[state])
        yield jobs
        age = self.counts.oldest_pending_age_ms
        yield GaugeMetricFamily(
            "taskforge_oldest_pending_age_seconds",
            "Age of the longest-waiting claimable job (0 when none).",
            value=0 if age is None else age / 1000,
        )
        if self.counts.by_queue:
            paused = GaugeMetricFamily(
                "taskforge_queue_paused",
                "1 while a queue is paused (no worker claims from it), else 0.",
                labels=["queue"],
            )
            for queue, counts in sorted(self.counts.by_queue.items()):
                paused.add_metric([queue], 1 if counts.paused else 0)
            yield paused
        if self.workers is not None:
            for name, value, text in (
                ("hosts", self.workers.hosts, "workerd hosts in the registry"),
                ("live", self.workers.live, "Live worker processes"),
                ("busy", self.workers.busy, "Worker processes running a job"),
                ("quiet", self.workers.quiet, "Quiet workerd hosts (claiming nothing)"),
            ):
                yield GaugeMetricFamily(
                    f"taskforge_fleet_workers_{name}",
                    f"{text}, fleet-wide, read from Redis at scrape time.",
                    value=value,
                )


def render(counts: QueueCounts, workers: WorkerCounts | None = None) -> tuple[bytes, str]:
    """Return the exposition text and its content type for counts the caller read just now.

    Callers read both with ``Scripts.stats()`` (one round trip); a Redis error there is their
    503.
    """
    registry = CollectorRegistry()
    if multiprocess_enabled():
        MultiProcessCollector(registry)
    else:
        for collector in PROCESS_METRICS:
            registry.register(collector)
    registry.register(QueueStateCollector(counts, workers))
    return generate_latest(registry), CONTENT_TYPE_LATEST
