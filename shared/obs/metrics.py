"""Prometheus metrics: names, the multiprocess set-up; the state gauges read from Redis are in
shared.read.state_gauges.

Naming: every metric starts with ``taskforge_``, units are in the name (``_seconds``), and
lifecycle counters are ``taskforge_jobs_<event>_total`` labelled by job type and queue.

Multiprocess mode (gunicorn workers, workerd children): prometheus_client picks its value
storage when it is first imported, so ``PROMETHEUS_MULTIPROC_DIR`` must be set before that —
entry points call :func:`shared.obs.multiproc.prepare_multiprocess_dir` before importing this
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
from collections.abc import Iterable
from typing import Any

from prometheus_client import (
    Counter,
    Gauge,
    Histogram,
)
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from shared.obs.held_writes import HeldWrites
from shared.obs.multiproc import MULTIPROC_ENV

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
# Claims a worker read past half their lease (its process or host stalled: a frozen VM, a
# SIGSTOP) and handed back unrun, by how the hand-back ended (release: done, stale_token when a
# scheduler recovered the job meanwhile, ..., unreachable) and queue. Any rate above 0 is a
# stall worth a look; workerd.worker logs each (claim_too_old).
CLAIMS_TOO_OLD = Counter(
    "taskforge_claims_too_old_total",
    "Claims read past half their lease and handed back unrun (a stalled worker), by release.",
    ["release", "queue"],
)
# Durable mode (shared.engine.durable): writes WAIT did not confirm on TASKFORGE_WAIT_REPLICAS replicas
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
    "Live workers of this supervisor: job threads (a process per thread at WORKER_THREADS=1).",
    multiprocess_mode="livesum",
)
# taskforge_busy_workers is not a gauge a worker sets (twice per job): workerd's observability
# server counts the busy slots at scrape time (workerd.obs_server.BusyWorkers).
BUSY_WORKERS_NAME = "taskforge_busy_workers"
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
    JOB_WAITS,
)

_seen_types: set[str] = set()
_seen_queues: set[str] = set()
# (metric, first label, queue label) -> the labelled child. prometheus_client's labels()
# validates and looks up its arguments each call (about 3 µs, five times per job); the keys
# are guarded labels, so this holds at most (types + 1) x (queues + 1) per metric. A child is
# fork-safe: its multiprocess value reopens its file when the pid changes.
_children: dict[tuple[Counter | Histogram, str, str], Any] = {}
# The per-job writes below, held and written a few times a second (shared.obs.held_writes);
# None writes at once. Only a worker process holds them (hold_job_writes).
_held: HeldWrites | None = None


def hold_job_writes() -> None:
    """Hold this process's per-job counter and histogram writes (workerd's worker children)."""
    global _held
    if _held is None:
        _held = HeldWrites()


def flush_job_writes() -> None:
    """Write what this process holds now (a worker going idle or ending its run)."""
    if _held is not None:
        _held.flush()


def type_label(job_type: str) -> str:
    """Return the label for a job type, or "other" once this process has seen too many."""
    return _capped_label(job_type, _seen_types, TYPE_LABEL_CAP, OTHER_TYPE)


def queue_label(queue: str) -> str:
    """Return the label for a queue, or "(other)" once this process has seen too many."""
    return _capped_label(queue, _seen_queues, QUEUE_LABEL_CAP, OTHER_QUEUE)


def _capped_label(value: str, seen: set[str], cap: int, other: str) -> str:
    """Return `value` as a label while `seen` holds fewer than `cap` values (or already holds
    it), else `other`: the series per metric stay bounded."""
    if value in seen:
        return value
    if len(seen) >= cap:
        return other
    seen.add(value)
    return value


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
    _inc(_labelled(LIFECYCLE[event], type_, queue_label(queue)), amount)


def count_running_cancel(stopped: str, queue: str) -> None:
    """Count how a cancel of a running job ended (one of RUNNING_CANCEL_ENDS)."""
    _inc(_labelled(RUNNING_CANCELS, stopped, queue_label(queue)))


def count_claim_too_old(release: str, queue: str) -> None:
    """Count a claim handed back unrun for its age, by how the hand-back ended."""
    _inc(_labelled(CLAIMS_TOO_OLD, release, queue_label(queue)))


def _inc(child: Any, amount: float = 1) -> None:
    if _held is None:
        child.inc(amount)
    else:
        _held.inc(child, amount)


def queue_wait_ms(eligible_at_ms: int | None, started_at_ms: int | None) -> int | None:
    """Return eligible → claimed in ms, on Redis's clock (None when a field is missing)."""
    if eligible_at_ms is None or started_at_ms is None:
        return None
    return max(0, started_at_ms - eligible_at_ms)


def observe_queue_wait(
    job_type: str, queue: str, eligible_at_ms: int | None, started_at_ms: int | None
) -> None:
    """Record eligible → claimed from the claimed job's own fields (no Redis call)."""
    wait_ms = queue_wait_ms(eligible_at_ms, started_at_ms)
    if wait_ms is None:
        return
    _observe(QUEUE_WAIT_SECONDS, type_label(job_type), queue_label(queue), wait_ms / 1000)


def observe_handler(job_type: str, queue: str, seconds: float) -> None:
    """Record how long a handler ran."""
    _observe(HANDLER_SECONDS, type_label(job_type), queue_label(queue), seconds)


def _observe(metric: Histogram, first: str, queue: str, value: float) -> None:
    child = _labelled(metric, first, queue)
    if _held is None:
        child.observe(value)
    else:
        _held.observe(child, value)


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
