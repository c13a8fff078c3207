"""A job's history: ``GET /jobs/<id>/history``, the transitions its hash keeps."""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from gateway import inputs
from gateway.context import gateway
from gateway.http_errors import ApiError
from gateway.routes import route
from shared.engine import history

bp = Blueprint("history", __name__)


@route(bp, "GET", "/jobs/<job_id>/history")
def job_history(job_id: str) -> dict[str, Any]:
    """Return a job's transitions, oldest first, and how many older ones were dropped."""
    job_id = inputs.job_id(job_id)
    gw = gateway()
    # The id names its queue only by a tag: find the queue (shared.engine.job_locator), then read.
    queue = gw.directory.locator.locate(job_id)
    kept = history.read(gw.redis, gw.keys, job_id, queue) if queue is not None else None
    if kept is None:  # unknown, purged (only its tombstone is left), or trimmed just now
        raise ApiError(404, "job not found")
    return {"id": job_id, "queue": queue, "history": kept.to_json(), "dropped": kept.dropped}
