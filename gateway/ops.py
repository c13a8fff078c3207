"""Operations endpoints: stats, metrics, health, readiness, the OpenAPI document."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import redis.exceptions
from flask import Blueprint, Response

from gateway.context import gateway
from gateway.errors import json_error, redis_unavailable
from gateway.openapi import document
from gateway.routes import route
from shared import metrics
from shared.queries import QueueCounts

bp = Blueprint("ops", __name__)


@route(bp, "GET", "/stats")
def stats() -> dict[str, Any]:
    """Return jobs per state and the oldest pending age, in all and per queue; worker counts."""
    counts, workers = gateway().scripts.stats()  # one round trip after the list of queues
    return {
        **_counts(counts),
        "queues": {name: _counts(c) for name, c in sorted(counts.by_queue.items())},
        "workers": dataclasses.asdict(workers),
    }


def _counts(counts: QueueCounts) -> dict[str, Any]:
    age = counts.oldest_pending_age_ms
    return {
        "jobs": {str(state): n for state, n in counts.by_state.items()},
        "total": counts.total,
        "oldest_pending_age_seconds": None if age is None else age / 1000,
    }


@route(bp, "GET", "/metrics")
def prometheus() -> Response:
    """Return the Prometheus exposition: this server's counters, queue gauges from Redis."""
    body, content_type = metrics.render(*gateway().scripts.stats())
    return Response(body, content_type=content_type)


def _probe(status: str, check: Callable[[], object]) -> tuple[dict[str, str], int] | Response:
    """Answer a probe: 200 when `check` succeeds, 503 when Redis is unreachable."""
    try:
        check()
    except redis.exceptions.RedisError as exc:
        if not redis_unavailable(exc):
            raise
        return json_error(
            503, "Redis is unavailable", {"Retry-After": "1"}, status="unavailable", redis="error"
        )
    return {"status": status, "redis": "ok"}, 200


@route(bp, "GET", "/health")
def health() -> tuple[dict[str, str], int] | Response:
    """Return 200 when this gateway can reach Redis, 503 otherwise."""
    return _probe("ok", gateway().redis.ping)


@route(bp, "GET", "/ready")
def ready() -> tuple[dict[str, str], int] | Response:
    """Return 200 when this gateway can serve requests: Redis answers and holds our scripts."""
    # One SCRIPT EXISTS; it loads them again after a Redis restart emptied the cache.
    return _probe("ready", gateway().scripts.ensure_loaded)


@route(bp, "GET", "/openapi.json")
def openapi() -> dict[str, Any]:
    """Return the OpenAPI 3 document of every route, as this gateway's token setting makes it."""
    return document(gateway().settings.api_token is not None)
