"""Prometheus metrics: names, the multiprocess set-up, and the Redis-reading state gauges.

Naming: every metric starts with ``taskforge_``, units are in the name (``_seconds``), and
lifecycle counters are ``taskforge_jobs_<event>_total`` labelled by job type and queue.

Multiprocess mode (gunicorn workers, workerd children): prometheus_client picks its value
storage when it is first imported, so ``PROMETHEUS_MULTIPROC_DIR`` must be set before that —
entry points call :func:`shared.multiproc.prepare_multiprocess_dir` before importing this
module or anything that imports it. Each scrape builds a fresh registry.

Fleet-wide gauges (jobs per state and queue, oldest pending age per queue, live/busy workers
and hosts) are read from Redis at scrape time by every process that serves ``/metrics`` — each
gateway and each workerd host reports the same fleet-wide figure, so aggregate them across
processes with ``max``, never ``sum`` (then across queues with ``sum``: the totals of all
queues). Counters and histograms are per process (summed across a server's children by the
multiprocess collector): aggregate those with ``sum``.
"""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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

from shared import summary
from shared.hosts import list_hosts
from shared.jobs import JobState
from shared.limits import LimitsState, read_state
from shared.multiproc import MULTIPROC_ENV
from shared.queries import QueueCounts, WorkerCounts
from shared.queue_view import listed_count
from shared.queues import DEFAULT_QUEUE

if TYPE_CHECKING:
    from shared.scripts import Scripts

# A client chooses job types; past this many distinct types per process, the rest count as
# "other" so a client cannot explode the number of time series.
TYPE_LABEL_CAP = 50
OTHER_TYPE = "other"
# A client names queues too (an enqueue registers its queue): the same guard. The overflow
# label is no queue name (the name rule has no parentheses), so no real queue is mixed into it.
QUEUE_LABEL_CAP = 50
OTHER_QUEUE = "(other)"

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
    "cancel_requested",
    "timed_out",
    "purged",
    "stale_acks",
)

LIFECYCLE: dict[str, Counter] = {
    event: Counter(
        f"taskforge_jobs_{event}_total",
        f"Jobs {event.replace('_', ' ')}, by type and queue.",
        ["type", "queue"],
    )
    for event in LIFECYCLE_EVENTS
}
# Periodic schedules (docs/SCHEDULES.md): counted by the scheduler that made the job, or that
# moved the schedule past the dropped ticks, so a fleet's sum counts each tick once. Schedule
# names come from the operator's file, not from clients: no label cap.
SCHEDULE_JOBS = Counter(
    "taskforge_schedule_jobs_total", "Jobs enqueued by a periodic schedule.", ["schedule"]
)
SCHEDULE_MISSED = Counter(
    "taskforge_schedule_missed_total",
    "Ticks of a periodic schedule that got no job of their own (an outage: skip or catch_up).",
    ["schedule"],
)
HANDLER_SECONDS = Histogram(
    "taskforge_handler_duration_seconds",
    "Time a handler ran, by type and queue.",
    ["type", "queue"],
)
QUEUE_WAIT_SECONDS = Histogram(
    "taskforge_queue_wait_seconds",
    "Time from claimable to claimed, by type and queue.",
    ["type", "queue"],
)
SCHEDULE_LATENESS_SECONDS = Histogram(
    "taskforge_schedule_lateness_seconds",
    "Time from a scheduled or retrying job's due time to its promotion, by queue.",
    ["kind", "queue"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
# How each cancel of a running job ended. stopped: handler (it stopped by itself, or
# raised, after the request), sigterm (interrupted), sigkill (killed after WORKER_CANCEL_GRACE),
# failed (it failed before its worker learned of the request), timeout, lost (its worker died,
# or its host: recovered), completed (it completed first).
RUNNING_CANCELS = Counter(
    "taskforge_running_cancels_total",
    "Cancels of running jobs, by how each ended (stopped) and queue.",
    ["stopped", "queue"],
)
RUNNING_CANCEL_ENDS = ("handler", "sigterm", "sigkill", "failed", "timeout", "lost", "completed")
# Durable mode (shared.durable): writes WAIT did not confirm on TASKFORGE_WAIT_REPLICAS replicas
# within TASKFORGE_WAIT_TIMEOUT. op: enqueue, enqueue_batch, complete, fail, cancel_running.
WAIT_TIMEOUTS = Counter(
    "taskforge_wait_replicas_timeouts_total",
    "Writes not confirmed by WAIT on the configured replicas in time (durable mode), by op.",
    ["op"],
)
# Per request, not per job: a batch can span queues.
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
# A gauge, not a log line per wait: clients loop on GET /jobs/<id>?wait=, so lines would flood.
JOB_WAITS = Gauge(
    "taskforge_gateway_job_waits",
    "GET /jobs/<id>?wait= requests of this gateway waiting for their job now.",
    multiprocess_mode="livesum",
)

PROCESS_METRICS = (
    *LIFECYCLE.values(),
    RUNNING_CANCELS,
    HANDLER_SECONDS,
    QUEUE_WAIT_SECONDS,
    SCHEDULE_LATENESS_SECONDS,
    ENQUEUE_SECONDS,
    ACTIVE_WORKERS,
    BUSY_WORKERS,
    JOB_WAITS,
)

_seen_types: set[str] = set()
_seen_queues: set[str] = set()
# (metric, first label, queue label) -> the labelled child. prometheus_client's labels()
# validates and looks up its arguments each call (about 3 µs, five times per job); the keys
# are guarded labels, so this holds at most (types + 1) x (queues + 1) per metric. A child is
# fork-safe: its multiprocess value reopens its file when the pid changes.
_children: dict[tuple[Counter | Histogram, str, str], Any] = {}


def type_label(job_type: str) -> str:
    """Return the label for a job type, or "other" once this process has seen too many."""
    if job_type in _seen_types:
        return job_type
    if len(_seen_types) >= TYPE_LABEL_CAP:
        return OTHER_TYPE
    _seen_types.add(job_type)
    return job_type


def queue_label(queue: str) -> str:
    """Return the label for a queue, or "(other)" once this process has seen too many."""
    if queue in _seen_queues:
        return queue
    if len(_seen_queues) >= QUEUE_LABEL_CAP:
        return OTHER_QUEUE
    _seen_queues.add(queue)
    return queue


def _labelled(metric: Counter | Histogram, first: str, queue: str) -> Any:
    """Return the child of a metric labelled (first, queue), made once per process."""
    key = (metric, first, queue)
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(first, queue)
    return child


def count(event: str, job_type: str | None, queue: str, amount: int = 1) -> None:
    """Increment one lifecycle counter (an unknown type counts under "other")."""
    type_ = type_label(job_type or OTHER_TYPE)
    _labelled(LIFECYCLE[event], type_, queue_label(queue)).inc(amount)


def count_running_cancel(stopped: str, queue: str) -> None:
    """Count how a cancel of a running job ended (one of RUNNING_CANCEL_ENDS)."""
    _labelled(RUNNING_CANCELS, stopped, queue_label(queue)).inc()


def observe_queue_wait(
    job_type: str, queue: str, eligible_at_ms: int | None, started_at_ms: int | None
) -> None:
    """Record eligible → claimed from the claimed job's own fields (no Redis call)."""
    if eligible_at_ms is None or started_at_ms is None:
        return
    wait = max(0, started_at_ms - eligible_at_ms) / 1000
    _labelled(QUEUE_WAIT_SECONDS, type_label(job_type), queue_label(queue)).observe(wait)


def observe_handler(job_type: str, queue: str, seconds: float) -> None:
    """Record how long a handler ran."""
    _labelled(HANDLER_SECONDS, type_label(job_type), queue_label(queue)).observe(seconds)


def observe_lateness(kind: str, queue: str, late_ms: int) -> None:
    """Record how late a scheduled job or a retry was promoted ("scheduled" or "retry")."""
    _labelled(SCHEDULE_LATENESS_SECONDS, kind, queue_label(queue)).observe(late_ms / 1000)


def multiprocess_enabled() -> bool:
    """Tell whether this process writes its metrics to a multiprocess directory."""
    return bool(os.environ.get(MULTIPROC_ENV))


def mark_dead(pid: int) -> None:
    """Forget a dead child's live gauges (its counters stay, summed into the totals)."""
    # Its counter and histogram files stay, so scrape time grows with every process that lived
    # since the server started (the directory is wiped then; bench/MEASUREMENTS.md).
    if multiprocess_enabled():
        mark_process_dead(pid)


class QueueStateCollector:
    """Exports counts per state and queue read from Redis at scrape time (fleet-wide: max)."""

    def __init__(
        self,
        counts: QueueCounts,
        workers: WorkerCounts | None = None,
        limits: Sequence[LimitsState] = (),
    ) -> None:
        self.counts = counts
        self.workers = workers
        self.limits = limits

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Yield the per-state gauge and the oldest pending age, each per queue."""
        jobs = GaugeMetricFamily(
            "taskforge_jobs",
            "Jobs in each state and queue, read from Redis at scrape time.",
            labels=["state", "queue"],
        )
        age = GaugeMetricFamily(
            "taskforge_oldest_pending_age_seconds",
            "Age of the queue's longest-waiting claimable job (0 when none).",
            labels=["queue"],
        )
        for queue, counts in labelled_queues(self.counts).items():
            for state in JobState:
                jobs.add_metric([str(state), queue], counts.by_state[state])
            oldest = counts.oldest_pending_age_ms
            age.add_metric([queue], 0 if oldest is None else oldest / 1000)
        yield jobs
        yield age
        if self.counts.by_queue:
            paused = GaugeMetricFamily(
                "taskforge_queue_paused",
                "1 while a queue is paused (no worker claims from it), else 0.",
                labels=["queue"],
            )
            for queue, counts in sorted(self.counts.by_queue.items()):
                paused.add_metric([queue], 1 if counts.paused else 0)
            yield paused
        if self.limits:
            yield from limit_gauges(self.limits)
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


# The scope label of a queue's own limits; a type's scope is the type's name. Limits are
# declared by an operator, so their labels are as many as the limits (no cap needed).
QUEUE_SCOPE = "(queue)"


def limit_gauges(states: Sequence[LimitsState]) -> Iterator[GaugeMetricFamily]:
    """Yield each limited scope's limit, running jobs and held jobs (docs/QUEUES.md, Limits)."""
    labels = ["queue", "scope"]
    running = GaugeMetricFamily(
        "taskforge_limit_running", "Jobs running in a limited scope's slots.", labels=labels
    )
    held = GaugeMetricFamily(
        "taskforge_limit_held",
        "Pending jobs a scope's limits hold back (also counted as pending).",
        labels=labels,
    )
    concurrency = GaugeMetricFamily(
        "taskforge_limit_concurrency",
        "A scope's concurrency limit (absent: none); running / this is its saturation.",
        labels=labels,
    )
    for state in states:
        scopes = [(QUEUE_SCOPE, state.limits.queue, state.use)]
        scopes += [
            (name, state.limits.types[name], use) for name, use in sorted(state.type_use.items())
        ]
        for scope, limit, use in scopes:
            running.add_metric([state.queue, scope], use.running)
            held.add_metric([state.queue, scope], use.held)
            if limit.concurrency is not None:
                concurrency.add_metric([state.queue, scope], limit.concurrency)
    yield running
    yield held
    yield concurrency


def labelled_queues(counts: QueueCounts) -> dict[str, QueueCounts]:
    """Return the counts per queue label: queues past the label cap added up under "(other)"."""
    by_queue = counts.by_queue or {DEFAULT_QUEUE: counts}
    grouped: dict[str, dict[str, QueueCounts]] = {}
    for queue in sorted(by_queue):
        grouped.setdefault(queue_label(queue), {})[queue] = by_queue[queue]
    return {
        label: members[label] if label in members else QueueCounts.combined(members)
        for label, members in grouped.items()
    }


class SettledFilesCollector(MultiProcessCollector):
    """MultiProcessCollector without the files a process is still creating.

    prometheus_client creates a process's file, then sizes it: a scrape in between read an
    empty file and failed (struct.error), so /metrics answered 500 while a worker was being
    replaced. A file holds no value until it is sized: leaving it out loses nothing.
    """

    def collect(self) -> Iterable[Any]:
        files = []
        for path in glob.glob(os.path.join(self._path, "*.db")):
            with contextlib.suppress(FileNotFoundError):  # a dead process's gauge file, gone
                if os.path.getsize(path) > 0:
                    files.append(path)
        return self.merge(files, accumulate=True)


def scrape(
    scripts: Scripts, *, run: Callable[[Callable[[], object]], None] = summary.in_place
) -> tuple[bytes, str]:
    """Read what /metrics shows from Redis (counts, then the limits of the queues read) and
    render it.

    Per-queue gauges: every queue while at most QUEUE_LABEL_CAP are listed; past that only the
    queues live hosts serve (their WORKER_QUEUES: bounded by configuration, not by the names
    clients make), and the totals of all queues from the last sweep (shared.summary; `run`
    runs a due sweep: in place by default, the gateway passes a thread).
    """
    listed = listed_count(scripts)
    if listed <= QUEUE_LABEL_CAP:
        counts, workers = scripts.stats()
        totals, age_ms = counts, 0
    else:
        served = dict.fromkeys(q for h in list_hosts(scripts.redis, scripts.keys) for q in h.queues)
        counts, workers = scripts.stats(list(served)[:QUEUE_LABEL_CAP])
        found = summary.current(scripts, run=run)
        totals, age_ms = (found.counts(), found.age_ms()) if found else (None, None)
    limits = read_state(scripts.redis, scripts.keys, sorted(counts.by_queue))
    return render(counts, workers, limits, AllQueues(listed, totals, age_ms))


@dataclass(frozen=True)
class AllQueues:
    """What /metrics says of all listed queues, however many it shows one by one."""

    listed: int
    totals: QueueCounts | None  # None: no sweep has ended yet
    age_ms: int | None  # 0: read now


def render(
    counts: QueueCounts,
    workers: WorkerCounts | None = None,
    limits: Sequence[LimitsState] = (),
    all_queues: AllQueues | None = None,
) -> tuple[bytes, str]:
    """Return the exposition text and its content type for counts the caller read just now.

    Callers read counts and workers with ``Scripts.stats()`` (one round trip) and the limits
    with ``scrape()``; a Redis error there is their 503.
    """
    registry = CollectorRegistry()
    if multiprocess_enabled():
        SettledFilesCollector(registry)
    else:
        for collector in PROCESS_METRICS:
            registry.register(collector)
    registry.register(QueueStateCollector(counts, workers, limits))
    if all_queues is not None:
        registry.register(AllQueuesCollector(all_queues))
    return generate_latest(registry), CONTENT_TYPE_LATEST


class AllQueuesCollector:
    """Exports the number of listed queues and the totals of all of them (fleet-wide: max)."""

    def __init__(self, all_queues: AllQueues) -> None:
        self.all_queues = all_queues

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Yield the queue count, and the totals per state with their age when known."""
        found = self.all_queues
        yield GaugeMetricFamily(
            "taskforge_queues_listed", "Queues in the list of queues.", value=found.listed
        )
        if found.totals is None or found.age_ms is None:
            return
        jobs = GaugeMetricFamily(
            "taskforge_jobs_all_queues",
            "Jobs in each state in all queues (read now, or by the last sweep: see the age).",
            labels=["state"],
        )
        for state in JobState:
            jobs.add_metric([str(state)], found.totals.by_state[state])
        yield jobs
        yield GaugeMetricFamily(
            "taskforge_jobs_all_queues_age_seconds",
            "How old taskforge_jobs_all_queues is (0: read at this scrape).",
            value=found.age_ms / 1000,
        )
