"""Script replies turned into Python values: the one place that knows each reply's layout.

A claim reply is a flat list in CLAIM_REPLY_FIELDS order (lua/includes/claim.lua's claim_fields);
other replies are a code and its values. shared.engine.scripts calls these after each script.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from shared.engine.engine_types import (
    Code,
    EnqueueResult,
    JobIdConflict,
    JobNotFound,
    WrongState,
)
from shared.model.jobs import DEFAULT_MAX_RETRIES, Job, JobState


def text(value: bytes | str | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


# Hash fields a Job carries in ``extra``: when it became claimable (ms; the queue-wait
# histogram reads it from the claim reply, no extra call), its W3C trace context, and whether
# it must run alone in its worker process (set by release_worker.lua after a death of a
# threaded worker nobody could attribute; workerd.worker_threads).
EXTRA_FIELDS = ("eligible_at", "traceparent", "alone")
# A claim reply's values, by position (claim_fields in lua/includes/claim.lua, started_at where
# the script read status): what a worker needs to run the job, without the last failure's error
# and traceback, nor what the caller knows (see _claimed).
CLAIM_REPLY_FIELDS = tuple(
    name.encode()
    for name in (
        "id",
        "type",
        "priority",
        "max_retries",
        "attempts",
        "recoveries",
        "payload",
        "created_at",
        "token",
        "scheduled_at",
        "timeout",
        "eligible_at",
        "traceparent",
        "started_at",
        "alone",
    )
)


def job_from_flat(flat: Sequence[bytes], queue: str) -> Job:
    return job_from_fields(dict(zip(flat[::2], flat[1::2], strict=True)), queue)


def claimed_job(values: Sequence[bytes | None], worker_id: str, queue: str) -> Job:
    """Build the Job of a claim reply (values in CLAIM_REPLY_FIELDS order) for `worker_id`.

    A claimed job is processing, held by the worker that claimed it, and last updated when it
    started: the script leaves these out of its reply. Read by position, with the defaults of
    Job.from_hash: a worker builds one per job, and the generic way (a dict of the fields, each
    name encoded and looked up) was about a fifth of the worker's Python per job.
    """
    (
        job_id,
        job_type,
        priority,
        max_retries,
        attempts,
        recoveries,
        payload,
        created_at,
        token,
        scheduled_at,
        timeout,
        eligible_at,
        traceparent,
        started_at,
        alone,
    ) = values
    started = int(started_at)  # a claim reply always has it
    # EXTRA_FIELDS, spelled out: a loop over them cost a fifth more of this call
    # (tests/engine/test_replies.py holds the extras to the generic reading's).
    extra = {}
    if eligible_at is not None:
        extra["eligible_at"] = eligible_at.decode()
    if traceparent is not None:
        extra["traceparent"] = traceparent.decode()
    if alone is not None:
        extra["alone"] = alone.decode()
    # Every field of Job, in its order, set at once: the frozen dataclass's __init__ assigns
    # each through object.__setattr__, 3.3 us of a claim's 4.4 (tests/engine/test_replies.py
    # holds this to Job's fields, and to Job having no __post_init__ it would skip).
    job = _new_job(Job)
    job.__dict__.update(
        {
            "id": job_id.decode() if job_id else "",
            "type": job_type.decode() if job_type else "",
            "status": JobState.PROCESSING,
            "priority": int(priority) if priority is not None else 0,
            "max_retries": (int(max_retries) if max_retries is not None else 0)
            or DEFAULT_MAX_RETRIES,
            "attempts": int(attempts) if attempts is not None else 0,
            "recoveries": int(recoveries) if recoveries is not None else 0,
            "payload_json": payload.decode() if payload else "{}",
            "created_at": int(created_at) if created_at is not None else 0,
            "updated_at": started,
            "token": int(token) if token is not None else 0,
            "scheduled_at": int(scheduled_at) if scheduled_at is not None else None,
            "started_at": started,
            "finished_at": None,
            "next_retry_at": None,
            "last_error": None,
            "traceback": None,
            "result_json": None,
            "timeout": float(timeout) if timeout is not None else None,
            "worker_id": worker_id,
            "cancel_requested_at": None,
            "cancel_requested_by": None,
            "queue": queue,
            "extra": extra,
        }
    )
    return job


_new_job = object.__new__


def job_from_fields(raw: dict[bytes, bytes], queue: str) -> Job:
    job = Job.from_hash(raw, queue=queue)
    for name in EXTRA_FIELDS:
        value = raw.get(name.encode())
        if value is not None:
            job.extra[name] = value.decode()
    return job


def ids(values: Iterable[bytes]) -> list[str]:
    return [v.decode() for v in values]


def enqueue_result(reply: list[Any]) -> EnqueueResult:
    code = Code(reply[0])
    if code is Code.CONFLICT:
        raise JobIdConflict(reply[1].decode())
    return EnqueueResult(
        job_id=reply[1].decode(),
        status=JobState(reply[2].decode()),
        created=code is Code.DONE,
        created_at_ms=int(reply[3]),
        existed=len(reply) > 4 and reply[4] == 1,
        first_in_queue=len(reply) > 5 and reply[5] == 1,
    )


def checked(reply: list[Any]) -> list[Any]:
    """Raise the API error a script's negative code stands for; return the reply otherwise."""
    code = Code(reply[0])
    if code is Code.NOT_FOUND:
        raise JobNotFound()
    if code is Code.WRONG_STATE:
        raise WrongState(reply[1].decode())
    return reply
