"""Dead-letter queue endpoints: list, replay, delete."""

from __future__ import annotations

import logging
from typing import Any

from flask import Blueprint

from gateway import inputs
from gateway.context import gateway
from gateway.errors import ApiError
from gateway.routes import route
from shared import metrics, tracing
from shared.queries import BadCursor, dead_page
from shared.scripts import JobNotFound, WrongState

log = logging.getLogger(__name__)
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
        page = dead_page(gw.redis, gw.keys, limit, cursor)
    except BadCursor as exc:
        raise ApiError(400, f"bad cursor: {exc}; use a next_cursor this server returned") from None
    return {"jobs": [job.to_json() for job in page.jobs], "next_cursor": page.next_cursor}


@route(bp, "POST", "/dlq/<job_id>/retry")
def retry(job_id: str) -> dict[str, Any]:
    """Replay a dead job: back to pending with attempts 0."""
    job_id = inputs.job_id(job_id)
    try:
        job = gateway().scripts.replay(job_id)
    except JobNotFound:
        raise ApiError(404, "job not found") from None
    except WrongState as exc:
        raise _not_dead(exc) from None
    log.info("job_replayed", extra={"job_id": job.id, "type": job.type})
    metrics.count("replayed", job.type)
    attributes = tracing.job_attributes(job.id, job.type, "replayed")
    tracing.record("task.replay", job.extra.get("traceparent"), attributes)
    return job.to_json()


@route(bp, "DELETE", "/dlq/<job_id>")
def purge(job_id: str) -> tuple[str, int]:
    """Delete a dead job for good: 204."""
    job_id = inputs.job_id(job_id)
    try:
        job_type = gateway().scripts.purge(job_id)  # it answers with the type it deleted
    except JobNotFound:
        raise ApiError(404, "job not found") from None
    except WrongState as exc:
        raise _not_dead(exc) from None
    log.info("job_purged", extra={"job_id": job_id, "type": job_type})
    metrics.count("purged", job_type)
    return "", 204
