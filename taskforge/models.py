"""Typed answers of the gateway: jobs, pages, history, queues, hosts, bulk results, stats.

Each keeps the JSON it came from as ``raw``, so a field a newer gateway adds is never lost to a
client that does not know it yet, and ``--json`` in the CLI prints exactly what the server said.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

FINISHED = ("completed", "dead", "canceled")


def parse_time(text: str | None) -> datetime | None:
    """Return an RFC 3339 time of the gateway's (always UTC, ``Z``) as an aware datetime."""
    return None if text is None else datetime.fromisoformat(text)


@dataclass(frozen=True)
class Job:
    """One job as ``GET /jobs/<id>`` shows it."""

    id: str
    type: str
    queue: str
    status: str
    priority: int
    max_retries: int
    attempts: int
    payload: dict[str, Any]
    created_at: datetime | None
    updated_at: datetime | None
    scheduled_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    next_retry_at: datetime | None = None
    timeout: float | None = None
    result: Any = None
    last_error: str | None = None
    traceback: str | None = None
    recoveries: int = 0
    # A stop asked while it ran (POST /jobs/<id>/cancel answered 202): when, and who asked.
    cancel_requested_at: datetime | None = None
    cancel_requested_by: str | None = None
    # An enqueue's reply only: what the gateway saw in the fleet registry that the job will
    # wait or fail for (a queue no workerd host serves, a type none serving it runs).
    warnings: tuple[str, ...] = field(default=(), compare=False)  # the same job all the same
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def finished(self) -> bool:
        """Tell whether the job has reached an end state (completed, dead or canceled)."""
        return self.status in FINISHED

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Job:
        """Return the job a gateway's JSON describes."""
        return cls(
            id=doc["id"],
            type=doc["type"],
            queue=doc.get("queue", "default"),
            status=doc["status"],
            priority=doc.get("priority", 0),
            max_retries=doc.get("max_retries", 0),
            attempts=doc.get("attempts", 0),
            payload=doc.get("payload") or {},
            created_at=parse_time(doc.get("created_at")),
            updated_at=parse_time(doc.get("updated_at")),
            scheduled_at=parse_time(doc.get("scheduled_at")),
            started_at=parse_time(doc.get("started_at")),
            finished_at=parse_time(doc.get("finished_at")),
            next_retry_at=parse_time(doc.get("next_retry_at")),
            timeout=doc.get("timeout"),
            result=doc.get("result"),
            last_error=doc.get("last_error"),
            traceback=doc.get("traceback"),
            recoveries=doc.get("recoveries", 0),
            cancel_requested_at=parse_time(doc.get("cancel_requested_at")),
            cancel_requested_by=doc.get("cancel_requested_by"),
            warnings=tuple(str(w) for w in doc.get("warnings") or ()),
            raw=doc,
        )


@dataclass(frozen=True)
class JobPage:
    """One page of a listing (``GET /jobs`` or ``GET /dlq``); ``next_cursor`` None at the end."""

    jobs: list[Job]
    next_cursor: str | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> JobPage:
        """Return the page a listing's JSON describes."""
        jobs = [Job.from_json(job) for job in doc.get("jobs", [])]
        return cls(jobs, doc.get("next_cursor"), doc)


@dataclass(frozen=True)
class HistoryEntry:
    """One transition of a job: what happened, when (Redis's clock), to which attempt, by whom."""

    event: str
    at: datetime | None
    attempt: int | None
    actor: str | None
    worker: str | None = None
    host: str | None = None
    error: str | None = None
    by: str | None = None  # cancel_requested: who asked
    stopped: str | None = None  # canceled while running: how it stopped
    reason: str | None = None  # held: which of its type's limits held it (concurrency, rate)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> HistoryEntry:
        """Return the entry a history's JSON describes."""
        return cls(
            event=doc["event"],
            at=parse_time(doc.get("at")),
            attempt=doc.get("attempt"),
            actor=doc.get("actor"),
            worker=doc.get("worker"),
            host=doc.get("host"),
            error=doc.get("error"),
            by=doc.get("by"),
            stopped=doc.get("stopped"),
            reason=doc.get("reason"),
        )


@dataclass(frozen=True)
class History:
    """A job's transitions, oldest first; ``dropped`` counts older ones no longer kept."""

    id: str
    queue: str
    entries: list[HistoryEntry]
    dropped: int
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> History:
        """Return the history ``GET /jobs/<id>/history`` describes."""
        entries = [HistoryEntry.from_json(entry) for entry in doc.get("history", [])]
        return cls(doc["id"], doc.get("queue", "default"), entries, doc.get("dropped", 0), doc)


@dataclass(frozen=True)
class BulkResult:
    """One call of a bulk DLQ action: the ids it acted on, those it skipped and why."""

    done: list[str]
    skipped: list[dict[str, str]]
    next_cursor: str | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> BulkResult:
        """Return the result ``POST /dlq/retry`` or ``POST /dlq/purge`` describes."""
        return cls(
            list(doc.get("done", [])), list(doc.get("skipped", [])), doc.get("next_cursor"), doc
        )


@dataclass(frozen=True)
class ScopeLimit:
    """One scope's limits (a queue's own, or one job type's in it) and their use now."""

    concurrency: int | None
    rate: str | None  # "N/PERIOD"
    running: int
    held: int

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ScopeLimit:
        """Return the scope a ``GET /limits`` entry (or one of its types) describes."""
        return cls(
            doc.get("concurrency"), doc.get("rate"), doc.get("running", 0), doc.get("held", 0)
        )


@dataclass(frozen=True)
class Limits:
    """A queue's concurrency and rate limits, its own and per job type, as ``GET /limits`` says."""

    queue: str
    own: ScopeLimit
    types: dict[str, ScopeLimit]
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Limits:
        """Return the limits one ``GET /queues/<q>/limits`` answer describes."""
        types = {name: ScopeLimit.from_json(d) for name, d in doc.get("types", {}).items()}
        return cls(doc["queue"], ScopeLimit.from_json(doc), types, raw=doc)


@dataclass(frozen=True)
class Queue:
    """One queue as ``GET /queues`` lists it."""

    name: str
    paused: bool
    jobs: dict[str, int]
    oldest_pending_age_seconds: float | None
    completed_last_minute: int
    failed_last_minute: int
    paused_since: datetime | None = None
    limits: Limits | None = None  # None: the queue has none
    # A live workerd host serves it now (the fleet registry); None: a gateway too old to say.
    served: bool | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Queue:
        """Return the queue a ``GET /queues`` entry describes."""
        return cls(
            name=doc["name"],
            paused=bool(doc.get("paused")),
            jobs=dict(doc.get("jobs", {})),
            oldest_pending_age_seconds=doc.get("oldest_pending_age_seconds"),
            completed_last_minute=doc.get("completed_last_minute", 0),
            failed_last_minute=doc.get("failed_last_minute", 0),
            paused_since=parse_time(doc.get("paused_since")),
            limits=Limits.from_json(doc["limits"]) if doc.get("limits") else None,
            served=doc.get("served"),
            raw=doc,
        )


@dataclass(frozen=True)
class Host:
    """One live workerd host as ``GET /workers`` lists it; ``processes`` as the server gave them."""

    name: str
    host: str
    pid: int | None  # null when the host did not report one
    workers: int
    busy: int
    quiet: bool
    quiet_requested: bool
    queues: list[str]
    last_seen: datetime | None
    processes: list[dict[str, Any]]
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Host:
        """Return the host a ``GET /workers`` entry describes."""
        return cls(
            name=doc["name"],
            host=doc.get("host", ""),
            pid=doc.get("pid", 0),
            workers=doc.get("workers", 0),
            busy=doc.get("busy", 0),
            quiet=bool(doc.get("quiet")),
            quiet_requested=bool(doc.get("quiet_requested")),
            queues=list(doc.get("queues", [])),
            last_seen=parse_time(doc.get("last_seen")),
            processes=list(doc.get("processes", [])),
            raw=doc,
        )


@dataclass(frozen=True)
class Stats:
    """``GET /stats``: jobs per state over all queues, per queue, and the workers' counts."""

    jobs: dict[str, int]
    total: int
    oldest_pending_age_seconds: float | None
    queues: dict[str, dict[str, Any]]
    workers: dict[str, int]
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Stats:
        """Return the statistics ``GET /stats`` describes."""
        return cls(
            # null while the first sweep of many queues runs elsewhere (docs/API.md): zeros
            jobs=dict(doc.get("jobs") or {}),
            total=doc.get("total") or 0,
            oldest_pending_age_seconds=doc.get("oldest_pending_age_seconds"),
            queues=dict(doc.get("queues", {})),
            workers=dict(doc.get("workers", {})),
            raw=doc,
        )


@dataclass(frozen=True)
class Schedule:
    """One periodic schedule as ``GET /schedules`` lists it (``next_runs`` in its own zone)."""

    name: str
    cron: str | None
    every: str | None
    timezone: str
    missed: str
    job: dict[str, Any]
    paused: bool
    paused_since: datetime | None
    last_tick: datetime | None
    last_job_id: str | None
    jobs: int
    missed_ticks: int
    next_runs: list[datetime]
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Schedule:
        """Return the schedule a ``GET /schedules`` entry describes."""
        return cls(
            name=doc["name"],
            cron=doc.get("cron"),
            every=doc.get("every"),
            timezone=doc.get("timezone", "UTC"),
            missed=doc.get("missed", "skip"),
            job=dict(doc.get("job", {})),
            paused=bool(doc.get("paused")),
            paused_since=parse_time(doc.get("paused_since")),
            last_tick=parse_time(doc.get("last_tick")),
            last_job_id=doc.get("last_job_id"),
            jobs=doc.get("jobs", 0),
            missed_ticks=doc.get("missed_ticks", 0),
            next_runs=[datetime.fromisoformat(run) for run in doc.get("next_runs", [])],
            raw=doc,
        )
