"""Every error the gateway answers, as JSON ``{"error": "..."}`` with the right status."""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

import redis.exceptions
from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from gateway.actions.action_errors import ActionError, Conflict, InvalidInput, NotFound
from gateway.body import BodyError, too_large
from shared.engine.engine_types import Confirmation
from shared.engine.redis_checks import CLUSTER_NODE_BEHIND_PLAIN_URL

log = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 1
# Redis answers these when it cannot serve now but will soon: loading a dump after a restart,
# a replica without its master, a script running too long, memory full under noeviction.
_TRANSIENT_REPLIES = ("LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "OOM")


class ApiError(Exception):
    """An answer other than success: a status, a message, and optional extra JSON fields."""

    def __init__(
        self,
        status: int,
        message: str,
        /,
        *,
        headers: dict[str, str] | None = None,
        **fields: Any,
    ) -> None:
        super().__init__(message)
        self.http_status = status
        self.message = message
        self.headers = headers or {}
        self.fields = fields


def not_replicated(
    confirmation: Confirmation, job_ids: list[str], *, keyed: bool, named: bool = False
) -> ApiError:
    """Return the 503 of an enqueue WAIT did not confirm in time (durable mode).

    The jobs are on the primary, not yet on enough replicas: a failover now could lose them.
    A resend with the same Idempotency-Key, or of jobs that all carry their own ids (`named`),
    creates nothing more and waits again; a request with neither must not be resent as it
    was, since that would make the jobs a second time: its message says to look the jobs up
    by id instead (docs/API.md).
    """
    what = "the job is" if len(job_ids) == 1 else "the jobs are"
    it = "it" if len(job_ids) == 1 else "them"
    if keyed:
        advice = f"resend with the same Idempotency-Key to confirm {it} without a second job"
    elif named:
        advice = f"resend the same body (the same id) to confirm {it} without a second job"
    else:
        advice = (
            f"the request had no Idempotency-Key, so a resend would create {it} again: check "
            f"{it} with GET /jobs/<id> instead, and send an Idempotency-Key next time"
        )
    message = (
        f"{what} on the primary, but only {confirmation.acked} of {confirmation.wanted} "
        f"replicas confirmed it in time (TASKFORGE_WAIT_TIMEOUT); {advice}"
    )
    ids: dict[str, Any] = {"job_id": job_ids[0]} if len(job_ids) == 1 else {"job_ids": job_ids}
    return ApiError(
        503,
        message,
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        code="not_replicated",
        replicas=confirmation.acked,
        wanted=confirmation.wanted,
        **ids,
    )


def json_error(
    status: int, message: str, headers: dict[str, str] | None = None, /, **fields: Any
) -> Response:
    """Return a JSON error response."""
    response = jsonify({"error": message, **fields})
    response.status_code = status
    response.headers.update(headers or {})
    return response


def redis_unavailable(exc: BaseException) -> bool:
    """Tell whether a Redis error means "not reachable now" (503) rather than a bug (500)."""
    if isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
        return True
    if isinstance(exc, redis.exceptions.ReadOnlyError | redis.exceptions.OutOfMemoryError):
        return True
    return isinstance(exc, redis.exceptions.ResponseError) and str(exc).startswith(
        _TRANSIENT_REPLIES
    )


class OutageLog:
    """At most one ``redis_unavailable`` line per QUIET seconds per process.

    In an outage every request fails alike: a line per refused request (hundreds a second)
    would bury the one that matters. The next line says how many it left out.
    """

    QUIET = 5.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = -math.inf
        self._left_out = 0

    def warn(self, exc: BaseException) -> None:
        """Log `exc` unless a line went out less than QUIET seconds ago (then count it)."""
        now = time.monotonic()
        with self._lock:
            if now - self._last < self.QUIET:
                self._left_out += 1
                return
            self._last, left_out, self._left_out = now, self._left_out, 0
        error = f"{type(exc).__name__}: {exc}"[:300]
        log.warning("redis_unavailable", extra={"error": error, "refused_unlogged": left_out})


OUTAGES = OutageLog()


def _out_of_memory(exc: BaseException) -> bool:
    return isinstance(exc, redis.exceptions.OutOfMemoryError) or str(exc).startswith("OOM")


def unavailable_response(exc: BaseException) -> Response:
    """Return the 503 that tells a client to try again shortly."""
    OUTAGES.warn(exc)
    message = "Redis is unavailable; try again shortly"
    if _out_of_memory(exc):
        # noeviction at maxmemory: Redis refused the write whole. It frees up as workers drain.
        message = "Redis is full (maxmemory reached) and refused the job; try again shortly"
    return json_error(503, message, {"Retry-After": str(RETRY_AFTER_SECONDS)})


def _http_error(exc: HTTPException) -> Response | HTTPException:
    if exc.code is None or exc.code < 400:
        return exc  # a routing redirect, not an error
    headers = {}
    messages = {
        404: "no such endpoint; GET /openapi.json lists them",
        413: str(too_large(request.path)),
    }
    if isinstance(exc, MethodNotAllowed) and exc.valid_methods:
        headers["Allow"] = ", ".join(sorted(exc.valid_methods))
        messages[405] = f"{request.method} is not allowed here; use {headers['Allow']}"
    return json_error(exc.code, messages.get(exc.code, exc.description or exc.name), headers)


def api_error_response(exc: ApiError) -> Response:
    """Return the JSON answer of an ApiError."""
    return json_error(exc.http_status, exc.message, exc.headers, **exc.fields)


# Every refusal of an operator action (gateway.actions) as the API answers it.
ACTION_STATUS: tuple[tuple[type[ActionError], int], ...] = (
    (NotFound, 404),
    (Conflict, 409),
    (InvalidInput, 400),
)


def action_status(exc: ActionError) -> int:
    """Return the HTTP status of an action's refusal."""
    return next((status for kind, status in ACTION_STATUS if isinstance(exc, kind)), 409)


def action_error_response(exc: ActionError) -> Response:
    """Return the JSON answer of an action's refusal: its message and the facts behind it."""
    return json_error(action_status(exc), exc.message, **exc.facts)


def unexpected_response(exc: Exception) -> Response | HTTPException:
    """Return the answer to an exception no view handled: 503 for Redis outages, else 500."""
    if isinstance(exc, HTTPException):
        return _http_error(exc)
    if isinstance(exc, redis.exceptions.RedisError) and redis_unavailable(exc):
        return unavailable_response(exc)
    if isinstance(exc, redis.exceptions.AskError):  # MOVED or ASK: a node, not the cluster
        return _cluster_node_response()
    # A bug: the traceback goes to the log, never to the client.
    log.exception("unhandled_error", extra={"error": type(exc).__name__})
    return json_error(500, "internal error; it has been logged")


_told_cluster_node = threading.Event()


def _cluster_node_response() -> Response:
    """Return the 503 for a plain REDIS_URL naming a cluster node (MOVED to another node).

    The start-up check (shared/engine/redis_checks.py) refuses that URL when the node answers at
    start; this covers one that came up later. One log line per process says what to fix.
    """
    if not _told_cluster_node.is_set():
        _told_cluster_node.set()
        log.warning("config_warning", extra={"warning": CLUSTER_NODE_BEHIND_PLAIN_URL})
    return json_error(503, CLUSTER_NODE_BEHIND_PLAIN_URL, {"Retry-After": str(RETRY_AFTER_SECONDS)})


def register(app: Flask) -> None:
    """Install the JSON error handlers on `app`."""
    app.register_error_handler(ApiError, api_error_response)
    app.register_error_handler(ActionError, action_error_response)
    app.register_error_handler(BodyError, lambda e: json_error(e.status, str(e)))
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, unexpected_response)
