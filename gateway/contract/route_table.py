"""The gateway's routes, declared once: every operation, its inputs and every answer it gives.

gateway/openapi.py generates the document's paths from this table; the models it names are
the ones the gateway validates with. This module holds the jobs' routes (enqueue, read,
cancel, list, the dead-letter queue) and the event stream; gateway/contract/queue_routes.py
the queues', limits', hosts', schedules' and operations' routes.
"""

from __future__ import annotations

from typing import Any

from gateway.contract import queue_routes
from gateway.contract.requests import BatchRequest, CancelRequest, EnqueueRequest
from gateway.contract.responses import BulkResult, DeadPage, History, Job, JobPage, Jobs
from gateway.contract.route_params import (
    Answer,
    Operation,
    Param,
    retrying,
    use,
    whole,
)
from gateway.contract.schema import event_data
from gateway.contract.types import JobId
from gateway.events_api import KEEPALIVE_SECONDS
from gateway.inputs import MAX_BATCH
from shared.engine.events import EVENT_CURSOR_PATTERN
from shared.model.jobs import TYPE_PATTERN
from shared.model.queues import QUEUE_PATTERN
from shared.read import bulk, listing

BODY_ERRORS = ("BadRequest", "Unauthorized", "TooLarge", "Unsupported", "Unavailable")
BY_ID = ("BadRequest", "Unauthorized", "NotFound", "Unavailable")
READ_ERRORS = ("BadRequest", "Unauthorized", "Unavailable")
JOB_OK = Answer("The job.", Job)
# Durable mode (TASKFORGE_WAIT_REPLICAS): the same 503, or one a program can tell by its code.
ENQUEUE_UNAVAILABLE = retrying(
    "Redis is unreachable; or, in durable mode, the job is on the primary but fewer than "
    "TASKFORGE_WAIT_REPLICAS replicas confirmed it in time: code not_replicated, job_id "
    "(job_ids for a batch), replicas, wanted. Resend with the same Idempotency-Key after "
    "Retry-After seconds: it makes no second job."
)


def _enqueue() -> tuple[Operation, ...]:
    return (
        Operation(
            "post",
            "/enqueue",
            "enqueue",
            "Create a job.",
            {
                "201": Answer("Created; Location: /jobs/<id>.", Job, headers={"Location": str}),
                "200": Answer(
                    "The job this Idempotency-Key, or the body's own id, already created (the "
                    "same body), as it is now.",
                    Job,
                ),
                **use(*BODY_ERRORS),
                "409": Answer(
                    "The Idempotency-Key was already used with another body (another job, or "
                    "a batch), or the body's id already names a job with another body (or in "
                    "another queue); the message and job_id name that job."
                ),
                "503": ENQUEUE_UNAVAILABLE,
            },
            params=("IdempotencyKey",),
            body=EnqueueRequest,
        ),
        Operation(
            "post",
            "/enqueue/batch",
            "enqueueBatch",
            f"Create 1 to {MAX_BATCH} jobs, all or none.",
            {
                "201": Answer("The jobs, in the order given.", Jobs),
                "200": Answer(
                    "The jobs this Idempotency-Key already created, as they are now, in order; "
                    "or a batch not all of whose jobs this request created (their own ids "
                    "named jobs already there, with the same bodies).",
                    Jobs,
                ),
                **use(*BODY_ERRORS),
                "409": Answer(
                    "The Idempotency-Key was already used with another body (another batch, "
                    "or a single enqueue), the message and job_id naming its first job; or a "
                    "job's id already names a job with another body (or in another queue), "
                    "named by job_id: nothing was enqueued."
                ),
                "503": ENQUEUE_UNAVAILABLE,
            },
            params=("IdempotencyKey",),
            body=BatchRequest,
        ),
    )


def _jobs() -> tuple[Operation, ...]:
    return (
        Operation(
            "get",
            "/jobs/{job_id}",
            "getJob",
            "Read one job; with wait, once it is finished or when the wait ends.",
            {
                "200": JOB_OK,
                **use(*BY_ID),
                "503": retrying(
                    "Redis is unreachable, or (with wait) this gateway process already serves "
                    "TASKFORGE_EVENTS_STREAMS event streams and waits; try again after "
                    "Retry-After seconds."
                ),
            },
            params=("JobId", "Wait"),
        ),
        Operation(
            "post",
            "/jobs/{job_id}/cancel",
            "cancelJob",
            "Cancel a pending, scheduled or retrying job (200); ask for a processing job to be "
            "stopped (202: its worker gets SIGTERM, then SIGKILL after WORKER_CANCEL_GRACE, "
            "and the job ends canceled unless it completes first).",
            {
                "200": Answer("Canceled (or already canceled).", Job),
                "202": Answer(
                    "Still processing: the request is recorded (cancel_requested_at, "
                    "cancel_requested_by); a repeat changes nothing. Poll GET /jobs/<id> "
                    "(wait) for its end.",
                    Job,
                ),
                **use(*BODY_ERRORS[:2], "NotFound", "TooLarge", "Unsupported", "Unavailable"),
                "409": Answer("The job is completed or dead."),
            },
            params=("JobId",),
            body=CancelRequest,
            body_required=False,
        ),
        Operation(
            "get",
            "/jobs/{job_id}/history",
            "getJobHistory",
            "Read what happened to one job: its transitions, oldest first.",
            {"200": Answer("The job's transitions, oldest first.", History), **use(*BY_ID)},
            params=("JobId",),
        ),
        Operation(
            "get",
            "/jobs",
            "listJobs",
            "Page through one state's jobs: pending in claim order, scheduled and retrying "
            "next due first, the others newest first; without state, every state's, in "
            "lifecycle order.",
            {"200": Answer("A page of jobs in the listing's order.", JobPage), **use(*READ_ERRORS)},
            params=("State", "Queue", "JobType", "ListLimit", "ListCursor"),
        ),
    )


def _dlq() -> tuple[Operation, ...]:
    done = Answer("What was done, what was skipped, where to go on.", BulkResult)

    def bulk_action(op_id: str, path: str, verb: str) -> Operation:
        summary = (
            f"{verb} dead jobs: the ids given, or up to limit (at most {bulk.MAX_LIMIT}) "
            "matching a filter."
        )
        answers = {"200": done, **use(*BODY_ERRORS)}
        return Operation("post", path, op_id, summary, answers, body="BulkRequest")

    return (
        Operation(
            "get",
            "/dlq",
            "listDead",
            "Page through dead jobs, newest first: of every queue while at most "
            f"{listing.EVERY_QUEUE_CAP} are listed, else of the queues GET /jobs lists "
            "without queue (every_queue: false).",
            {"200": Answer("A page of dead jobs.", DeadPage), **use(*READ_ERRORS)},
            params=("Limit", "Cursor"),
        ),
        bulk_action("replayDeadMany", "/dlq/retry", "Replay"),
        bulk_action("purgeDeadMany", "/dlq/purge", "Delete"),
        Operation(
            "post",
            "/dlq/{job_id}/retry",
            "replayDead",
            "Replay a dead job (attempts back to 0).",
            {"200": JOB_OK, **use(*BY_ID, "Conflict")},
            params=("JobId",),
        ),
        Operation(
            "delete",
            "/dlq/{job_id}",
            "purgeDead",
            "Delete a dead job.",
            {"204": Answer("Deleted.", None), **use(*BY_ID, "Conflict")},
            params=("JobId",),
        ),
    )


# Empty: as if absent (the gateway reads an empty Last-Event-ID as none), from now.
EVENT_CURSOR = rf"^({EVENT_CURSOR_PATTERN})?$"
EVENT_CURSOR_DOC = (
    "The id of the last message received: resume right after it. Its size does not grow "
    "with the number of queues: on one Redis the id of the one events stream, <ms>-<seq> "
    "(exact); on a Redis Cluster t<ms> followed by at most 32 ,<queue or *>=<seq> (exact but "
    "for an entry stamped earlier yet written later: docs/EVENTS.md)."
)


def _event_message() -> dict[str, Any]:
    """Return the schema of one message with data, as an EventSource reads it: OpenAPI 3.1
    has no `itemSchema` (3.2), and tools read a stream's `schema` as one message's."""
    return {
        "type": "object",
        "required": ["event", "data"],
        "properties": {
            "id": {"type": "string", "pattern": EVENT_CURSOR},
            "event": {"type": "string"},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": event_data(),
            },
            "retry": {"type": "integer"},
        },
    }


def _events() -> Operation:
    queues = f"{QUEUE_PATTERN.pattern}(,{QUEUE_PATTERN.pattern})*"
    cursor = whole(f"({EVENT_CURSOR_PATTERN})?")
    stream = Answer(
        "A text/event-stream that stays open: first `retry: 2000` and the cursor of now (or "
        "of Last-Event-ID); then one message per event (`id`: the cursor, `event`: its name, "
        "`data`: JSON {event, job_id, type, queue, attempt, worker, host, reason (held: "
        "concurrency or rate), at}, absent fields left out), `event: gap` when a stream "
        "dropped entries the client had not read (data: queue on a Cluster, from, first), and "
        "a `: keepalive` comment every TASKFORGE_EVENTS_KEEPALIVE "
        f"({KEEPALIVE_SECONDS:g} s by default) while idle. A client that reads nothing for "
        "twice that long is dropped. docs/EVENTS.md.",
        media="text/event-stream",
        schema=_event_message(),
    )
    busy = retrying(
        "Redis is unreachable, or this gateway process already serves "
        "TASKFORGE_EVENTS_STREAMS streams; try again after Retry-After seconds."
    )
    return Operation(
        "get",
        "/events",
        "streamEvents",
        "Follow job, queue and workerd host events live (Server-Sent Events).",
        {"200": stream, **use("BadRequest", "Unauthorized"), "503": busy},
        params=(
            Param(
                "queue",
                "query",
                list[whole(queues)],
                "Only these queues (repeat it, or a comma list); absent: every queue, new ones "
                "included.",
            ),
            Param(
                "type",
                "query",
                whole(TYPE_PATTERN.pattern),
                "Only jobs of this type (and no host events).",
            ),
            Param("job", "query", JobId, "Only this job's events (and no host events)."),
            Param(
                "last_event_id",
                "query",
                cursor,
                f"{EVENT_CURSOR_DOC} For a first connection, which cannot send headers; the "
                "Last-Event-ID header wins.",
            ),
            Param("Last-Event-ID", "header", cursor, EVENT_CURSOR_DOC),
        ),
    )


OPERATIONS: tuple[Operation, ...] = (
    *_enqueue(),
    *_jobs(),
    *_dlq(),
    *queue_routes.operations(READ_ERRORS, BODY_ERRORS),
    _events(),
)
