"""What the engine's calls answer, and the policy they run under.

The codes mirror lua/includes/codes.lua; the errors are what a transition reports to an API
caller; each result is one script's reply, parsed (shared.engine.scripts builds them). Kept apart from
shared.engine.scripts so a reader of a result needs neither Redis nor the scripts' plumbing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from shared.model.jobs import Job, JobState


class Code(IntEnum):
    """Return codes of the scripts (mirrors lua/includes/codes.lua)."""

    EMPTY = 0
    DONE = 1
    DUPLICATE = 2
    RETRYING = 3
    DEAD = 4
    PAUSED = 5
    NOT_RUNNABLE = 6
    CANCELED = 7
    CANCEL_ASKED = 8
    NOT_FOUND = -1
    WRONG_STATE = -2
    STALE_TOKEN = -3
    CONFLICT = -4


class EngineError(Exception):
    """Base of the errors a transition reports to an API caller."""


class JobNotFound(EngineError):
    """No job has that id (never existed, or its retention passed)."""


class WrongState(EngineError):
    """The job is not in a state the transition starts from."""

    def __init__(self, status: str) -> None:
        self.status = status
        super().__init__(f"job is {status}")


class QueuePaused(EngineError):
    """A claim found its queue paused: nothing was claimed (a worker stops asking it)."""

    def __init__(self, queue: str) -> None:
        self.queue = queue
        super().__init__(f"queue {queue} is paused")


class HostNotFound(EngineError):
    """No live workerd host has that registry name."""


class ScheduleNotFound(EngineError):
    """No published periodic schedule has that name."""


class IdempotencyConflict(EngineError):
    """The idempotency key already names a job created by a different request."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"idempotency key already used for job {job_id} with a different body")


class JobIdConflict(EngineError):
    """A client's job id already names a job created by a different request."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"job id {job_id} is already a job with a different body")


@dataclass(frozen=True)
class Policy:
    """Engine parameters, in the units the scripts use (milliseconds and counts)."""

    lease_ms: int = 30_000
    retry_base_ms: int = 2_000
    retry_max_ms: int = 3_600_000
    retry_jitter: float = 0.0
    max_recoveries: int = 5
    finished_retention_ms: int = 86_400_000
    dlq_max_age_ms: int = 7 * 86_400_000
    dlq_max_jobs: int = 10_000
    finished_max_jobs: int = 100_000
    idempotency_ttl_ms: int = 86_400_000
    wake_cap: int = 1_000
    batch_limit: int = 1_000
    # Length cap of each events stream (XADD MAXLEN ~); 0: the scripts write no event.
    events_cap: int = 100_000
    # Durable mode (shared.engine.durable): replicas WAIT must confirm after an enqueue, complete or
    # fail, and how long it may wait (ms); 0 replicas: off, no WAIT is sent.
    wait_replicas: int = 0
    wait_timeout_ms: int = 500

    @classmethod
    def from_settings(cls, settings: Any) -> Policy:
        """Build a Policy from shared.settings.config.Settings (durations there are seconds)."""

        def ms(seconds: float) -> int:
            return round(seconds * 1000)

        return cls(
            lease_ms=ms(settings.visibility_timeout),
            retry_base_ms=ms(settings.retry_base_delay),
            retry_max_ms=ms(settings.retry_max_delay),
            retry_jitter=settings.retry_jitter,
            max_recoveries=settings.max_recoveries,
            finished_retention_ms=ms(settings.finished_retention),
            dlq_max_age_ms=ms(settings.dlq_max_age),
            dlq_max_jobs=settings.dlq_max_jobs,
            finished_max_jobs=settings.finished_max_jobs,
            idempotency_ttl_ms=ms(settings.idempotency_ttl),
            events_cap=settings.events_max if settings.events else 0,
            wait_replicas=settings.wait_replicas,
            wait_timeout_ms=ms(settings.wait_timeout),
        )


@dataclass(frozen=True)
class Confirmation:
    """What a WAIT after a write answered (durable mode, shared.engine.durable): replicas that have it."""

    op: str  # the write it followed: enqueue, enqueue_batch, complete, fail, cancel_running
    wanted: int
    acked: int

    @property
    def confirmed(self) -> bool:
        """Tell whether enough replicas have the write (a failover keeps it)."""
        return self.acked >= self.wanted


@dataclass(frozen=True)
class EnqueueResult:
    """What enqueue did: created a job, or found the one an idempotency key names."""

    job_id: str
    status: JobState
    created: bool
    created_at_ms: int
    # The job id was there already (enqueue.lua's `existed`): a repeat of the call, or a
    # periodic tick another scheduler enqueued first (workerd/periodic.py counts only its own).
    # Left out of ==: two answers about the same job compare equal, as before it was read.
    existed: bool = field(default=False, compare=False)
    # Durable mode: what WAIT answered after the write; None when the mode is off.
    confirmation: Confirmation | None = field(default=None, compare=False)
    # The queue's first job since its keys were made or deleted (enqueue.lua's `first`):
    # Scripts lists the queue again, so a delete racing this enqueue cannot unlist it.
    first_in_queue: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class FailResult:
    """What fail did: RETRYING (with next_retry_at), DEAD, CANCELED (its cancel was requested),
    NOT_FOUND or STALE_TOKEN.

    RETRYING, DEAD and CANCELED carry the job's type and the attempt that failed (what a caller logs and
    counts); STALE_TOKEN carries the job's current status.
    """

    code: Code
    next_retry_at: int | None = None
    status: str | None = None
    job_type: str | None = field(default=None, compare=False)
    attempt: int | None = field(default=None, compare=False)
    confirmation: Confirmation | None = field(default=None, compare=False)  # durable mode


@dataclass(frozen=True)
class NotRunnable:
    """A claim that took nothing: the queue's best job is of a type the worker does not run.

    The job stays where it was, first in line, for a worker that runs its type.
    """

    queue: str
    job_type: str


@dataclass(frozen=True)
class AckResult:
    """What a worker-side write did: DONE, DEAD, CANCELED, NOT_FOUND, WRONG_STATE or
    STALE_TOKEN (with the status).

    A complete that also claimed puts the next job in `next_job`, or a :class:`NotRunnable`
    when the queue's best job is not the worker's to run (the completion happened either way).
    """

    code: Code
    status: str | None = None
    next_job: Job | NotRunnable | None = None
    # complete with a claim: the queue was paused, so nothing was claimed.
    paused: bool = False
    # release and cancel_running: the job's type when it was requeued (DONE), declared dead
    # (DEAD) or canceled (CANCELED; cancel_running's DONE).
    job_type: str | None = field(default=None, compare=False)
    # complete and cancel_running in durable mode: what WAIT answered after the write.
    confirmation: Confirmation | None = field(default=None, compare=False)


@dataclass(frozen=True)
class BatchAck:
    """What complete_batch did: one AckResult per job completed, in the order sent (DONE,
    NOT_FOUND, or STALE_TOKEN with the status), and what its claim part got.

    `claimed`: the jobs started for the worker, in claim order (a repeat: those its first call
    claimed that the worker still holds). `refused`: the claim stopped at a job of a type the
    worker does not run (left first in line). `paused`: the queue is paused, nothing claimed.
    """

    acks: tuple[AckResult, ...]
    claimed: tuple[Job, ...] = ()
    refused: NotRunnable | None = None
    paused: bool = False


@dataclass(frozen=True)
class Released:
    """One job release_worker gave back: requeued (DONE), dead past the recovery cap (DEAD), or
    canceled (CANCELED: its cancel was requested)."""

    code: Code
    job_id: str
    job_type: str
    queue: str = "default"


@dataclass(frozen=True)
class CancelResult:
    """The canceled job, and whether this call canceled it (False: it already was).

    A processing job is not canceled yet: this call recorded the request to stop it (the job's
    ``cancel_requested_at``), and `changed` says whether it was this call's.
    """

    job: Job
    changed: bool


@dataclass(frozen=True)
class PromoteResult:
    """Jobs made claimable by promote, with how late each was (ms past its due time)."""

    scheduled: list[str]
    retrying: list[str]
    scheduled_lateness_ms: list[int]
    retrying_lateness_ms: list[int]
    scheduled_types: list[str] = field(default_factory=list, compare=False)
    retrying_types: list[str] = field(default_factory=list, compare=False)


@dataclass(frozen=True)
class RecoverResult:
    """Jobs whose lease expired: requeued, dead past the recovery cap, or canceled (asked to
    stop before their worker was lost)."""

    requeued: list[str]
    dead: list[str]
    requeued_types: list[str] = field(default_factory=list, compare=False)
    dead_types: list[str] = field(default_factory=list, compare=False)
    canceled: list[str] = field(default_factory=list)
    canceled_types: list[str] = field(default_factory=list, compare=False)


@dataclass(frozen=True)
class TrimResult:
    """Jobs forgotten by retention, per index."""

    completed: int
    canceled: int
    dead: int


@dataclass(frozen=True)
class QueuePause:
    """What pause_queue did: the time the queue was paused (ms), and whether this call did it."""

    since_ms: int
    changed: bool


@dataclass(frozen=True)
class HostBeat:
    """What a registry heartbeat answered: live hosts, and the quiet state the host now runs.

    `quiet` is the supervisor's own state, or the request an API call left in its record since
    the previous heartbeat (heartbeat.lua).
    """

    live: int
    quiet: bool
