"""Answers: what the gateway sends back (shared.jobs.Job.to_json and the views build them)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

from gateway.contract.types import Count, JobId, QueueName, Timestamp
from shared.jobs import TRACEBACK_LIMIT, JobState

State = Literal[tuple(str(state) for state in JobState)]  # type: ignore[valid-type]


def _said(kind: Any, description: str) -> Any:
    return Annotated[kind, Meta(description=description)]


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
    traceback: _said(
        str | None,
        "The traceback of the handler's exception behind last_error (null when none), cut to "
        f"its last {TRACEBACK_LIMIT} bytes.",
    )
    scheduled_at: Timestamp | UnsetType = UNSET
    started_at: Timestamp | UnsetType = UNSET
    finished_at: Timestamp | UnsetType = UNSET
    next_retry_at: Timestamp | UnsetType = UNSET
    last_error: _said(str, '"Type: message"') | UnsetType = UNSET
    result: Any | UnsetType = UNSET
    timeout: float | UnsetType = UNSET
    cancel_requested_at: (
        _said(
            Timestamp,
            "When a stop of the job was requested while it ran (kept once it ended, whichever "
            "way: a job that completed first shows it too).",
        )
        | UnsetType
    ) = UNSET
    cancel_requested_by: (
        _said(
            str,
            "Who asked: the request's by, else api and the client's address, or dashboard and "
            "the browser's.",
        )
        | UnsetType
    ) = UNSET


class Jobs(Struct):
    """Jobs, in the order asked (a batch's)."""

    jobs: list[Job]


EVERY_QUEUE = _said(
    bool,
    "Whether every queue was read: true while at most 100 are listed; false past that, when "
    "the page read a bounded set of queues (GET /jobs without queue; docs/API.md).",
)
NEXT_CURSOR = _said(str | None, "Pass as cursor for the next page; null: this page is the last.")


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
