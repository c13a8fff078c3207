"""Limit endpoints: the concurrency and rate limits of queues and of job types within them.

Limits live in Redis (every gateway and worker sees the same) and apply fleet-wide: "at most 5
generate_pdf running" counts across every worker of every host. They are per queue (a queue
is one Redis Cluster slot, and a claim touches one): a type in two queues has a limit in each.
docs/QUEUES.md, "Concurrency and rate limits". Setting a limit on a queue no job has been
enqueued under lists it.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from gateway import inputs
from gateway.actions import queue_actions as actions
from gateway.context import gateway
from gateway.contract.requests import LimitsInput, TypeLimitInput
from gateway.http_errors import ApiError
from gateway.model_gate import through
from gateway.queue_page import QUEUE_PAGE_QUERY, page_query
from gateway.queues_api import queue_name
from gateway.routes import route
from shared.engine import limits
from shared.engine.limits import LimitsState, ScopeUse
from shared.model import limit_rules
from shared.model.limit_rules import LimitError, QueueLimits
from shared.read.queue_view import scan_names

bp = Blueprint("limits", __name__)


def _state(queue: str) -> dict[str, Any]:
    gw = gateway()
    found = limits.read_state(gw.scripts.redis, gw.scripts.keys, [queue])
    if found:
        return found[0].to_json()
    return LimitsState(queue, QueueLimits(), ScopeUse(0, 0), {}).to_json()


def _type_limit(body: Any) -> limit_rules.Limit:
    return limit_rules.parse_limit(body, "")


def _parsed(parse: Any, body: Any) -> Any:
    try:
        return parse(body)
    except LimitError as exc:
        raise ApiError(400, str(exc)) from exc


@route(bp, "GET", "/limits", query=QUEUE_PAGE_QUERY)
def list_limits() -> dict[str, Any]:
    """Return a page of the queues that have limits (by name): their own and their types',
    each with running and held, and the next page's cursor.

    Read from the list of limited queues (Keys.limited), not from every queue: a page costs
    an SSCAN or a few and two pipelined reads of its queues, however many queues are listed.
    """
    gw = gateway()
    wanted = page_query()
    names, next_cursor = scan_names(
        gw.scripts, wanted.cursor, wanted.limit, wanted.search, key=gw.scripts.keys.limited
    )
    states = limits.read_state(gw.scripts.redis, gw.scripts.keys, names)
    return {"queues": [state.to_json() for state in states], "next_cursor": next_cursor}


@route(bp, "GET", "/queues/<name>/limits")
def get_limits(name: str) -> dict[str, Any]:
    """Return one queue's limits with what they hold now (all null when it has none)."""
    return _state(queue_name(name))


@route(bp, "PUT", "/queues/<name>/limits")
def put_limits(name: str) -> dict[str, Any]:
    """Set a queue's own limits; with "types" in the body, replace every type's too.

    Without "types" the types' limits stay: ``{"concurrency": 10}`` is plain for curl users
    and cannot wipe out what another operator set per type.
    """
    queue = queue_name(name)
    body = inputs.json_body()
    through(LimitsInput, body, lambda refused: _parsed(limit_rules.parse_limits, refused))
    wanted = _parsed(limit_rules.parse_limits, body)  # the form the engine stores
    replace = "types" in body
    actions.set_queue_limits(gateway(), queue, wanted, replace_types=replace, by=inputs.asked_by())
    return _state(queue)


@route(bp, "DELETE", "/queues/<name>/limits")
def clear_limits(name: str) -> dict[str, Any]:
    """Remove every limit of a queue; jobs held by one become claimable at once."""
    queue = queue_name(name)
    actions.clear_queue_limits(gateway(), queue, by=inputs.asked_by())
    return _state(queue)


@route(bp, "PUT", "/queues/<name>/limits/types/<job_type>")
def put_type_limit(name: str, job_type: str) -> dict[str, Any]:
    """Set one job type's limits in a queue (the others stay as they are)."""
    queue = queue_name(name)
    job_type = _parsed(limit_rules.check_type_name, job_type)
    body = inputs.json_body()
    through(TypeLimitInput, body, lambda refused: _parsed(_type_limit, refused))
    limit = _parsed(_type_limit, body)  # the form the engine stores
    if limit.empty:
        raise ApiError(400, "give concurrency and/or rate (DELETE removes a type's limits)")
    actions.set_type_limit(gateway(), queue, job_type, limit, by=inputs.asked_by())
    return _state(queue)


@route(bp, "DELETE", "/queues/<name>/limits/types/<job_type>")
def clear_type_limit(name: str, job_type: str) -> dict[str, Any]:
    """Remove one job type's limits in a queue."""
    queue = queue_name(name)
    job_type = _parsed(limit_rules.check_type_name, job_type)
    actions.clear_type_limit(gateway(), queue, job_type, by=inputs.asked_by())
    return _state(queue)
