"""Dead-letter queue endpoints: list, replay, delete; replay or delete many at once."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flask import Blueprint
from flask.blueprints import BlueprintSetupState
from werkzeug.routing import BaseConverter

from gateway import inputs
from gateway.actions import job_actions as actions
from gateway.context import gateway
from gateway.contract.requests import BulkByFilter, BulkByIds
from gateway.http_errors import ApiError
from gateway.model_gate import through
from gateway.routes import route
from shared.engine.queries import BadCursor, dead_page
from shared.model.jobs import JOB_ID_PATTERN, TYPE_PATTERN, JobState
from shared.model.queues import QUEUE_RULE, is_queue_name
from shared.read import bulk, listing

bp = Blueprint("dlq", __name__)


class DeadJobId(BaseConverter):
    """The job id segment of ``/dlq/<id>``: anything but the bulk actions' names.

    ``/dlq/purge`` would otherwise also match ``DELETE /dlq/<id>`` (a 400 for a malformed id),
    so a 405 there would advertise ``Allow: DELETE, POST``; the id itself is still validated
    by the view (400), as on every other route.
    """

    regex = r"(?!(?:retry|purge)$)[^/]+"


def _add_converter(state: BlueprintSetupState) -> None:
    state.app.url_map.converters["dead_job_id"] = DeadJobId


bp.record_once(_add_converter)  # before the rules below are added to the app


@route(bp, "GET", "/dlq", query=inputs.DLQ_QUERY)
def list_dead() -> dict[str, Any]:
    """Return a page of dead jobs, newest first, with the cursor of the next page: of every
    queue while few are listed, else of a bounded set (shared.read.listing.queues_for)."""
    limit, cursor = inputs.dlq_query()
    gw = gateway()
    across = listing.queues_for(gw.scripts, JobState.DEAD)
    try:
        page = dead_page(gw.redis, gw.keys, limit, cursor, across.queues)
    except BadCursor as exc:
        raise ApiError(400, f"bad cursor: {exc}; use a next_cursor this server returned") from None
    return {
        "jobs": [job.to_json() for job in page.jobs],
        "next_cursor": page.next_cursor,
        "every_queue": across.every,
    }


@route(bp, "POST", "/dlq/<job_id>/retry")
def retry(job_id: str) -> dict[str, Any]:
    """Replay a dead job: back to pending with attempts 0."""
    return actions.replay(gateway(), inputs.job_id(job_id)).to_json()


@route(bp, "DELETE", "/dlq/<dead_job_id:job_id>")
def purge(job_id: str) -> tuple[str, int]:
    """Delete a dead job for good: 204."""
    actions.purge(gateway(), inputs.job_id(job_id))
    return "", 204


BULK_FIELDS = ("ids", "queue", "type", "all", "limit", "cursor")
FILTER_FIELDS = BULK_FIELDS[1:]
# A body must say which dead jobs: an empty one acting on every queue's DLQ would make a typo
# (or a client that lost its filter) delete everything.
# A cursor is only a position: it does not remember its filter, so it never selects alone.
SELECTORS = ("queue", "type", "all")
NO_SELECTOR = (
    'say which dead jobs: "ids", a filter ("queue", "type"), or "all": true for every dead job; '
    "send a next_cursor with the same filter it came with"
)


@dataclass(frozen=True)
class BulkRequest:
    """A bulk DLQ body: explicit ids, or a filter (queue, type) walked a page per call."""

    ids: list[str] | None
    queue: str | None
    job_type: str | None
    limit: int
    cursor: str | None


def _ids(value: Any) -> list[str]:
    high = bulk.MAX_LIMIT
    if not isinstance(value, list) or not 1 <= len(value) <= high:
        raise inputs.bad_field("ids", f"must be an array of 1 to {high} job ids")
    found: list[str] = []
    for index, item in enumerate(value):
        candidate = item.lower() if isinstance(item, str) else None
        if candidate is None or not JOB_ID_PATTERN.fullmatch(candidate):
            shown = repr(item)[:64]
            raise inputs.bad_field("ids", f"must hold job ids (UUIDv4); ids[{index}] is {shown}")
        found.append(candidate)
    return found


def _text(body: dict[str, Any], name: str, valid: Callable[[str], object], rule: str) -> str | None:
    if name not in body:
        return None
    value = body[name]  # null is refused: a next_cursor of null means the walk is over
    if not isinstance(value, str) or not valid(value):
        raise inputs.bad_field(name, f"{rule}, got {repr(value)[:70]}")
    return value


def bulk_request(body: Any) -> BulkRequest:
    """Validate a bulk DLQ body through its model (ids, or a filter); raise its 400 naming the
    field otherwise."""
    model = BulkByIds if isinstance(body, dict) and "ids" in body else BulkByFilter
    through(model, body, _checked)
    # What the model accepted, in the form the engine takes (ids lower-cased, patterns
    # matched whole, the selector rule a JSON Schema type cannot hold).
    return _checked(body)


def _checked(body: Any) -> BulkRequest:
    """Check a bulk DLQ body field by field; raise its 400 naming the field otherwise."""
    if not isinstance(body, dict):
        raise ApiError(400, 'the body must be a JSON object: {"ids": [...]} or a filter')
    unknown = sorted(set(body) - set(BULK_FIELDS))
    if unknown:
        names = ", ".join(repr(name[:64]) for name in unknown[:20])
        raise ApiError(
            400,
            f"unknown field(s) {names}; a body takes ids, or queue, type, all, limit and cursor",
            fields=[{"field": name[:64], "message": "unknown field"} for name in unknown],
        )
    if "ids" in body:
        mixed = [name for name in FILTER_FIELDS if name in body]
        if mixed:
            raise inputs.bad_field(mixed[0], "cannot be given with ids: give ids, or a filter")
        return BulkRequest(_ids(body["ids"]), None, None, len(body["ids"]), None)
    if "all" in body and body["all"] is not True:
        shown = json.dumps(body["all"])[:20]  # JSON's spelling: false, not False
        raise inputs.bad_field("all", f"must be true (or left out), got {shown}")
    queue = _text(body, "queue", is_queue_name, QUEUE_RULE)
    type_rule = "must be 1-128 characters of A-Z a-z 0-9 _ . : -"
    job_type = _text(body, "type", TYPE_PATTERN.fullmatch, type_rule)
    limit = body.get("limit", bulk.DEFAULT_LIMIT)
    # JSON Schema's integer: 8 or 8.0. bool is an int in Python, not in JSON: true is no limit.
    if type(limit) is float and limit.is_integer():
        limit = int(limit)
    if type(limit) is not int or not 1 <= limit <= bulk.MAX_LIMIT:
        raise inputs.bad_field(
            "limit", f"must be an integer from 1 to {bulk.MAX_LIMIT}, got {limit!r:.20}"
        )
    cursor = _text(body, "cursor", listing.CURSOR_PATTERN.fullmatch, "must be a next_cursor")
    if not any(name in body for name in SELECTORS):
        raise ApiError(400, NO_SELECTOR)
    return BulkRequest(None, queue, job_type, limit, cursor)


def _bulk(action: bulk.Action) -> dict[str, Any]:
    wanted = bulk_request(inputs.json_body())
    which = actions.DeadJobs(wanted.ids, wanted.queue, wanted.job_type)
    result = actions.bulk_dlq(gateway(), action, which, limit=wanted.limit, cursor=wanted.cursor)
    return {
        "done": result.done,
        "skipped": [{"id": job_id, "reason": reason} for job_id, reason in result.skipped],
        "next_cursor": result.next_cursor,
    }


@route(bp, "POST", "/dlq/retry")
def retry_many() -> dict[str, Any]:
    """Replay dead jobs by id, or a page of those matching a filter: 200 with what was done."""
    return _bulk("replay")


@route(bp, "POST", "/dlq/purge")
def purge_many() -> dict[str, Any]:
    """Delete dead jobs by id, or a page of those matching a filter: 200 with what was done."""
    return _bulk("purge")
