"""Validation of what a request brings: body, ids, headers, query, batch.

The checks of ``POST /enqueue`` are plain functions of (headers, body bytes), so that Flask's
view and the lean path in gateway/fastpath.py run the same code in the same order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import msgspec
from flask import request
from msgspec import UNSET
from werkzeug.datastructures import Headers

from gateway.body import MAX_BODY_BYTES, parse_json, read_limited, too_large
from gateway.contract.requests import CANCEL_BY_LIMIT, MAX_BATCH, BatchRequest, CancelRequest
from gateway.http_errors import ApiError
from gateway.model_gate import through
from shared.model.jobs import (
    JOB_ID_PATTERN,
    TYPE_PATTERN,
    EnqueueRequest,
    JobState,
    ValidationError,
    request_from,
    validate_enqueue,
)
from shared.model.queues import QUEUE_RULE, is_queue_name
from shared.read import listing, listing_states

DLQ_LIMIT_RANGE = (1, 100)
DLQ_QUERY = ("limit", "cursor")
LIST_QUERY = ("state", "queue", "type", "limit", "cursor")
STATES = {str(state): state for state in JobState}
# Stripe's bound; printable ASCII without spaces, so a key survives any proxy and log intact.
IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,255}")
LISTED_ERRORS = 20  # per message; the "errors" list always names every one


def check_body(headers: Headers, content_length: int | None, path: str = "") -> None:
    """Refuse, before reading it, a compressed body (415) or one declared over the limit (413)."""
    encoding = headers.get("Content-Encoding", "identity").strip().lower()
    if encoding != "identity":
        raise ApiError(415, f"Content-Encoding {encoding!r} is not supported; send plain JSON")
    if content_length is not None and content_length > MAX_BODY_BYTES:
        raise too_large(path)


def raw_body() -> bytes:
    """Return the Flask request's body within the size limit."""
    # Checked before request.stream is touched: its own limit check words the 413 differently.
    check_body(request.headers, request.content_length, request.path)
    return read_limited(request.stream, request.content_length, request.path)


def json_body() -> Any:
    """Return the Flask request's JSON document, whatever its Content-Type says."""
    return parse_json(raw_body())


def enqueue_input(headers: Headers, raw: bytes) -> tuple[EnqueueRequest, str | None]:
    """Return the job and Idempotency-Key of a ``POST /enqueue``; raise its 400 otherwise."""
    body = parse_json(raw)
    key = idempotency_key(headers)
    request = enqueue_request(body)
    one_way_to_repeat([request], key)
    return request, key


def one_way_to_repeat(requests: list[EnqueueRequest], key: str | None) -> None:
    """Refuse a client's job id with an Idempotency-Key (each makes a repeat safe; both would
    be two answers to one question), and one id twice in a batch."""
    ids = [request.id for request in requests if request.id is not None]
    if ids and key is not None:
        raise ApiError(400, "give the jobs' own `id` or an Idempotency-Key, not both")
    if len(set(ids)) < len(ids):
        raise ApiError(400, "a job id is given twice in the batch")


def job_id(raw: str) -> str:
    """Return a job id from the path, lower-cased (UUIDs are case-insensitive on input)."""
    candidate = raw.lower()
    if not JOB_ID_PATTERN.fullmatch(candidate):
        raise ApiError(400, f"malformed job id {raw[:64]!r}: expected a UUIDv4")
    return candidate


def idempotency_key(headers: Headers) -> str | None:
    """Return the Idempotency-Key header, or None; refuse a malformed one."""
    key = headers.get("Idempotency-Key")
    if key is None:
        return None
    if not IDEMPOTENCY_KEY.fullmatch(key):
        raise ApiError(
            400, "Idempotency-Key must be 1 to 255 printable ASCII characters without spaces"
        )
    return key


def enqueue_request(body: Any) -> EnqueueRequest:
    """Validate one enqueue body; raise 400 naming every bad field."""
    try:
        return validate_enqueue(body)
    except ValidationError as exc:
        fields = [{"field": e.field, "message": e.message} for e in exc.errors]
        raise ApiError(400, f"invalid job: {exc}", fields=fields) from None


def batch_requests(body: Any) -> list[EnqueueRequest]:
    """Validate a batch body through its model; raise 400 naming the index and field of every
    bad job otherwise."""
    # One conversion of the whole batch for the common, valid body; a refused one goes
    # through the checks below, which name every problem (the model stops at the first).
    try:
        batch = msgspec.convert(body, BatchRequest)
    except msgspec.ValidationError as exc:
        return _checked_batch(body, refused=exc)
    requests = [request_from(job) for job in batch.jobs]
    if None in requests:  # a rule no JSON Schema type says (a whole pattern, a duration)
        return _checked_batch(body, refused=None)
    return requests  # type: ignore[return-value]  # no None left


def _checked_batch(body: Any, refused: Exception | None) -> list[EnqueueRequest]:
    """Check a batch job by job; raise 400 naming every bad one (or what the model refused)."""
    if not isinstance(body, dict) or set(body) != {"jobs"}:
        raise ApiError(400, 'the body must be {"jobs": [ ... ]} and nothing else')
    jobs = body["jobs"]
    if not isinstance(jobs, list) or not 1 <= len(jobs) <= MAX_BATCH:
        raise ApiError(400, f"jobs must be an array of 1 to {MAX_BATCH} enqueue bodies")
    requests: list[EnqueueRequest] = []
    errors: list[dict[str, Any]] = []
    for index, item in enumerate(jobs):
        try:
            requests.append(validate_enqueue(item))
        except ValidationError as exc:
            errors += [{"index": index, "field": e.field, "message": e.message} for e in exc.errors]
    if errors:
        bad = len({e["index"] for e in errors})
        listed = "; ".join(
            f"jobs[{e['index']}].{e['field']}: {e['message']}" for e in errors[:LISTED_ERRORS]
        )
        more = f"; and {len(errors) - LISTED_ERRORS} more" if len(errors) > LISTED_ERRORS else ""
        raise ApiError(
            400,
            f"{bad} of {len(jobs)} jobs are invalid, nothing was enqueued: {listed}{more}",
            errors=errors,
        )
    if refused is not None:
        raise ApiError(400, f"invalid body: {refused}")
    return requests


def requester(client: str | None) -> str:
    """Return who asks for an operator action through the API: "api" and the client's address."""
    return f"api {client}" if client else "api"


def asked_by() -> str:
    """Return who asks for this request's operator action (gateway.actions)."""
    return requester(request.remote_addr)


def cancel_by(raw: bytes, client: str | None) -> str:
    """Return who asks for a cancel: the body's optional {"by": "..."} (the caller names
    itself), else "api" and the client's address. Refuse any other body with 400."""
    if not raw.strip():
        return requester(client)
    wanted = through(CancelRequest, parse_json(raw), _explain_cancel)
    return requester(client) if wanted.by is UNSET else wanted.by


def _explain_cancel(body: Any) -> None:
    """Raise the 400 that says what is wrong with a cancel body."""
    if not isinstance(body, dict) or set(body) - {"by"}:
        raise ApiError(400, 'the body must be empty or {"by": "<who asks>"} and nothing else')
    if "by" not in body:
        return
    by = body["by"]
    if not isinstance(by, str) or not 1 <= len(by) <= CANCEL_BY_LIMIT:
        raise ApiError(
            400,
            f"by must be a string of 1 to {CANCEL_BY_LIMIT} characters",
            errors=[{"field": "by", "message": f"must be 1 to {CANCEL_BY_LIMIT} characters"}],
        )


def refuse_unknown_query(allowed: frozenset[str]) -> None:
    """Refuse with 400 a query parameter the route does not read, naming every such one."""
    unknown = sorted(set(request.args) - allowed)
    if not unknown:
        return
    names = ", ".join(repr(name[:64]) for name in unknown[:LISTED_ERRORS])
    plural = "s" if len(unknown) > 1 else ""
    takes = f"it takes only {', '.join(sorted(allowed))}" if allowed else "it takes none"
    fields = [{"field": name[:64], "message": "unknown query parameter"} for name in unknown]
    raise ApiError(
        400,
        f"unknown query parameter{plural} {names} for {request.method} {request.path}; {takes}",
        fields=fields,
    )


def dlq_query() -> tuple[int, str | None]:
    """Return the DLQ page size and cursor from the query string."""
    low, high = DLQ_LIMIT_RANGE
    limits, cursors = (request.args.getlist(name) for name in DLQ_QUERY)
    if len(limits) > 1 or len(cursors) > 1:
        raise ApiError(400, "give limit and cursor at most once each")
    limit = high
    if limits:
        text = limits[0]
        if not (len(text) <= 3 and text.isascii() and text.isdigit() and low <= int(text) <= high):
            raise ApiError(400, f"limit must be an integer from {low} to {high}, got {text[:20]!r}")
        limit = int(text)
    return limit, cursors[0] if cursors else None


@dataclass(frozen=True)
class ListQuery:
    """What ``GET /jobs`` asks for: one state (None: every state), optionally one queue and one
    type, a page."""

    state: JobState | None
    queue: str | None
    job_type: str | None
    limit: int
    cursor: str | None


def bad_field(name: str, message: str) -> ApiError:
    """Return the 400 that names one bad field (in the message and in ``fields``)."""
    return ApiError(400, f"{name} {message}", fields=[{"field": name, "message": message}])


def _once() -> dict[str, str]:
    """Return each query parameter's value; refuse one given twice."""
    repeated = [name for name in LIST_QUERY if len(request.args.getlist(name)) > 1]
    if repeated:
        raise bad_field(repeated[0], "is given more than once; give each parameter at most once")
    return {name: request.args[name] for name in LIST_QUERY if name in request.args}


def list_query() -> ListQuery:
    """Return what a ``GET /jobs`` asks for; raise its 400 naming the parameter otherwise."""
    given = _once()
    state = given.get("state")
    if state is not None and state not in STATES:
        raise bad_field("state", f"must be one of {', '.join(STATES)}, got {state[:20]!r}")
    queue = given.get("queue")
    if queue is not None and not is_queue_name(queue):
        raise bad_field("queue", f"{QUEUE_RULE}, got {queue[:70]!r}")
    job_type = given.get("type")
    if job_type is not None and not TYPE_PATTERN.fullmatch(job_type):
        rule = "must be 1-128 characters of A-Z a-z 0-9 _ . : -"
        raise bad_field("type", f"{rule}, got {job_type[:70]!r}")
    low, high = listing.LIMIT_RANGE
    limit = listing.DEFAULT_LIMIT
    if "limit" in given:
        text = given["limit"]
        if not (len(text) <= 4 and re.fullmatch("[0-9]+", text) and low <= int(text) <= high):
            raise bad_field("limit", f"must be an integer from {low} to {high}, got {text[:20]!r}")
        limit = int(text)
    cursor = given.get("cursor")
    if cursor is not None:
        try:
            listing_states.parse_place(cursor)
        except listing.BadCursor as exc:
            message = f"bad cursor: {exc}; use a next_cursor of the same listing"
            raise ApiError(
                400, message, fields=[{"field": "cursor", "message": str(exc)}]
            ) from None
    return ListQuery(None if state is None else STATES[state], queue, job_type, limit, cursor)
