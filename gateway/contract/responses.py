"""Answers: what the gateway sends back (shared.model.jobs.Job.to_json and the views build them)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

from gateway.contract.types import Count, JobId, QueueName, Timestamp, said
from shared.engine.history import ACTOR_CODES, CAP, EVENTS
from shared.model.jobs import TRACEBACK_LIMIT, JobState

State = Literal[tuple(str(state) for state in JobState)]  # type: ignore[valid-type]


class Job(Struct, kw_only=True):
    """A job as the gateway shows it; the optional fields appear when they apply."""

    id: JobId
    type: str
    queue: QueueName
    status: State
    priority: int
    max_retries: int
    attempts: Count
    recoveries: Count
    payload: dict[str, Any]  # an object, as every enqueue must give (absent: {})
    created_at: Timestamp
    updated_at: Timestamp
    traceback: said(
        str | None,
        "The traceback of the handler's exception behind last_error (null when none), cut to "
        f"its last {TRACEBACK_LIMIT} bytes.",
    )
    scheduled_at: Timestamp | UnsetType = UNSET
    started_at: Timestamp | UnsetType = UNSET
    finished_at: Timestamp | UnsetType = UNSET
    next_retry_at: Timestamp | UnsetType = UNSET
    last_error: said(str, '"Type: message"') | UnsetType = UNSET
    result: Any | UnsetType = UNSET
    timeout: float | UnsetType = UNSET
    cancel_requested_at: (
        said(
            Timestamp,
            "When a stop of the job was requested while it ran (kept once it ended, whichever "
            "way: a job that completed first shows it too).",
        )
        | UnsetType
    ) = UNSET
    cancel_requested_by: (
        said(
            str,
            "Who asked: the request's by, else api and the client's address, or dashboard and "
            "the browser's.",
        )
        | UnsetType
    ) = UNSET

    warnings: (
        Annotated[
            list[str],
            Meta(
                min_length=1,
                description="Enqueue replies only, and only when there is something to say: "
                "what this gateway saw in the workerd registry (at most a few seconds old) that "
                "the job will wait or fail for: no host registered, no host serving its queue, "
                "or no host serving its queue running its type (it then fails as NoHandler and "
                "ends dead-lettered). Absent when all is well or when the gateway could not "
                "read the registry lately.",
            ),
        ]
        | UnsetType
    ) = UNSET


class Jobs(Struct):
    """Jobs, in the order asked (a batch's)."""

    jobs: list[Job]


EVERY_QUEUE = said(
    bool,
    "Whether every queue was read: true while at most 100 are listed; false past that, when "
    "the page read a bounded set of queues (GET /jobs without queue; docs/API.md).",
)


class JobPage(Struct):
    """A page of one state's jobs, in that state's order."""

    jobs: list[Job]
    next_cursor: str | None
    every_queue: EVERY_QUEUE


class DeadPage(Struct):
    """A page of dead jobs, newest death first."""

    jobs: list[Job]
    next_cursor: str | None
    every_queue: EVERY_QUEUE


Event = Literal[tuple(dict.fromkeys(EVENTS.values()))]  # type: ignore[valid-type]
Actor = Literal[tuple(str(actor) for actor in ACTOR_CODES)]  # type: ignore[valid-type]


class HistoryEntry(Struct, kw_only=True):
    """One transition of a job; the optional fields appear when they apply."""

    event: Event
    at: said(Timestamp, "When, on Redis's clock.")
    actor: Actor
    attempt: said(Count, "The job's execution this entry is about.") | UnsetType = UNSET
    worker: said(str, "The worker id, for an execution.") | UnsetType = UNSET
    host: said(str, "The workerd host the worker ran on.") | UnsetType = UNSET
    error: said(str, "The error's type (retrying, dead).") | UnsetType = UNSET
    by: said(str, "Who asked (cancel_requested).") | UnsetType = UNSET
    stopped: (
        said(
            str,
            "How a running job stopped for its cancel (canceled): handler, sigterm, sigkill, "
            "failed, timeout or lost.",
        )
        | UnsetType
    ) = UNSET
    reason: (
        said(Literal["concurrency", "rate"], "held: which of its type's limits holds the job back.")
        | UnsetType
    ) = UNSET


class History(Struct):
    """A job's transitions, oldest first."""

    id: JobId
    queue: str
    history: Annotated[
        list[HistoryEntry],
        Meta(max_length=CAP, description=f"Oldest first; the last {CAP} transitions."),
    ]
    dropped: said(Count, "Older transitions left out by the cap.")


class Skipped(Struct):
    """A job a bulk action left alone, and why."""

    id: str
    reason: str


class BulkResult(Struct):
    """What a bulk DLQ action did."""

    done: list[JobId]
    skipped: said(
        list[Skipped],
        "Jobs left alone, and why: not found, or not dead (any more: a repeated call skips "
        "what the first did).",
    )
    next_cursor: said(str | None, "Where the filter goes on; null: nothing more (or ids).")
