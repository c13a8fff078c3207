"""Job listings: ``GET /jobs?state=&queue=&type=&limit=&cursor=``, one state, page by page.

Without ``queue``, many listed queues are not all read (shared.listing.queues_for):
``every_queue`` says whether this page covered every queue.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from gateway import inputs
from gateway.context import gateway
from gateway.routes import route
from shared import listing

bp = Blueprint("listing", __name__)


@route(bp, "GET", "/jobs", query=inputs.LIST_QUERY)
def list_jobs() -> dict[str, Any]:
    """Return a page of one state's jobs in that state's order, and the next page's cursor."""
    query = inputs.list_query()
    gw = gateway()
    # The named queue, else a bounded set of queues (all of them while few): shared.listing.
    across = listing.queues_for(gw.scripts, query.state, query.queue)
    page = listing.list_jobs(
        gw.scripts,
        query.state,
        across.queues,
        limit=query.limit,
        cursor=query.cursor,
        job_type=query.job_type,
    )
    return {
        "jobs": [job.to_json() for job in page.jobs],
        "next_cursor": page.next_cursor,
        "every_queue": across.every,
    }
