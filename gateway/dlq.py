"""Dead-letter queue endpoints: list, replay, delete."""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from gateway import inputs
from gateway.context import gateway
from gateway.errors import ApiError
from gateway.jobs import queue_of
from gateway.routes import route
from shared.lifecycle import Outcome, record
from shared.queries import BadCursor, dead_page
from shared.scripts import JobNotFound, WrongState

bp = Blueprint("dlq", __name__)


def _not_dead(exc: WrongState) -> ApiError:
    return ApiError(
        409, f"job is {exc.status}, not dead: only dead jobs are in the DLQ", status=exc.status
    )


@route(bp, "GET", "/dlq", query=inputs.DLQ_QUERY)
def list_dead() -> dict[str, Any]:
    """Return a page of dead jobs, newest first, with the cursor of the next page."""
    limit, cursor = inputs.dlq_query()
    gw = gateway()
    try:
        page = dead_page(gw.redis, gw.keys, limit, cursor, gw.directory.names(refresh=True))
    except BadCursor as exc:
        raise ApiError(400, f"bad cursor: {exc}; use a next_cursor this server returned") from None
    return {"jobs": [job.to_json() for job in page.jobs], "next_cursor": page.next_cursor}


@route(bp, "POST", "/dlq/<job_id>/retry")
def retry(job_id: str) -> dict[str, Any]:
    """Replay a dead job: back to pending with attempts 0."""
    job_id = inputs.job_id(job_id)
    gw = gateway()
    try:
        job = gw.scripts.replay(job_id, queue=queue_of(gw, job_id))
    except JobNotFound:
        raise ApiError(404, "job not found") from None
    except WrongState as exc:
        raise _not_dead(exc) from None
    record(Outcome.REPLAYED, job.id, job.type, queue=job.queue, trace=job.extra.get("traceparent"))
    return job.to_json()


@route(bp, "DELETE", "/dlq/<job_id>")
def purge(job_id: str) -> tuple[str, int]:
    """Delete a dead job for good: 204."""
    job_id = inputs.job_id(job_id)
    gw = gateway()
    try:
        # It answers with the type it deleted.
        queue = queue_of(gw, job_id)
        job_type = gw.scripts.purge(job_id, queue=queue)
    except JobNotFound:
        raise ApiError(404, "job not found") from None
    except WrongState as exc:
        raise _not_dead(exc) from None
    record(Outcome.PURGED, job_id, job_type, queue=queue)
    return "", 204
