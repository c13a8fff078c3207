"""Job listings: ``GET /jobs?state=&queue=&type=&limit=&cursor=``, one state or every state,
page by page.

Without ``state``, every state in lifecycle order (shared.read.listing_states). Without ``queue``,
many listed queues are not all read (shared.read.listing.queues_for): ``every_queue`` says whether
this page covered every queue.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from gateway import inputs
from gateway.context import gateway
from gateway.routes import route
from shared.read import listing, listing_states
from shared.read.listing import JobPage

bp = Blueprint("listing", __name__)


@route(bp, "GET", "/jobs", query=inputs.LIST_QUERY)
def list_jobs() -> dict[str, Any]:
    """Return a page of one state's jobs in that state's order (of every state's, in lifecycle
    order, without ``state``), and the next page's cursor."""
    query = inputs.list_query()
    gw = gateway()
    if query.state is None:
        every = listing_states.list_every_state(
            gw.scripts,
            query.queue,
            limit=query.limit,
            cursor=query.cursor,
            job_type=query.job_type,
        )
        return _reply(JobPage(every.jobs, every.next_cursor), every.every_queue)
    # The named queue, else a bounded set of queues (all of them while few): shared.read.listing.
    across = listing.queues_for(gw.scripts, query.state, query.queue)
    start = listing_states.within(query.state, query.cursor)
    if start.done:  # a cursor of every state's listing, past this state
        return _reply(JobPage([], None), across.every)
    page = listing.list_jobs(
        gw.scripts,
        query.state,
        across.queues,
        limit=query.limit,
        cursor=start.cursor,
        job_type=query.job_type,
    )
    return _reply(page, across.every)


def _reply(page: JobPage, every_queue: bool) -> dict[str, Any]:
    return {
        "jobs": [job.to_json() for job in page.jobs],
        "next_cursor": page.next_cursor,
        "every_queue": every_queue,
    }
