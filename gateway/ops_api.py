"""Operations endpoints: stats, metrics, health, readiness, the OpenAPI document."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import redis.exceptions
from flask import Blueprint, Response, request

from gateway.context import gateway
from gateway.http_errors import ApiError, json_error, redis_unavailable
from gateway.openapi import document
from gateway.queue_page import QUEUE_PAGE_QUERY, page_fields, page_query, read_page
from gateway.routes import route
from shared.connect.redis_conn import is_cluster, primary_named
from shared.engine import durable
from shared.engine.cluster_health import check_masters
from shared.engine.queries import QueueCounts
from shared.model.jobs import format_ms
from shared.model.queues import QUEUE_RULE, is_queue_name
from shared.obs.log import unavailable_text
from shared.read import state_gauges, summary, throughput

bp = Blueprint("ops", __name__)


@route(bp, "GET", "/stats", query=QUEUE_PAGE_QUERY)
def stats() -> dict[str, Any]:
    """Return jobs per state and the oldest pending age of all queues, the same for a page of
    queues, and worker counts (the totals: live while every queue is on the page, else from
    the last sweep, ``totals_age_seconds`` old; shared.read.queue_view)."""
    view = read_page(gateway().scripts, page_query())
    age = view.totals_age_ms
    return {
        **_counts(view.totals),
        "totals_age_seconds": None if age is None else age / 1000,
        **page_fields(view),
        "queues": {name: _counts(c) for name, c in sorted(view.shown.by_queue.items())},
        "workers": dataclasses.asdict(view.workers),
    }


THROUGHPUT_QUERY = ("queue", "minutes")


def _bad(name: str, message: str) -> ApiError:
    return ApiError(400, f"{name} {message}", fields=[{"field": name, "message": message}])


def _throughput_query() -> tuple[str | None, int]:
    """Return the queue (None: all) and the number of minutes a throughput request asks for."""
    for name in THROUGHPUT_QUERY:
        if len(request.args.getlist(name)) > 1:
            raise _bad(name, "is given more than once; give each parameter at most once")
    queue = request.args.get("queue")
    if queue is not None and not is_queue_name(queue):
        raise _bad("queue", f"{QUEUE_RULE}, got {queue[:70]!r}")
    high = throughput.MAX_MINUTES
    text = request.args.get("minutes", str(high))
    if not (len(text) <= 2 and text.isascii() and text.isdigit() and 1 <= int(text) <= high):
        raise _bad("minutes", f"must be an integer from 1 to {high}, got {text[:20]!r}")
    return queue, int(text)


@route(bp, "GET", "/stats/throughput", query=THROUGHPUT_QUERY)
def stats_throughput() -> dict[str, Any]:
    """Return completions and failed executions per minute, oldest first, the current last:
    of one queue, or of all (past a page of queues, those hosts serve: shared.read.throughput)."""
    queue, minutes = _throughput_query()
    gw = gateway()
    queues, every = [queue], True
    if queue is None:
        queues, every = throughput.queues_counted(gw.scripts)
    points = throughput.last_hour(gw.scripts, queues, minutes=minutes)
    return {
        "queue": queue,
        "every_queue": every,
        "minutes": [
            {"start": format_ms(m.start_ms), "completed": m.completed, "failed": m.failed}
            for m in points
        ],
        "completed": sum(m.completed for m in points),
        "failed": sum(m.failed for m in points),
    }


def _counts(counts: QueueCounts | None) -> dict[str, Any]:
    """Return counts as /stats shows them; None (the totals of many queues before their
    first sweep ended: another process sweeps now) as nulls."""
    if counts is None:
        return {"jobs": None, "total": None, "oldest_pending_age_seconds": None}
    age = counts.oldest_pending_age_ms
    return {
        "jobs": {str(state): n for state, n in counts.by_state.items()},
        "total": counts.total,
        "oldest_pending_age_seconds": None if age is None else age / 1000,
    }


@route(bp, "GET", "/metrics")
def prometheus() -> Response:
    """Return the Prometheus exposition: this server's counters, queue gauges from Redis."""
    # A due sweep of every queue's totals runs in a thread: this scrape answers meanwhile.
    body, content_type = state_gauges.scrape(gateway().scripts, run=summary.in_thread)
    return Response(body, content_type=content_type)


def _probe(status: str, check: Callable[[], object]) -> tuple[dict[str, Any], int] | Response:
    """Answer a probe: 200 when `check` succeeds, 503 when Redis is unreachable (and why)."""
    gw = gateway()
    try:
        check()
        # Durable mode: how many replicas could confirm a write now. Still 200 below that:
        # reads, cancels and the dashboard work, and every gateway shares this Redis, so a
        # load balancer dropping them all would only turn 503 not_replicated into refused
        # connections (docs/RELIABILITY.md, "Durable mode").
        wanted = gw.scripts.policy.wait_replicas
        replicas = durable.replicas_body(gw.redis, wanted) if wanted else None
    except redis.exceptions.RedisError as exc:
        if not redis_unavailable(exc):
            raise
        return _unavailable(unavailable_text(exc))
    body: dict[str, Any] = {"status": status, "redis": "ok", **primary_named(gw.redis)}
    if replicas is not None:
        body["replicas"] = replicas
    return body, 200


@route(bp, "GET", "/health")
def health() -> tuple[dict[str, Any], int] | Response:
    """Return 200 when this gateway can reach Redis, 503 otherwise."""
    return _probe("ok", gateway().redis.ping)


@route(bp, "GET", "/ready")
def ready() -> tuple[dict[str, Any], int] | Response:
    """Return 200 when this gateway can serve requests: Redis answers and holds our scripts."""
    gw = gateway()
    if is_cluster(gw.redis):
        return _cluster_ready()
    # One SCRIPT EXISTS; it loads them again after a Redis restart emptied the cache.
    return _probe("ready", gw.scripts.ensure_loaded)


def _cluster_ready() -> tuple[dict[str, Any], int] | Response:
    """Answer /ready on a cluster: 200 while at least one master answers, naming any that do
    not (shared.engine.cluster_health says why); 503 when none answers."""
    masters = check_masters(gateway().scripts)
    if not masters.answering:
        return _unavailable(masters.reason(), masters_down=masters.down)
    body: dict[str, Any] = {
        "status": "ready",
        "redis": "degraded" if masters.down else "ok",
        **masters.body(),
    }
    if masters.replicas is not None:
        body["replicas"] = masters.replicas
    return body, 200


def _unavailable(reason: str, **more: Any) -> Response:
    """Answer a probe that found Redis unreachable: 503, retry in a second, and why."""
    return json_error(
        503,
        "Redis is unavailable",
        {"Retry-After": "1"},
        status="unavailable",
        redis="error",
        reason=reason,
        **more,
    )


@route(bp, "GET", "/openapi.json")
def openapi() -> dict[str, Any]:
    """Return the OpenAPI 3 document of every route, as this gateway's token setting makes it."""
    return document(gateway().settings.api_token is not None)
