"""The OpenAPI 3.1 document of the gateway: every route, its inputs and every answer.

Its schemas are generated from the contract's models (gateway/contract); this module adds
the routes: their parameters, summaries and status codes. The document states what the server
enforces, no more and no less: tests/gateway/test_schemathesis.py fuzzes real gunicorn from it
and fails on any disagreement either way.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

from gateway import openapi_schedules, queue_page
from gateway.body import MAX_BODY_BYTES
from gateway.contract.schema import event_data
from gateway.contract.schema import schemas as contract_schemas
from gateway.events_api import KEEPALIVE_SECONDS
from gateway.inputs import DLQ_LIMIT_RANGE, MAX_BATCH
from gateway.waiting import MAX_WAIT_SECONDS, WAIT_PATTERN
from shared.engine.events import EVENT_CURSOR_PATTERN
from shared.engine.queries import CURSOR_PATTERN
from shared.model.jobs import (
    TYPE_PATTERN,
    JobState,
)
from shared.model.queues import QUEUE_PATTERN
from shared.read import bulk, listing, listing_states, throughput
from shared.read.hosts import HOST_NAME_PATTERN

JOB_ID = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-4[0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$"
TIMESTAMP = {"type": "string", "format": "date-time"}
STATES = [str(state) for state in JobState]
QUEUE_NAME = {"type": "string", "pattern": f"^{QUEUE_PATTERN.pattern}$", "maxLength": 64}
HOST_EXAMPLE = "worker-1-4242"  # a registry name as GET /workers shows one


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(_ref("Error"), description)


def _parameters() -> dict[str, Any]:
    low, high = DLQ_LIMIT_RANGE
    return {
        "JobId": {
            "name": "job_id",
            "in": "path",
            "required": True,
            "schema": {"type": "string", "pattern": JOB_ID},
        },
        "Limit": {
            "name": "limit",
            "in": "query",
            "schema": {"type": "integer", "minimum": low, "maximum": high, "default": high},
        },
        "Wait": {
            "name": "wait",
            "in": "query",
            "description": "Answer once the job is completed, dead or canceled, or when this "
            "much time has passed (then with the job as it is): seconds (2.5) or a duration "
            f"(500ms, 30s, 1m), at most {MAX_WAIT_SECONDS} s; ask again to wait longer. "
            "Absent or 0: answer at once. docs/API.md.",
            "schema": {"type": "string", "pattern": WAIT_PATTERN, "examples": ["30s"]},
        },
        "Cursor": {
            "name": "cursor",
            "in": "query",
            "description": "The next_cursor of the previous page, as it was returned.",
            "schema": {"type": "string", "pattern": f"^{CURSOR_PATTERN.pattern}$"},
        },
        "QueueName": {
            "name": "name",
            "in": "path",
            "required": True,
            "schema": {"type": "string", "pattern": f"^{QUEUE_PATTERN.pattern}$"},
            "example": "critical",
        },
        "QueueLimit": {
            "name": "limit",
            "in": "query",
            "description": "Queues per page: every queue is listed (and the totals read live) "
            "while they fit; past that, about this many per page.",
            "schema": {
                "type": "integer",
                "minimum": 1,
                "maximum": queue_page.MAX_LIMIT,
                "default": queue_page.DEFAULT_LIMIT,
            },
        },
        "QueueCursor": {
            "name": "cursor",
            "in": "query",
            "description": "The next_cursor of the previous page, as it was returned.",
            "schema": {"type": "string", "pattern": queue_page.CURSOR_PATTERN},
        },
        "QueueSearch": {
            "name": "q",
            "in": "query",
            "description": "Only queues whose name contains this.",
            "schema": {"type": "string", "minLength": 1, "maxLength": queue_page.SEARCH_MAX},
        },
        "TypeName": {
            "name": "job_type",
            "in": "path",
            "required": True,
            "schema": {"type": "string", "pattern": f"^{TYPE_PATTERN.pattern}$"},
            "example": "generate_pdf",
        },
        "HostName": {
            "name": "name",
            "in": "path",
            "required": True,
            "description": "A workerd host's registry name, <hostname>-<pid> (GET /workers).",
            "schema": {"type": "string", "pattern": f"^{HOST_NAME_PATTERN.pattern}$"},
            "example": HOST_EXAMPLE,
        },
        "IdempotencyKey": {
            "name": "Idempotency-Key",
            "in": "header",
            "description": (
                "Same key and body within the key's TTL: 200 with the job (or a batch's jobs) "
                "the first request created; the same key with another body: 409."
            ),
            "schema": {"type": "string", "pattern": "^[\\x21-\\x7e]{1,255}$"},
        },
    }


def _listing_parameters() -> dict[str, Any]:
    low, high = listing.LIMIT_RANGE
    return {
        "State": {
            "name": "state",
            "in": "query",
            "description": "The state to list, in its own order. Absent: every state, in "
            "lifecycle order (processing, pending, scheduled, retrying, completed, dead, "
            "canceled), each in its own order; each job's status says its state.",
            "schema": {"type": "string", "enum": STATES},
        },
        "Queue": {
            "name": "queue",
            "in": "query",
            "description": "One queue, any listed one. Absent: all queues while there are "
            f"at most {listing.EVERY_QUEUE_CAP}; past that a bounded set (the reply's "
            "every_queue is false): the queues hosts serve and, for a listing, the busiest "
            "(and the soonest due, for scheduled). docs/API.md.",
            "schema": {"type": "string", "pattern": f"^{QUEUE_PATTERN.pattern}$"},
        },
        "JobType": {
            "name": "type",
            "in": "query",
            "description": f"Only jobs of this type; a page examines at most "
            f"{listing.TYPE_SCAN_MAX} entries per queue, so it may hold fewer than limit jobs "
            "(even none) and still give a next_cursor.",
            "schema": {"type": "string", "pattern": f"^{TYPE_PATTERN.pattern}$"},
        },
        "ListLimit": {
            "name": "limit",
            "in": "query",
            "schema": {
                "type": "integer",
                "minimum": low,
                "maximum": high,
                "default": listing.DEFAULT_LIMIT,
            },
        },
        "Minutes": {
            "name": "minutes",
            "in": "query",
            "description": "How many minutes, the current one last.",
            "schema": {
                "type": "integer",
                "minimum": 1,
                "maximum": throughput.MAX_MINUTES,
                "default": throughput.MAX_MINUTES,
            },
        },
        "ListCursor": {
            "name": "cursor",
            "in": "query",
            "description": "The next_cursor of the previous page of the same listing, as "
            "returned (opaque).",
            "schema": {
                "type": "string",
                "pattern": f"^(?:{listing_states.PLACE_PATTERN.pattern})$",
            },
        },
    }


def _responses() -> dict[str, Any]:
    return {
        "BadRequest": _error("Malformed or invalid input; the message says what."),
        "Unauthorized": {
            **_error("Missing or wrong bearer token (when TASKFORGE_API_TOKEN is set)."),
            "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}},
        },
        "TooManyFailures": {
            **_error(
                "Too many failed authentications from this client address (gateway/lockout.py): "
                "refused, right token or not, for Retry-After seconds."
            ),
            "headers": {"Retry-After": {"schema": {"type": "integer"}}},
        },
        "NotFound": _error('No such job: {"error": "job not found"}.'),
        "HostNotFound": _error(
            'No live workerd host has that name: {"error": "workerd host not found"}.'
        ),
        "Conflict": _error("The job is not in a state this action starts from."),
        "QueueNotFound": _error('No queue of that name is listed: {"error": "queue not found"}.'),
        "QueueKept": _error(
            "The queue is kept: it holds jobs (counts in `jobs`), is paused or limited, a "
            "workerd host serves it (`served_by`), or it is the default queue."
        ),
        "TooLarge": _error(f"Body over {MAX_BODY_BYTES} bytes; refused without reading it."),
        "Unsupported": _error("A Content-Encoding other than identity."),
        "Unavailable": {
            **_error("Redis is unreachable; try again after Retry-After seconds."),
            "headers": {"Retry-After": {"schema": {"type": "integer"}}},
        },
    }


def _use(*names: str) -> dict[str, Any]:
    codes = {
        "BadRequest": "400",
        "Unauthorized": "401",
        "NotFound": "404",
        "HostNotFound": "404",
        "Conflict": "409",
        "QueueNotFound": "404",
        "QueueKept": "409",
        "TooLarge": "413",
        "Unsupported": "415",
        "Unavailable": "503",
    }
    return {codes[n]: {"$ref": f"#/components/responses/{n}"} for n in names}


def _body(schema: str) -> dict[str, Any]:
    # Any Content-Type is read as JSON; application/json is what clients should send.
    return {"required": True, "content": {"application/json": {"schema": _ref(schema)}}}


def _param(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/parameters/{name}"}


EVERY = {
    "type": "boolean",
    "description": "true: every queue was read (a queue was named, or all fit in a page); "
    "false: a bounded set of them (docs/API.md, the queue parameter).",
}
QUEUE_PAGE_PARAMS = [_param("QueueLimit"), _param("QueueCursor"), _param("QueueSearch")]
JOB_OK = _json(_ref("Job"), "The job.")
BODY_ERRORS = ("BadRequest", "Unauthorized", "TooLarge", "Unsupported", "Unavailable")
BY_ID = ("BadRequest", "Unauthorized", "NotFound", "Unavailable")


def _operation(op_id: str, summary: str, responses: dict[str, Any], **extra: Any) -> dict:
    return {"operationId": op_id, "summary": summary, **extra, "responses": responses}


def _job_paths() -> dict[str, Any]:
    created = {
        **_json(_ref("Job"), "Created; Location: /jobs/<id>."),
        "headers": {"Location": {"schema": {"type": "string"}}},
    }
    again = _json(_ref("Job"), "The job this Idempotency-Key already created.")
    batch = _json(_ref("Jobs"), "The jobs, in the order given.")
    batch_again = _json(
        _ref("Jobs"), "The jobs this Idempotency-Key already created, as they are now, in order."
    )
    key_conflict = _error(
        "The Idempotency-Key was already used with another body (another batch, or a single "
        "enqueue); the message and job_id name its first job."
    )
    single_key_conflict = _error(
        "The Idempotency-Key was already used with another body (another job, or a batch); "
        "the message and job_id name its first job."
    )
    # Durable mode (TASKFORGE_WAIT_REPLICAS): the same 503, or one a program can tell by its code.
    enqueue_unavailable = {
        **_error(
            "Redis is unreachable; or, in durable mode, the job is on the primary but fewer "
            "than TASKFORGE_WAIT_REPLICAS replicas confirmed it in time: code not_replicated, "
            "job_id (job_ids for a batch), replicas, wanted. Resend with the same "
            "Idempotency-Key after Retry-After seconds: it makes no second job."
        ),
        "headers": {"Retry-After": {"schema": {"type": "integer"}}},
    }
    waits_busy = {
        **_error(
            "Redis is unreachable, or (with wait) this gateway process already serves "
            "TASKFORGE_EVENTS_STREAMS event streams and waits; try again after Retry-After "
            "seconds."
        ),
        "headers": {"Retry-After": {"schema": {"type": "integer"}}},
    }
    return {
        "/enqueue": {
            "post": _operation(
                "enqueue",
                "Create a job.",
                {
                    "201": created,
                    "200": again,
                    **_use(*BODY_ERRORS),
                    "409": single_key_conflict,
                    "503": enqueue_unavailable,
                },
                parameters=[_param("IdempotencyKey")],
                requestBody=_body("EnqueueRequest"),
            )
        },
        "/enqueue/batch": {
            "post": _operation(
                "enqueueBatch",
                f"Create 1 to {MAX_BATCH} jobs, all or none.",
                {
                    "201": batch,
                    "200": batch_again,
                    **_use(*BODY_ERRORS),
                    "409": key_conflict,
                    "503": enqueue_unavailable,
                },
                parameters=[_param("IdempotencyKey")],
                requestBody=_body("BatchRequest"),
            )
        },
        "/jobs/{job_id}": {
            "get": _operation(
                "getJob",
                "Read one job; with wait, once it is finished or when the wait ends.",
                {"200": JOB_OK, **_use(*BY_ID), "503": waits_busy},
                parameters=[_param("JobId"), _param("Wait")],
            )
        },
        "/jobs/{job_id}/cancel": {
            "post": _operation(
                "cancelJob",
                "Cancel a pending, scheduled or retrying job (200); ask for a processing job to "
                "be stopped (202: its worker gets SIGTERM, then SIGKILL after "
                "WORKER_CANCEL_GRACE, and the job ends canceled unless it completes first).",
                {
                    "200": _json(_ref("Job"), "Canceled (or already canceled)."),
                    "202": _json(
                        _ref("Job"),
                        "Still processing: the request is recorded (cancel_requested_at, "
                        "cancel_requested_by); a repeat changes nothing. Poll GET /jobs/<id> "
                        "(wait) for its end.",
                    ),
                    **_use(*BODY_ERRORS[:2], "NotFound", "TooLarge", "Unsupported", "Unavailable"),
                    "409": _error("The job is completed or dead."),
                },
                parameters=[_param("JobId")],
                requestBody={
                    "required": False,
                    "content": {"application/json": {"schema": _ref("CancelRequest")}},
                },
            )
        },
    }


def _history_paths() -> dict[str, Any]:
    kept = _json(_ref("History"), "The job's transitions, oldest first.")
    return {
        "/jobs/{job_id}/history": {
            "get": _operation(
                "getJobHistory",
                "Read what happened to one job: its transitions, oldest first.",
                {"200": kept, **_use(*BY_ID)},
                parameters=[_param("JobId")],
            )
        },
    }


def _listing_paths() -> dict[str, Any]:
    page = _json(_ref("JobPage"), "A page of jobs in the listing's order.")
    names = ("State", "Queue", "JobType", "ListLimit", "ListCursor")
    return {
        "/jobs": {
            "get": _operation(
                "listJobs",
                "Page through one state's jobs: pending in claim order, scheduled and retrying "
                "next due first, the others newest first; without state, every state's, in "
                "lifecycle order.",
                {"200": page, **_use("BadRequest", "Unauthorized", "Unavailable")},
                parameters=[_param(name) for name in names],
            )
        },
    }


def _dlq_paths() -> dict[str, Any]:
    page = _json(_ref("DeadPage"), "A page of dead jobs.")
    done = _json(_ref("BulkResult"), "What was done, what was skipped, where to go on.")
    return {
        "/dlq": {
            "get": _operation(
                "listDead",
                "Page through dead jobs, newest first: of every queue while at most "
                f"{listing.EVERY_QUEUE_CAP} are listed, else of the queues GET /jobs lists "
                "without queue (every_queue: false).",
                {"200": page, **_use("BadRequest", "Unauthorized", "Unavailable")},
                parameters=[_param("Limit"), _param("Cursor")],
            )
        },
        "/dlq/retry": {
            "post": _operation(
                "replayDeadMany",
                f"Replay dead jobs: the ids given, or up to limit (at most {bulk.MAX_LIMIT}) "
                "matching a filter.",
                {"200": done, **_use(*BODY_ERRORS)},
                requestBody=_body("BulkRequest"),
            )
        },
        "/dlq/purge": {
            "post": _operation(
                "purgeDeadMany",
                f"Delete dead jobs: the ids given, or up to limit (at most {bulk.MAX_LIMIT}) "
                "matching a filter.",
                {"200": done, **_use(*BODY_ERRORS)},
                requestBody=_body("BulkRequest"),
            )
        },
        "/dlq/{job_id}/retry": {
            "post": _operation(
                "replayDead",
                "Replay a dead job (attempts back to 0).",
                {"200": JOB_OK, **_use(*BY_ID, "Conflict")},
                parameters=[_param("JobId")],
            )
        },
        "/dlq/{job_id}": {
            "delete": _operation(
                "purgeDead",
                "Delete a dead job.",
                {"204": {"description": "Deleted."}, **_use(*BY_ID, "Conflict")},
                parameters=[_param("JobId")],
            )
        },
    }


def _ops_paths() -> dict[str, Any]:
    stats = _json(_ref("Stats"), "Counts read from Redis.")
    text = {"description": "Metrics.", "content": {"text/plain": {"schema": {"type": "string"}}}}
    openapi = _json({"type": "object"}, "The OpenAPI document.")
    probe_down = _use("Unavailable")
    return {
        "/stats": {
            "get": _operation(
                "stats",
                "Jobs per state and the oldest pending job's age, in all and for a page of "
                "queues; workerd hosts and processes.",
                {"200": stats, **_use("BadRequest", "Unauthorized", "Unavailable")},
                parameters=QUEUE_PAGE_PARAMS,
            )
        },
        "/stats/throughput": {
            "get": _operation(
                "statsThroughput",
                "Completions and failed executions per minute over the last hour (or fewer "
                "minutes), in all or for one queue.",
                {
                    "200": _json(_ref("Throughput"), "One point per minute."),
                    **_use("BadRequest", "Unauthorized", "Unavailable"),
                },
                parameters=[_param("Queue"), _param("Minutes")],
            )
        },
        "/metrics": {
            "get": _operation(
                "metrics",
                "Prometheus text exposition.",
                {"200": text, **_use("Unauthorized", "Unavailable")},
            )
        },
        "/health": {
            "get": _operation(
                "health",
                "Liveness: Redis answers.",
                {"200": _json(_ref("Probe"), "Healthy."), **probe_down},
                security=[],
            )
        },
        "/ready": {
            "get": _operation(
                "ready",
                "Readiness: Redis answers and holds the engine's scripts.",
                {"200": _json(_ref("Probe"), "Ready."), **probe_down},
                security=[],
            )
        },
        "/openapi.json": {
            "get": _operation("openapi", "This document.", {"200": openapi, **_use("Unauthorized")})
        },
    }


def _limits_paths() -> dict[str, Any]:
    state = _json(_ref("Limits"), "The queue's limits as they are now, with their use.")
    by_name = ("BadRequest", "Unauthorized", "Unavailable")
    changed = {"200": state, **_use(*BODY_ERRORS, "Conflict")}
    conflict = "409: the limits kept changing under this request (another change won); retry."
    return {
        "/limits": {
            "get": _operation(
                "listLimits",
                "A page of the queues that have limits (every one while they fit in limit): "
                "their own and their job types', running and held.",
                {
                    "200": _json(_ref("LimitsList"), "Queues with limits, by name."),
                    **_use("BadRequest", "Unauthorized", "Unavailable"),
                },
                parameters=QUEUE_PAGE_PARAMS,
            )
        },
        "/queues/{name}/limits": {
            "get": _operation(
                "getLimits",
                "One queue's limits and their use (all null when it has none).",
                {"200": state, **_use(*by_name)},
                parameters=[_param("QueueName")],
            ),
            "put": _operation(
                "putLimits",
                "Set a queue's own limits; with types, replace every job type's too "
                "(without, they stay). " + conflict,
                changed,
                parameters=[_param("QueueName")],
                requestBody=_body("LimitsInput"),
            ),
            "delete": _operation(
                "clearLimits",
                "Remove every limit of a queue; held jobs become claimable at once.",
                {"200": state, **_use(*by_name, "Conflict")},
                parameters=[_param("QueueName")],
            ),
        },
        "/queues/{name}/limits/types/{job_type}": {
            "put": _operation(
                "putTypeLimit",
                "Set one job type's limits in a queue; the others stay. " + conflict,
                changed,
                parameters=[_param("QueueName"), _param("TypeName")],
                requestBody=_body("TypeLimitInput"),
            ),
            "delete": _operation(
                "clearTypeLimit",
                "Remove one job type's limits in a queue.",
                {"200": state, **_use(*by_name, "Conflict")},
                parameters=[_param("QueueName"), _param("TypeName")],
            ),
        },
    }


def _queue_paths() -> dict[str, Any]:
    queue = _json(_ref("Queue"), "The queue as it is now.")
    hosts = _json(_ref("Hosts"), "Every live workerd host, by name.")
    asked = _json(_ref("Host"), "Asked; the host applies it at its next heartbeat (within 2 s).")
    by_name = ("BadRequest", "Unauthorized", "Unavailable")
    by_host = (*by_name, "HostNotFound")
    return {
        "/queues": {
            "get": _operation(
                "listQueues",
                "Every queue, or a page of them: jobs per state, paused, oldest pending "
                "age, the last minute.",
                {
                    "200": _json(_ref("Queues"), "A page of queues, by name."),
                    **_use("BadRequest", "Unauthorized", "Unavailable"),
                },
                parameters=QUEUE_PAGE_PARAMS,
            )
        },
        "/queues/{name}": {
            "delete": _operation(
                "deleteQueue",
                "Delete an empty queue: no pending, held, scheduled, retrying, processing or "
                "dead job, not paused, not limited, served by no workerd host. Its completed "
                "and canceled jobs and its events go with it.",
                {
                    "204": {"description": "Deleted."},
                    **_use(*by_name, "QueueNotFound", "QueueKept"),
                },
                parameters=[_param("QueueName")],
            )
        },
        "/queues/{name}/pause": {
            "post": _operation(
                "pauseQueue",
                "Pause a queue: jobs still arrive, no worker claims them until resumed.",
                {"200": queue, **_use(*by_name)},
                parameters=[_param("QueueName")],
            )
        },
        "/queues/{name}/resume": {
            "post": _operation(
                "resumeQueue",
                "Resume a paused queue.",
                {"200": queue, **_use(*by_name)},
                parameters=[_param("QueueName")],
            )
        },
        **_limits_paths(),
        "/workers": {
            "get": _operation(
                "listWorkers",
                "Every live workerd host: workers and what each runs, quiet, queues served.",
                {"200": hosts, **_use("Unauthorized", "Unavailable")},
            )
        },
        "/workers/{name}/quiet": {
            "post": _operation(
                "quietWorkers",
                "Quiet a workerd host: running jobs finish, nothing more is claimed.",
                {"202": asked, **_use(*by_host)},
                parameters=[_param("HostName")],
            )
        },
        "/workers/{name}/resume": {
            "post": _operation(
                "resumeWorkers",
                "Let a quiet workerd host claim again.",
                {"202": asked, **_use(*by_host)},
                parameters=[_param("HostName")],
            )
        },
    }


def _event_paths() -> dict[str, Any]:
    queues = f"{QUEUE_PATTERN.pattern}(,{QUEUE_PATTERN.pattern})*"
    # Empty: as if absent (the gateway reads an empty Last-Event-ID as none), from now.
    cursor = rf"^({EVENT_CURSOR_PATTERN})?$"
    cursor_doc = (
        "The id of the last message received: resume right after it. Its size does not grow "
        "with the number of queues: on one Redis the id of the one events stream, <ms>-<seq> "
        "(exact); on a Redis Cluster t<ms> followed by at most 32 ,<queue or *>=<seq> "
        "(exact but for an entry stamped earlier yet written later: docs/EVENTS.md)."
    )
    stream = {
        "description": "A text/event-stream that stays open: first `retry: 2000` and the "
        "cursor of now (or of Last-Event-ID); then one message per event (`id`: the cursor, "
        "`event`: its name, `data`: JSON {event, job_id, type, queue, attempt, worker, host, "
        "reason (held: concurrency or rate), at}, absent fields left out), `event: gap` when a stream dropped entries the client "
        "had not read (data: queue on a Cluster, from, first), and a `: keepalive` comment every "
        f"TASKFORGE_EVENTS_KEEPALIVE ({KEEPALIVE_SECONDS:g} s by default) while idle. A client "
        "that reads nothing for twice that long is dropped. docs/EVENTS.md.",
        "content": {"text/event-stream": {"schema": _event_message(cursor)}},
    }
    busy = {
        **_error(
            "Redis is unreachable, or this gateway process already serves "
            "TASKFORGE_EVENTS_STREAMS streams; try again after Retry-After seconds."
        ),
        "headers": {"Retry-After": {"schema": {"type": "integer"}}},
    }
    return {
        "/events": {
            "get": _operation(
                "streamEvents",
                "Follow job, queue and workerd host events live (Server-Sent Events).",
                {"200": stream, **_use("BadRequest", "Unauthorized"), "503": busy},
                parameters=[
                    {
                        "name": "queue",
                        "in": "query",
                        "description": "Only these queues (repeat it, or a comma list); "
                        "absent: every queue, new ones included.",
                        "schema": {
                            "type": "array",
                            "items": {"type": "string", "pattern": f"^{queues}$"},
                        },
                    },
                    {
                        "name": "type",
                        "in": "query",
                        "description": "Only jobs of this type (and no host events).",
                        "schema": {"type": "string", "pattern": f"^{TYPE_PATTERN.pattern}$"},
                    },
                    {
                        "name": "job",
                        "in": "query",
                        "description": "Only this job's events (and no host events).",
                        "schema": {"type": "string", "pattern": JOB_ID},
                    },
                    {
                        "name": "last_event_id",
                        "in": "query",
                        "description": f"{cursor_doc} For a first connection, which cannot "
                        "send headers; the Last-Event-ID header wins.",
                        "schema": {"type": "string", "pattern": cursor},
                    },
                    {
                        "name": "Last-Event-ID",
                        "in": "header",
                        "description": cursor_doc,
                        "schema": {"type": "string", "pattern": cursor},
                    },
                ],
            )
        },
    }


def _event_message(cursor: str) -> dict[str, Any]:
    """Return the schema of one message with data, as an EventSource reads it: OpenAPI 3.1
    has no `itemSchema` (3.2), and tools read a stream's `schema` as one message's."""
    return {
        "type": "object",
        "required": ["event", "data"],
        "properties": {
            "id": {"type": "string", "pattern": cursor},
            "event": {"type": "string"},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": event_data(),
            },
            "retry": {"type": "integer"},
        },
    }


def _without_auth(doc: dict[str, Any]) -> dict[str, Any]:
    """Return `doc` for a gateway without a token: no security requirement, no 401 or 429."""
    doc = copy.deepcopy(doc)
    del doc["security"], doc["components"]["securitySchemes"]
    del doc["components"]["responses"]["Unauthorized"]
    del doc["components"]["responses"]["TooManyFailures"]
    for item in doc["paths"].values():
        for operation in item.values():
            operation.pop("security", None)
            operation["responses"].pop("401", None)
            operation["responses"].pop("429", None)
    return doc


@cache
def document(auth: bool) -> dict[str, Any]:
    """Return the OpenAPI document of a gateway with or without a token (built once each).

    An open gateway's document names no security scheme: a client, or a fuzzer, told to send
    a token the server never checks would be told something untrue.
    """
    doc = _with_lockout(_document())
    return doc if auth else _without_auth(doc)


def _with_lockout(doc: dict[str, Any]) -> dict[str, Any]:
    """Give every operation that may answer 401 its 429: a lockout replaces the 401."""
    for item in doc["paths"].values():
        for operation in item.values():
            if "401" in operation["responses"]:
                operation["responses"]["429"] = {"$ref": "#/components/responses/TooManyFailures"}
    return doc


def _document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "TaskForge gateway",
            "version": "1",
            "description": (
                "Enqueue background jobs and follow them. Errors are JSON "
                '{"error": "..."}; unsupported methods get 405 with Allow; HEAD works '
                "wherever GET does; OPTIONS is not supported. A query parameter an operation "
                "does not list is refused with 400."
            ),
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": {
            **_job_paths(),
            **_history_paths(),
            **_listing_paths(),
            **_dlq_paths(),
            **_ops_paths(),
            **_queue_paths(),
            **openapi_schedules.paths(_use("BadRequest", "Unauthorized", "Unavailable")),
            **_event_paths(),
        },
        "components": {
            "schemas": contract_schemas(),
            "parameters": {
                **_parameters(),
                **_listing_parameters(),
                **openapi_schedules.parameters(),
            },
            "responses": {
                **_responses(),
                **openapi_schedules.responses(_error("")),
            },
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
