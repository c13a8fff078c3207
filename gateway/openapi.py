"""The OpenAPI 3.1 document of the gateway: every route, its inputs and every answer."""

from __future__ import annotations

from functools import cache
from typing import Any

from gateway.body import MAX_BODY_BYTES
from gateway.inputs import DLQ_LIMIT_RANGE, MAX_BATCH
from shared.jobs import (
    MAX_RETRIES_RANGE,
    MAX_TIMEOUT_SECONDS,
    PRIORITY_LIMIT,
    TIMEOUT_PATTERN,
    TRACEBACK_LIMIT,
    JobState,
)

JOB_ID = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-4[0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$"
TIMESTAMP = {"type": "string", "format": "date-time"}
STATES = [str(state) for state in JobState]


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(_ref("Error"), description)


def _enqueue_schema() -> dict[str, Any]:
    low, high = MAX_RETRIES_RANGE
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["type"],
        "properties": {
            "type": {"type": "string", "pattern": "^[A-Za-z0-9_.:-]{1,128}$"},
            "payload": {
                "type": "object",
                "description": "A JSON object, handed to the handler; absent means {}.",
            },
            "priority": {"type": "integer", "minimum": -PRIORITY_LIMIT, "maximum": PRIORITY_LIMIT},
            "max_retries": {"type": "integer", "minimum": low, "maximum": high},
            "scheduled_at": {"type": ["string", "null"], "format": "date-time"},
            "timeout": {
                "description": "Seconds (a number), or a duration as the environment takes one "
                "(500ms, 2s, 1m, 1h, 1d, bare seconds as text): above 0, at most 7 days. The "
                "job shows it in seconds.",
                "oneOf": [
                    {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIMEOUT_SECONDS},
                    {"type": "string", "pattern": TIMEOUT_PATTERN},
                    {"type": "null"},
                ],
            },
        },
    }


def _job_schema() -> dict[str, Any]:
    required = ["id", "type", "status", "priority", "max_retries", "attempts"]
    required += ["recoveries", "payload", "created_at", "updated_at", "traceback"]
    return {
        "type": "object",
        "required": required,
        "properties": {
            "id": {"type": "string", "pattern": JOB_ID},
            "type": {"type": "string"},
            "status": {"type": "string", "enum": STATES},
            "priority": {"type": "integer"},
            "max_retries": {"type": "integer"},
            "attempts": {"type": "integer", "minimum": 0},
            "recoveries": {"type": "integer", "minimum": 0},
            "payload": {},
            "created_at": TIMESTAMP,
            "updated_at": TIMESTAMP,
            "scheduled_at": TIMESTAMP,
            "started_at": TIMESTAMP,
            "finished_at": TIMESTAMP,
            "next_retry_at": TIMESTAMP,
            "last_error": {"type": "string", "description": '"Type: message"'},
            "traceback": {
                "type": ["string", "null"],
                "description": "The traceback of the handler's exception behind last_error "
                f"(null when none), cut to its last {TRACEBACK_LIMIT} bytes.",
            },
            "result": {},
            "timeout": {"type": "number"},
        },
    }


def _error_schema() -> dict[str, Any]:
    field_error = {
        "type": "object",
        "required": ["field", "message"],
        "properties": {
            "index": {"type": "integer", "minimum": 0},
            "field": {"type": "string"},
            "message": {"type": "string"},
        },
    }
    return {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {"type": "string", "description": "What is wrong, for a person."},
            "fields": {"type": "array", "items": field_error},
            "errors": {"type": "array", "items": field_error},
            "job_id": {"type": "string", "pattern": JOB_ID},
            "status": {"type": "string"},
            "redis": {"type": "string"},
        },
    }


def _object(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": properties}


def _schemas() -> dict[str, Any]:
    counts = {s: {"type": "integer", "minimum": 0} for s in STATES}
    workers = {k: {"type": "integer", "minimum": 0} for k in ("hosts", "live", "busy")}
    jobs = {"type": "array", "items": _ref("Job")}
    batch = {"type": "array", "minItems": 1, "maxItems": MAX_BATCH, "items": _ref("EnqueueRequest")}
    age = {"type": ["number", "null"], "minimum": 0}
    return {
        "EnqueueRequest": _enqueue_schema(),
        "BatchRequest": {**_object(["jobs"], {"jobs": batch}), "additionalProperties": False},
        "Job": _job_schema(),
        "Jobs": _object(["jobs"], {"jobs": jobs}),
        "DeadPage": _object(
            ["jobs", "next_cursor"], {"jobs": jobs, "next_cursor": {"type": ["string", "null"]}}
        ),
        "Stats": _object(
            ["jobs", "total", "oldest_pending_age_seconds", "workers"],
            {
                "jobs": _object(STATES, counts),
                "total": {"type": "integer", "minimum": 0},
                "oldest_pending_age_seconds": age,
                "workers": _object(["hosts", "live", "busy"], workers),
            },
        ),
        "Probe": _object(
            ["status", "redis"], {"status": {"type": "string"}, "redis": {"type": "string"}}
        ),
        "Error": _error_schema(),
    }


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
        "Cursor": {
            "name": "cursor",
            "in": "query",
            "description": "The next_cursor of the previous page.",
            "schema": {"type": "string"},
        },
        "IdempotencyKey": {
            "name": "Idempotency-Key",
            "in": "header",
            "description": "Same key and body within the key's TTL: 200 with the first job.",
            "schema": {"type": "string", "pattern": "^[\\x21-\\x7e]{1,255}$"},
        },
    }


def _responses() -> dict[str, Any]:
    return {
        "BadRequest": _error("Malformed or invalid input; the message says what."),
        "Unauthorized": {
            **_error("Missing or wrong bearer token (when TASKFORGE_API_TOKEN is set)."),
            "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}},
        },
        "NotFound": _error('No such job: {"error": "job not found"}.'),
        "Conflict": _error("The job is not in a state this action starts from."),
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
        "Conflict": "409",
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
    return {
        "/enqueue": {
            "post": _operation(
                "enqueue",
                "Create a job.",
                {"201": created, "200": again, **_use(*BODY_ERRORS, "Conflict")},
                parameters=[_param("IdempotencyKey")],
                requestBody=_body("EnqueueRequest"),
            )
        },
        "/enqueue/batch": {
            "post": _operation(
                "enqueueBatch",
                f"Create 1 to {MAX_BATCH} jobs, all or none.",
                {"201": batch, **_use(*BODY_ERRORS)},
                requestBody=_body("BatchRequest"),
            )
        },
        "/jobs/{job_id}": {
            "get": _operation(
                "getJob",
                "Read one job.",
                {"200": JOB_OK, **_use(*BY_ID)},
                parameters=[_param("JobId")],
            )
        },
        "/jobs/{job_id}/cancel": {
            "post": _operation(
                "cancelJob",
                "Cancel a pending, scheduled or retrying job.",
                {"200": JOB_OK, **_use(*BY_ID, "Conflict")},
                parameters=[_param("JobId")],
            )
        },
    }


def _dlq_paths() -> dict[str, Any]:
    page = _json(_ref("DeadPage"), "A page of dead jobs.")
    return {
        "/dlq": {
            "get": _operation(
                "listDead",
                "Page through dead jobs, newest first.",
                {"200": page, **_use("BadRequest", "Unauthorized", "Unavailable")},
                parameters=[_param("Limit"), _param("Cursor")],
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
                "Jobs per state, the oldest pending job's age, workerd hosts and processes.",
                {"200": stats, **_use("Unauthorized", "Unavailable")},
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


@cache
def document() -> dict[str, Any]:
    """Return the OpenAPI document (built once per process)."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "TaskForge gateway",
            "version": "1",
            "description": (
                "Enqueue background jobs and follow them. Errors are JSON "
                '{"error": "..."}; unsupported methods get 405 with Allow; HEAD works '
                "wherever GET does; OPTIONS is not supported."
            ),
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": {**_job_paths(), **_dlq_paths(), **_ops_paths()},
        "components": {
            "schemas": _schemas(),
            "parameters": _parameters(),
            "responses": _responses(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
