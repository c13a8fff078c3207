"""Queue endpoints: list every queue with its counts, pause one, resume one, delete an empty one.

A pause is persisted in Redis (the queue's `paused` key): jobs still arrive and become pending,
but no worker claims from the queue until it is resumed. Pausing a queue no job has been
enqueued under yet is allowed: the queue is listed from then on. Repeating a pause or a resume
changes nothing and answers 200 again.

A delete (shared.read.queue_removal) takes an empty queue off the list with its keys: 204, or 409
with what keeps it (jobs per state, paused, limited, served by a workerd host, the default
queue), or 404 for a name not listed.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from gateway import inputs
from gateway.actions import queue_actions as actions
from gateway.context import Gateway, gateway
from gateway.http_errors import ApiError
from gateway.queue_page import QUEUE_PAGE_QUERY, page_fields, page_query, read_page
from gateway.routes import route
from shared.engine.limits import LimitsState, read_state
from shared.engine.queries import QueueCounts
from shared.model.jobs import format_ms
from shared.model.queues import QUEUE_RULE, is_queue_name
from shared.read.fleet import Fleet, read_fleet

bp = Blueprint("queues", __name__)


def queue_name(raw: str) -> str:
    """Return a queue name from the path; refuse one that breaks the rule with 400."""
    if not is_queue_name(raw):
        raise ApiError(400, f"bad queue name {raw[:64]!r}: a queue name {QUEUE_RULE}")
    return raw


def queue_json(
    name: str, counts: QueueCounts, fleet: Fleet, limits: LimitsState | None = None
) -> dict[str, Any]:
    """Return one queue as GET /queues lists it (`limits`: null for a queue without any;
    `served`: a live workerd host serves it now, by the registry)."""
    age = counts.oldest_pending_age_ms
    return {
        "name": name,
        "paused": counts.paused,
        "served": fleet.serves(name),
        "paused_since": format_ms(counts.paused_since_ms),
        "jobs": {str(state): n for state, n in counts.by_state.items()},
        "oldest_pending_age_seconds": None if age is None else age / 1000,
        "completed_last_minute": counts.completed_last_minute,
        "failed_last_minute": counts.failed_last_minute,
        "limits": None if limits is None else limits.to_json(),
    }


def _one(gw: Gateway, name: str) -> dict[str, Any]:
    counts, _ = gw.scripts.stats([name])
    found = read_state(gw.scripts.redis, gw.scripts.keys, [name])
    fleet = read_fleet(gw.redis, gw.keys)
    return queue_json(name, counts.by_queue[name], fleet, found[0] if found else None)


@route(bp, "GET", "/queues", query=QUEUE_PAGE_QUERY)
def list_queues() -> dict[str, Any]:
    """Return every queue, or a page of them (gateway.queue_page), by name: counts per state,
    paused, served, the last minute's throughput, limits."""
    gw = gateway()
    view = read_page(gw.scripts, page_query())
    names = sorted(view.shown.by_queue)
    # Two more round trips: which of these queues have limits, then their running and held.
    limited = {s.queue: s for s in read_state(gw.scripts.redis, gw.scripts.keys, names)}
    # Two more: the hosts' records, read now (not the cached view: a listing may say "served"
    # only while it is true; shared.read.fleet reads the host records, not per-queue keys).
    fleet = read_fleet(gw.redis, gw.keys)
    return {
        "queues": [
            queue_json(name, view.shown.by_queue[name], fleet, limited.get(name)) for name in names
        ],
        **page_fields(view),
    }


@route(bp, "DELETE", "/queues/<name>")
def delete(name: str) -> tuple[str, int]:
    """Delete an empty queue: 204; 409 with what keeps it; 404 for a name not listed."""
    actions.delete_queue(gateway(), queue_name(name))
    return "", 204


@route(bp, "POST", "/queues/<name>/pause")
def pause(name: str) -> dict[str, Any]:
    """Pause a queue (listing it if it is new): no worker claims from it until resumed."""
    name = queue_name(name)
    actions.pause_queue(gateway(), name, by=inputs.asked_by())
    return _one(gateway(), name)


@route(bp, "POST", "/queues/<name>/resume")
def resume(name: str) -> dict[str, Any]:
    """Resume a paused queue: idle workers are woken for its pending jobs."""
    name = queue_name(name)
    actions.resume_queue(gateway(), name, by=inputs.asked_by())
    return _one(gateway(), name)
