"""Answers about the fleet and the gateway: workerd hosts, probes, periodic schedules."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

from gateway.contract.types import Count, JobType, QueueName, Timestamp, TimestampOrNull, said
from shared.model.jobs import MAX_RETRIES_RANGE, PRIORITY_LIMIT
from shared.model.schedules import MISSED_POLICIES, NAME_PATTERN
from shared.read.schedule_state import NEXT_RUNS

Missed = Literal[MISSED_POLICIES]  # type: ignore[valid-type]


class Process(Struct, kw_only=True):
    """A worker process and, while busy, the job it runs (the host's clock)."""

    # An idle process has no job: its job's four fields are absent, never null (a client or a
    # tool following job_id to /jobs/{id} must never be handed a null id).
    pid: int
    last_heartbeat: TimestampOrNull
    worker: (
        said(str, "The worker id its jobs are claimed under: with WORKER_THREADS, a job thread's.")
        | UnsetType
    ) = UNSET
    job_id: said(str, "The job it runs; absent: idle.") | UnsetType = UNSET
    type: str | UnsetType = UNSET
    queue: str | UnsetType = UNSET
    busy_since: said(Timestamp, "When it started the job (the host's clock).") | UnsetType = UNSET


class Host(Struct, kw_only=True):
    """A live workerd host, as its last registry heartbeat reported it."""

    name: said(str, "The registry name, <hostname>-<pid>.")
    host: str
    pid: int | None
    workers: Count
    busy: Count
    quiet: said(bool, "Claims nothing more until resumed.")
    quiet_requested: said(bool | None, "An API request the host has not applied yet (null: none).")
    queues: list[str]
    worker_queues: said(str, "WORKER_QUEUES as it serves it.") | UnsetType = UNSET
    last_seen: Timestamp | UnsetType = UNSET
    processes: said(
        list[Process],
        "Each worker process and its current job, as the host's last registry heartbeat "
        "(every 2 s) reported them.",
    )


class Hosts(Struct):
    """The live workerd hosts."""

    hosts: list[Host]


class Replicas(Struct):
    """Durable mode: replicas the primary has, and how many are wanted."""

    connected: Count
    wanted: Annotated[int, Meta(ge=1)]


class Probe(Struct, kw_only=True):
    """GET /health or /ready: Redis reached, and how."""

    status: str
    redis: str
    primary: said(str, "Sentinel: host:port reached.") | UnsetType = UNSET
    replicas: (
        said(
            Replicas,
            "Durable mode: replicas the primary has now, and TASKFORGE_WAIT_REPLICAS. Fewer: "
            "still 200, every enqueue 503 not_replicated.",
        )
        | UnsetType
    ) = UNSET
    masters_down: (
        said(
            dict[str, str],
            "Cluster (redis degraded): each master that did not answer (host:port) and why; "
            "still 200 while another answers.",
        )
        | UnsetType
    ) = UNSET
    masters_answering: (
        said(list[str], "Cluster, with masters_down: the masters that answered.") | UnsetType
    ) = UNSET


class ScheduledJob(Struct):
    """The job a schedule enqueues at each tick."""

    type: JobType
    payload: dict
    queue: QueueName
    priority: Annotated[int, Meta(ge=-PRIORITY_LIMIT, le=PRIORITY_LIMIT)]
    max_retries: Annotated[int, Meta(ge=MAX_RETRIES_RANGE[0], le=MAX_RETRIES_RANGE[1])]
    timeout: said(float | None, "Seconds; null: the default.")


class Schedule(Struct):
    """A periodic schedule workerd published, and its state."""

    name: Annotated[str, Meta(pattern=f"^{NAME_PATTERN.pattern}$")]
    cron: said(
        str | None,
        "A cron expression (5 fields, or 6 with seconds first; cronsim), in `timezone`; null "
        "for an interval.",
    )
    every: said(
        str | None,
        "The interval (e.g. 900s): ticks at its multiples since the epoch; null for a cron "
        "schedule.",
    )
    timezone: Annotated[str, Meta(examples=["Europe/Berlin", "UTC"])]
    missed: said(Missed, "After an outage: skip the late ticks, or catch_up with one job.")
    job: ScheduledJob
    paused: bool
    paused_since: TimestampOrNull
    last_tick: said(
        TimestampOrNull,
        "The latest tick the schedulers passed (with a job, or not: paused or missed); null "
        "before any workerd saw the schedule.",
    )
    last_job_id: said(str | None, "The last tick's job.")
    last_job_tick: TimestampOrNull
    jobs: said(Count, "Jobs enqueued by the schedule.")
    missed_ticks: said(Count, "Ticks that got no job of their own.")
    next_runs: Annotated[
        list[Annotated[str, Meta(extra_json_schema={"format": "date-time"})]],
        Meta(
            min_length=NEXT_RUNS,
            max_length=NEXT_RUNS,
            description="The next ticks, ISO 8601 with the schedule's zone's offset.",
        ),
    ]


class Schedules(Struct):
    """The published schedules, by name."""

    schedules: list[Schedule]
