"""Answers about queues: their counts, limits, pages, throughput, and the stats overview."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta, Struct

from gateway import queue_page
from gateway.contract.types import (
    Count,
    JobType,
    QueueName,
    TimestampOrNull,
    said,
    whole_number,
)
from shared.model.limit_rules import MAX_COUNT, RATE_PATTERN
from shared.read import throughput

Age = Annotated[float, Meta(ge=0)] | None
QueueCursor = said(
    Annotated[str, Meta(pattern=queue_page.CURSOR_PATTERN)] | None,
    "Pass as cursor for the next page; null: this page is the last.",
)
QueueCount = said(Annotated[int, Meta(ge=1)], "Queues listed.")
Concurrency = said(
    None | whole_number(1, MAX_COUNT),
    "At most this many running at once across the fleet; null: none.",
)
Rate = Annotated[
    str,
    Meta(
        pattern=f"^{RATE_PATTERN}$",
        description="N/PERIOD: N claims a period, a token bucket of N on Redis's clock; "
        "PERIOD like 1s, 500ms, 1m, 1h (a bare unit is 1 of it).",
        examples=["100/1m", "10/1s"],
    ),
]
NullableRate = said(None | Rate, "null: no rate limit.")
Running = said(Count, "Jobs running in its slots now.")
Held = said(Count, "Pending jobs its limits hold back (counted as pending).")


class Counts(Struct):
    """Jobs per state."""

    pending: Count
    scheduled: Count
    processing: Count
    retrying: Count
    completed: Count
    dead: Count
    canceled: Count


class TypeLimits(Struct):
    """One job type's limits in a queue, and their use."""

    concurrency: Concurrency
    rate: NullableRate
    running: Running
    held: Held


class Limits(Struct):
    """A queue's own limits and their use, and the same per limited job type."""

    queue: QueueName
    concurrency: Concurrency
    rate: NullableRate
    running: Running
    held: Held
    types: dict[JobType, TypeLimits]


class LimitsList(Struct):
    """The queues that have limits, by name: a page of them."""

    queues: list[Limits]
    next_cursor: QueueCursor


class Queue(Struct):
    """A queue: its counts, pause, recent throughput and limits."""

    name: QueueName
    paused: bool
    served: said(
        bool,
        "A live workerd host serves it now (its WORKER_QUEUES, by the registry); false: its "
        "jobs wait until one does.",
    )
    paused_since: TimestampOrNull
    jobs: Counts
    oldest_pending_age_seconds: Age
    completed_last_minute: said(Count, "Jobs completed in the last 60 s (by finish time).")
    failed_last_minute: said(
        Count,
        "Failed executions in the last 60 s, retried or dead (a job lost with its worker is "
        "not a failure).",
    )
    limits: said(Limits | None, "Its concurrency and rate limits and their use; null: none.")


class Queues(Struct):
    """A page of queues, by name."""

    queues: list[Queue]
    queue_count: QueueCount
    next_cursor: QueueCursor


class QueueTotals(Struct):
    """One queue's counts in the stats overview."""

    jobs: Counts
    total: Count
    oldest_pending_age_seconds: Age


class WorkerCounts(Struct):
    """The workerd hosts and their worker processes."""

    hosts: Count
    live: Count
    busy: Count
    quiet: Count


class Stats(Struct):
    """Jobs per state over every queue, the same for a page of queues, and the workers."""

    jobs: Counts | None
    total: Annotated[int, Meta(ge=0)] | None
    oldest_pending_age_seconds: Age
    totals_age_seconds: said(
        Age,
        "null: the totals were read now (every queue is on this page); else how old the last "
        "sweep's totals are. jobs and total are null only before the first sweep of many "
        "queues has ended.",
    )
    queue_count: QueueCount
    next_cursor: QueueCursor
    queues: said(
        dict[QueueName, QueueTotals],
        "The same counts for each queue of this page, by name: every queue while they fit in "
        "limit, else about limit of them (next_cursor: the next page).",
    )
    workers: WorkerCounts


class Minute(Struct):
    """One minute's finished jobs."""

    start: said(
        Annotated[str, Meta(extra_json_schema={"format": "date-time"})],
        "The minute's start (UTC, Redis's clock).",
    )
    completed: said(Count, "Jobs completed in the minute.")
    failed: said(Count, "Failed executions in it, retried or dead.")


class Throughput(Struct):
    """Jobs completed and executions failed per minute."""

    queue: said(str | None, "null: all queues, summed.")
    every_queue: said(
        bool,
        "false: past a page of queues, the sum of the queues hosts serve (only workers "
        "complete and fail jobs).",
    )
    minutes: Annotated[
        list[Minute],
        Meta(
            min_length=1,
            max_length=throughput.MAX_MINUTES,
            description="Oldest first; the last is the minute in progress.",
        ),
    ]
    completed: Count
    failed: Count
