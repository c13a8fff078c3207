"""The one home of a job's outcomes: each writes its log line, counts its metric, marks its span.

Whichever process saw a transition — the gateway (enqueue, replay, purge, cancel), a worker
(claim, start, complete, fail, hand-back), the scheduler (promote, recover) or the supervisor's
release duty (a dead worker's job) — calls :func:`record` once, right after the engine answered.
:data:`TABLE` says what each outcome writes: its ``job_*`` event and level, its
``taskforge_jobs_<counter>_total`` counters, and its span. A span that wraps work
(``task.enqueue``, ``task.acknowledge``) stays a context manager around the caller's code; the
outcome is set on it here. A point span (``task.claim``, ``task.retry.schedule``,
``task.dlq.transition``, ``task.recover``, ``task.replay``, the promotions) is recorded here.
The supervisor forks, so it never creates a tracing SDK (:func:`shared.obs.tracing.forbid_here`):
its outcomes are logged and counted, not traced.

A job's history and its live events are not written here: the Lua script that makes a
transition appends both, atomically with it, since a Python hook would miss a transition whose
reply was lost. :func:`add_sink` registers a function that receives a :class:`Transition` after
the log line, the counters and the span, in the process that recorded it; the tests use it
(tests/conftest.py's ``transitions``) to see which outcomes a call recorded.

Every outcome names the job's queue (a required argument, so no caller can forget it): the
line's ``queue`` field, the counters' ``queue`` label, the spans' ``taskforge.queue`` (and
``messaging.destination.name`` on a messaging span) and :attr:`Transition.queue`.
"""

from __future__ import annotations

import enum
import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shared.engine.engine_types import Confirmation
from shared.model.jobs import wall_clock_ms
from shared.obs import metrics, tracing
from shared.obs.log import log_line

log = logging.getLogger(__name__)

INFO, WARNING, ERROR, DEBUG = logging.INFO, logging.WARNING, logging.ERROR, logging.DEBUG


class Outcome(enum.Enum):
    """What happened to a job; the value is the name a history or an event stream would use."""

    ENQUEUED = "enqueued"
    DUPLICATE = "duplicate"  # an Idempotency-Key named an earlier job: nothing created
    PROMOTED = "promoted"  # a scheduled job is due
    RETRY_PROMOTED = "retry_promoted"  # a retry is due
    CLAIMED = "claimed"
    STARTED = "started"
    COMPLETED = "completed"
    STALE_ACK = "stale_ack"  # a completion for a job no longer this worker's
    STALE_FAILURE = "stale_failure"  # a handler's failure for a job no longer this worker's
    RETRYING = "retrying"  # the handler failed; a retry is scheduled
    DEAD = "dead"  # the handler failed past its retries, or permanently
    TIMED_OUT_RETRYING = "timed_out_retrying"  # killed at its timeout; a retry is scheduled
    TIMED_OUT_DEAD = "timed_out_dead"
    TIMED_OUT_STALE = "timed_out_stale"  # killed at its timeout, but no longer its worker's
    RECOVERED = "recovered"  # its worker died or its lease expired: back to pending
    RECOVERY_CAP = "recovery_cap"  # lost once too often: dead
    HANDED_BACK = "handed_back"  # a stopping worker gives back a job it has not started
    RELEASED = "released"  # a worker killed during a drain: its job back, not its fault
    REPLAYED = "replayed"
    CANCELED = "canceled"
    CANCEL_REQUESTED = "cancel_requested"  # a running job asked to stop (it still runs)
    CANCELED_RUNNING = "canceled_running"  # a running job stopped for its cancel (field stopped)
    PURGED = "purged"


@dataclass(frozen=True)
class Row:
    """What one outcome writes: its log line, its counters, and its span."""

    event: str | None  # the log line's event; None: no line
    level: int
    counters: tuple[str, ...]  # names in metrics.LIFECYCLE_EVENTS
    span: str | None = None  # a point span recorded here; None: only the open span is marked
    span_outcome: str | None = None  # taskforge.outcome, on the point span and the open one
    # Also counted in taskforge_running_cancels_total by the record's `stopped` field.
    running_cancel: bool = False


TABLE: dict[Outcome, Row] = {
    # The gateway's access line (http_request) is a request's INFO record, as a producer logs
    # nothing more in Sidekiq, Celery or RQ; job_enqueued, which names the job, is DEBUG: at
    # INFO it cost more than all of the gateway's own enqueue code (bench/PER_JOB_COST.md).
    Outcome.ENQUEUED: Row("job_enqueued", DEBUG, ("enqueued",), None, "enqueued"),
    Outcome.DUPLICATE: Row(None, INFO, (), None, "duplicate"),
    Outcome.PROMOTED: Row("job_promoted", DEBUG, (), "task.schedule.promote", "promoted"),
    Outcome.RETRY_PROMOTED: Row("job_promoted", DEBUG, (), "task.retry.promote", "promoted"),
    # A job's INFO lines are its start and its end, as Sidekiq's and Celery's are: job_started
    # carries what the claim knew (priority, queue wait, worker). The claim, a moment before,
    # is a DEBUG line: at INFO it cost a third of the job's logging (bench/PER_JOB_COST.md).
    Outcome.CLAIMED: Row("job_claimed", DEBUG, ("claimed",), "task.claim", "claimed"),
    Outcome.STARTED: Row("job_started", INFO, ()),
    Outcome.COMPLETED: Row("job_completed", INFO, ("completed",), None, "completed"),
    Outcome.STALE_ACK: Row("job_stale_ack", WARNING, ("stale_acks",), None, "stale_ack"),
    Outcome.STALE_FAILURE: Row(
        "job_stale_ack", WARNING, ("failed", "stale_acks"), None, "stale_ack"
    ),
    Outcome.RETRYING: Row(
        "job_retry_scheduled", INFO, ("failed", "retried"), "task.retry.schedule", "retrying"
    ),
    Outcome.DEAD: Row("job_dead", WARNING, ("failed", "dead"), "task.dlq.transition", "dead"),
    Outcome.TIMED_OUT_RETRYING: Row("job_timed_out", WARNING, ("timed_out", "retried")),
    Outcome.TIMED_OUT_DEAD: Row("job_timed_out", WARNING, ("timed_out", "dead")),
    Outcome.TIMED_OUT_STALE: Row("job_timed_out", WARNING, ("timed_out",)),
    Outcome.RECOVERED: Row("job_recovered", WARNING, ("recovered",), "task.recover", "recovered"),
    Outcome.RECOVERY_CAP: Row("job_dead", ERROR, ("dead",), "task.dlq.transition", "dead"),
    Outcome.HANDED_BACK: Row("job_released", INFO, ("released",)),
    Outcome.RELEASED: Row("job_released", WARNING, ("released",)),
    Outcome.REPLAYED: Row("job_replayed", INFO, ("replayed",), "task.replay", "replayed"),
    Outcome.CANCELED: Row("job_canceled", INFO, ("canceled",)),
    Outcome.CANCEL_REQUESTED: Row("job_cancel_requested", INFO, ("cancel_requested",)),
    Outcome.CANCELED_RUNNING: Row(
        "job_canceled", INFO, ("canceled",), None, "canceled", running_cancel=True
    ),
    Outcome.PURGED: Row("job_purged", INFO, ("purged",)),
}


@dataclass(frozen=True)
class Transition:
    """One recorded outcome, as a sink receives it (identifiers and log fields, never data)."""

    outcome: Outcome
    job_id: str
    job_type: str | None
    queue: str
    attempt: int | None
    at_ms: int  # this process's clock, milliseconds since the epoch
    fields: Mapping[str, Any] = field(default_factory=dict)


Sink = Callable[[Transition], None]
_sinks: list[Sink] = []


def add_sink(sink: Sink) -> None:
    """Call `sink` with every transition this process records from now on."""
    _sinks.append(sink)


def remove_sink(sink: Sink) -> None:
    """Stop calling `sink`."""
    _sinks.remove(sink)


def record(
    outcome: Outcome,
    job_id: str,
    job_type: str | None,
    *,
    queue: str,
    attempt: int | None = None,
    trace: str | None = None,
    attributes: Mapping[str, Any] | None = None,
    start_ms: int | None = None,
    end_ms: int | None = None,
    confirmation: Confirmation | None = None,
    **fields: Any,
) -> None:
    """Count, log and trace one job's outcome, then hand it to the sinks.

    `fields` go to the log line after job_id, type, queue and attempt; `attributes` go to the span
    (the point span if the outcome has one, else the open one), with the job's identifiers.
    `trace` is the job's stored traceparent, the point span's parent (None: the open span);
    `start_ms`/`end_ms` date a point span that covers time already past (the claim's wait).
    `confirmation`: what durable mode's WAIT answered after the write; one that fell short is
    not counted, logged nor passed on as the outcome, only as :func:`not_replicated` says.
    """
    if confirmation is not None and not confirmation.confirmed:
        not_replicated(confirmation, outcome, [job_id], job_type, queue=queue, attempt=attempt)
        return
    row = TABLE[outcome]
    for counter in row.counters:  # first: a scrape right after the transition sees it sooner
        metrics.count(counter, job_type, queue)
    if row.running_cancel:
        metrics.count_running_cancel(str(fields.get("stopped", "")), queue)
    if row.event is not None and log.isEnabledFor(row.level):
        extra = {"job_id": job_id, "type": job_type, "queue": queue}
        if attempt is not None:
            extra["attempt"] = attempt
        extra.update(fields)
        log_line(log, row.level, row.event, extra)
    if row.span_outcome is not None:
        _mark_spans(row, job_id, job_type, queue, attempt, trace, attributes, start_ms, end_ms)
    if _sinks:
        _to_sinks(Transition(outcome, job_id, job_type, queue, attempt, wall_clock_ms(), fields))


def record_batch(
    outcome: Outcome,
    jobs: Sequence[tuple[str, str]],
    *,
    queue: str,
    confirmation: Confirmation | None = None,
    **fields: Any,
) -> None:
    """Record one outcome of many jobs of one queue, given as (id, type): one line naming each.

    A batch that spans queues is recorded once per queue, so every line names one queue.
    `confirmation` as for :func:`record`.
    """
    if confirmation is not None and not confirmation.confirmed:
        ids = [job_id for job_id, _ in jobs]
        not_replicated(confirmation, outcome, ids, None, queue=queue)
        return
    row = TABLE[outcome]
    types = Counter(job_type for _, job_type in jobs)
    for counter in row.counters:
        for job_type, amount in types.items():
            metrics.count(counter, job_type, queue, amount)
    if row.event is not None and log.isEnabledFor(row.level):
        # A line per job would cost more than the enqueue itself.
        ids = [job_id for job_id, _ in jobs]
        extra = {"job_ids": ids, "types": dict(types), "queue": queue, "count": len(jobs)}
        log.log(row.level, row.event, extra={**extra, **fields})
    if row.span_outcome is not None:
        tracing.current_attributes({tracing.OUTCOME: row.span_outcome})
    if _sinks:
        now = wall_clock_ms()
        for job_id, job_type in jobs:
            _to_sinks(Transition(outcome, job_id, job_type, queue, None, now, fields))


def not_replicated(
    confirmation: Confirmation,
    outcome: Outcome,
    job_ids: Sequence[str],
    job_type: str | None,
    *,
    queue: str,
    attempt: int | None = None,
) -> None:
    """Record a write WAIT did not confirm (durable mode): one warning and one count, and not
    the outcome itself, which a failover may still undo (docs/RELIABILITY.md, "Durable mode").

    The job's lifecycle counter, ``job_*`` line and sinks wait for a write that is confirmed:
    a retried enqueue, or the job's next execution if a failover lost this one.
    """
    metrics.WAIT_TIMEOUTS.labels(confirmation.op).inc()
    extra: dict[str, Any] = {
        "op": confirmation.op,
        "outcome": outcome.value,
        "replicas": confirmation.acked,
        "wanted": confirmation.wanted,
        "queue": queue,
    }
    if len(job_ids) == 1:
        extra["job_id"], extra["type"] = job_ids[0], job_type
    else:
        extra["job_ids"], extra["count"] = list(job_ids), len(job_ids)
    if attempt is not None:
        extra["attempt"] = attempt
    log.warning("write_not_replicated", extra=extra)
    tracing.current_attributes({tracing.OUTCOME: "not_replicated"})


def _mark_spans(
    row: Row,
    job_id: str,
    job_type: str | None,
    queue: str,
    attempt: int | None,
    trace: str | None,
    attributes: Mapping[str, Any] | None,
    start_ms: int | None,
    end_ms: int | None,
) -> None:
    if not tracing.enabled():
        return  # off: no span is open, and none would be recorded: build nothing
    outcome = {tracing.OUTCOME: row.span_outcome}
    if row.span is None:
        tracing.current_attributes({**attributes, **outcome} if attributes else outcome)
        return
    tracing.current_attributes(outcome)  # of the span open around the transition, if any
    more = dict(attributes or {})
    if attempt is not None:
        more["taskforge.attempt"] = attempt
    span_attributes = tracing.job_attributes(
        job_id, job_type or "", row.span_outcome, queue=queue, **more
    )
    tracing.record(row.span, trace, span_attributes, start_ms=start_ms, end_ms=end_ms)


def _to_sinks(transition: Transition) -> None:
    for sink in tuple(_sinks):
        try:
            sink(transition)
        except Exception:  # a sink's failure must not undo or stop the transition's recording
            log.exception("lifecycle_sink_failed", extra={"sink": getattr(sink, "__name__", "")})
