"""The Redis-reading state gauges of /metrics: jobs per state and queue, limits, workers.

Read at scrape time from Redis by every process that serves ``/metrics`` (shared.obs.metrics
says how to aggregate them). They read through the engine and the read side, so they live
above both; the metric names and the multiprocess set-up stay in shared.obs.metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from shared.engine.limits import LimitsState, read_state
from shared.engine.queries import QueueCounts, WorkerCounts
from shared.model.jobs import JobState
from shared.model.queues import DEFAULT_QUEUE
from shared.obs.metrics import (
    PROCESS_METRICS,
    QUEUE_LABEL_CAP,
    SettledFilesCollector,
    multiprocess_enabled,
    queue_label,
)
from shared.read import summary
from shared.read.hosts import list_hosts
from shared.read.queue_view import listed_count

if TYPE_CHECKING:
    from shared.engine.scripts import Scripts


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


def scrape(
    scripts: Scripts,
    *,
    run: Callable[[Callable[[], object]], None] = summary.in_place,
    extra: Sequence[Collector] = (),
) -> tuple[bytes, str]:
    """Read what /metrics shows from Redis (counts, then the limits of the queues read) and
    render it.

    Per-queue gauges: every queue while at most QUEUE_LABEL_CAP are listed; past that only the
    queues live hosts serve (their WORKER_QUEUES: bounded by configuration, not by the names
    clients make), and the totals of all queues from the last sweep (shared.read.summary; `run`
    runs a due sweep: in place by default, the gateway passes a thread). `extra`: the serving
    process's own collectors (workerd's busy workers, counted in its slots).
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
    return render(counts, workers, limits, AllQueues(listed, totals, age_ms), extra)


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
    extra: Sequence[Collector] = (),
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
    for collector in extra:
        registry.register(collector)
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
