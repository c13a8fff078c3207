"""Job endpoints: enqueue one or a batch, read one, cancel one."""

from __future__ import annotations

import time
from typing import Any

import flask
from flask import Blueprint
from werkzeug.datastructures import Headers

from gateway import events_api as events
from gateway import inputs, service, waiting
from gateway.actions import job_actions as actions
from gateway.context import Gateway, gateway
from gateway.http_errors import ApiError
from gateway.routes import route
from shared.engine.engine_types import IdempotencyConflict, JobIdConflict
from shared.model.jobs import JobState
from shared.obs import metrics

bp = Blueprint("jobs", __name__)

Reply = tuple[dict[str, Any], int, dict[str, str]]


def _client_trace(headers: Headers) -> str | None:
    """Return the client's W3C traceparent header, if any (a malformed one starts a new trace)."""
    return headers.get("traceparent")


@route(bp, "POST", "/enqueue")
def enqueue() -> Reply:
    """Create one job: 201 with Location, or 200 with the job an Idempotency-Key or the
    client's own id already made."""
    started = time.perf_counter()
    reply = enqueue_reply(gateway(), flask.request.headers, inputs.raw_body())
    metrics.ENQUEUE_SECONDS.observe(time.perf_counter() - started)
    return reply


def enqueue_reply(gw: Gateway, headers: Headers, raw: bytes) -> Reply:
    """Answer a ``POST /enqueue`` from its headers and body (Flask's view and fastpath.py)."""
    request, key = inputs.enqueue_input(headers, raw)
    try:
        doc, created = service.enqueue_one(gw, request, key, _client_trace(headers))
    except IdempotencyConflict as exc:
        raise key_conflict(exc) from None
    except JobIdConflict as exc:
        raise id_conflict(exc) from None
    add_warnings(gw, [doc])
    return doc, 201 if created else 200, {"Location": f"/jobs/{doc['id']}"}


def add_warnings(gw: Gateway, docs: list[dict[str, Any]]) -> None:
    """Give each enqueued job's reply the `warnings` the cached fleet view has for it (a queue
    no live host serves, a type none serving it runs), if any; no Redis command."""
    said: dict[tuple[str, str], list[str]] = {}  # a batch's jobs share a few queues and types
    for doc in docs:
        pair = (doc["queue"], doc["type"])
        if pair not in said:
            said[pair] = gw.fleet.warnings(*pair)
        if said[pair]:
            doc["warnings"] = list(said[pair])


def key_conflict(exc: IdempotencyConflict) -> ApiError:
    """Return the 409 for an Idempotency-Key reused with a different body."""
    return ApiError(
        409,
        f"Idempotency-Key was already used for job {exc.job_id} with a different body",
        job_id=exc.job_id,
    )


def id_conflict(exc: JobIdConflict) -> ApiError:
    """Return the 409 for a client's job id sent again with a different body."""
    return ApiError(
        409,
        f"job id {exc.job_id} already names a job with a different body (or in another "
        "queue): send a new id for a new job",
        job_id=exc.job_id,
    )


@route(bp, "POST", "/enqueue/batch")
def enqueue_batch() -> tuple[dict[str, Any], int]:
    """Create 1 to 1,000 jobs, all or none: 201 with the jobs in the order given, or 200 with
    the jobs an Idempotency-Key already made for the same batch."""
    started = time.perf_counter()
    headers = flask.request.headers
    body = inputs.json_body()
    key = inputs.idempotency_key(headers)  # checked where POST /enqueue checks it
    requests = inputs.batch_requests(body)
    inputs.one_way_to_repeat(requests, key)
    try:
        docs, created = service.enqueue_batch(
            gw := gateway(), requests, key, _client_trace(headers)
        )
    except IdempotencyConflict as exc:
        raise key_conflict(exc) from None
    except JobIdConflict as exc:
        raise id_conflict(exc) from None
    add_warnings(gw, docs)
    metrics.ENQUEUE_SECONDS.observe(time.perf_counter() - started)
    return {"jobs": docs}, 201 if created else 200


@route(bp, "GET", "/jobs/<job_id>", query=("wait",))
def get(job_id: str) -> dict[str, Any]:
    """Return one job; with ``wait``, once it is finished or when the wait ends."""
    job_id = inputs.job_id(job_id)
    seconds = waiting.wait_seconds()
    gw = gateway()
    job = gw.directory.locator.find_job(job_id)
    if job is None:
        raise ApiError(404, "job not found")
    if flask.request.method == "HEAD":  # headers only: nothing worth holding a thread for
        return job.to_json()
    return waiting.wait_for(gw, events.hub(), job, seconds).to_json()


@route(bp, "POST", "/jobs/<job_id>/cancel")
def cancel(job_id: str) -> tuple[dict[str, Any], int]:
    """Cancel a job that has not started (200), or ask for a running one to be stopped (202:
    its supervisor stops it; it then ends canceled, unless it completes first). A repeat
    changes nothing and is answered alike."""
    job_id = inputs.job_id(job_id)
    by = inputs.cancel_by(inputs.raw_body(), flask.request.remote_addr)
    job = actions.cancel(gateway(), job_id, by=by).job
    return job.to_json(), 202 if job.status is JobState.PROCESSING else 200
