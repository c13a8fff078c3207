"""The gateway's Flask application factory."""

from __future__ import annotations

import logging

import redis
import redis.exceptions
from flask import Flask
from redis.backoff import NoBackoff
from redis.retry import Retry

from gateway import auth, model_gate, ui
from gateway import dlq_api as dlq
from gateway import events_api as events
from gateway import history_api as history
from gateway import http_errors as errors
from gateway import jobs_api as jobs
from gateway import limits_api as limits
from gateway import listing_api as listing
from gateway import ops_api as ops
from gateway import queues_api as queues
from gateway import schedules_api as schedules
from gateway import workers_api as workers
from gateway.body import MAX_BODY_BYTES
from gateway.context import Gateway
from gateway.fastpath import FastEnqueue
from shared.connect.redis_conn import connect, describe
from shared.engine.engine_types import Policy
from shared.engine.keys import Keys
from shared.engine.redis_checks import warn_about_redis
from shared.engine.scripts import Scripts
from shared.obs import log as shared_log
from shared.settings.config import WAIT_REPLY_MARGIN, Settings, load_or_exit

log = logging.getLogger(__name__)

# Caps on the settings: a request gets its 503 within 0.95 s (with POOL_WAIT) when Redis is gone
# or hung (docs/RELIABILITY.md, 8), far above the tens of ms a busy 1,000-job batch takes.
SOCKET_TIMEOUT = 0.75
CONNECT_TIMEOUT = 0.5
# gunicorn's many threads must not open as many Redis connections (small hosted plans allow
# 20 in all): a request holds one for well under a millisecond, so a few per process serve all.
POOL_SIZE = 8
POOL_WAIT = 0.2  # seconds a thread waits for a free connection before answering 503
AUTH_DISABLED = "TASKFORGE_API_TOKEN is unset: every endpoint is open to anyone"
# Whether create_app warns AUTH_DISABLED itself: under deploy/gunicorn.conf.py the master says
# it once per start, naming the address it bound (a worker cannot tell loopback from the world).
_app_warns_when_open = True


def leave_open_warning_to_server() -> None:
    """Let the server warn once (naming its address) instead of every create_app call."""
    global _app_warns_when_open
    _app_warns_when_open = False


def gateway_client(settings: Settings) -> redis.Redis:
    """Return a Redis client with short timeouts, one immediate retry of a refused call, and
    at most POOL_SIZE connections (threads beyond that wait up to POOL_WAIT, then 503)."""
    socket_timeout = SOCKET_TIMEOUT
    if settings.wait_replicas:
        # Durable mode: a WAIT may take its whole timeout; its reply must still be read.
        socket_timeout = max(SOCKET_TIMEOUT, settings.wait_timeout + WAIT_REPLY_MARGIN)
    return connect(
        settings,
        role="gateway",
        max_connections=POOL_SIZE,
        pool_wait=POOL_WAIT,
        socket_timeout=min(settings.redis_socket_timeout, socket_timeout),
        connect_timeout=min(settings.redis_connect_timeout, CONNECT_TIMEOUT),
        # One retry without backoff rides out a pooled connection that Redis closed (a
        # restart); a timeout is not retried: the request already waited its full second.
        retry=Retry(NoBackoff(), 1, supported_errors=(redis.exceptions.ConnectionError,)),
    )


def create_app(
    settings: Settings | None = None,
    *,
    scripts: Scripts | None = None,
    client: redis.Redis | None = None,
) -> Flask:
    """Build the gateway; tests inject `scripts` (fakeredis) or `client` (a private server)."""
    settings = settings or load_or_exit()
    shared_log.configure("gateway", settings.log_level)
    model_gate.prepare()  # before any request thread: msgspec's first conversion is not thread-safe
    if scripts is None:
        scripts = Scripts(
            client or gateway_client(settings),
            Keys(settings.namespace),
            Policy.from_settings(settings),
        )
        _check_redis(scripts)
        # Its threads' concurrent script calls share Redis requests from the third in flight
        # at once (group commit): fewer requests for Redis to read and answer under load.
        scripts.transport.share_requests()
    app = Flask(__name__)
    # A backstop for request.stream; body.py enforces the exact limit. One byte more: Werkzeug
    # refuses the read that would find the end of a body exactly at its limit.
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES + 1
    app.json.sort_keys = False  # keep the job's documented field order
    gw = app.extensions[Gateway.EXTENSION] = Gateway(settings, scripts)
    errors.register(app)
    auth.install(app, settings.api_token)
    blueprints = (jobs.bp, history.bp, listing.bp, dlq.bp, ops.bp, queues.bp, limits.bp)
    for blueprint in (*blueprints, workers.bp, schedules.bp):
        app.register_blueprint(blueprint)
    app.register_blueprint(events.bp)
    events.install(app, gw)
    ui.install(app)  # the dashboard at /ui, and its session cookie
    app.wsgi_app = FastEnqueue(app)  # type: ignore[method-assign]  # POST /enqueue, lean
    warnings = list(settings.warnings)
    if settings.api_token is None and _app_warns_when_open:
        warnings.append(AUTH_DISABLED)
    for warning in warnings:
        log.warning("config_warning", extra={"warning": warning})
    log.info(
        "gateway_started",
        extra={"redis": describe(settings.redis_url), "auth": settings.api_token is not None},
    )
    return app


def start_fleet_view(app: Flask) -> None:
    """Start the app's fleet view in this process (a gunicorn worker, just forked); without
    this it starts with the first enqueue (gateway.fleet_view)."""
    app.extensions[Gateway.EXTENSION].fleet.start()


def _check_redis(scripts: Scripts) -> None:
    """Load the scripts (a broken one fails start-up) and warn about a Redis that can lose jobs."""
    try:
        scripts.load()
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        # Start anyway: requests answer 503 until Redis is back, and /ready says so.
        log.warning("redis_unavailable", extra={"error": f"{type(exc).__name__}: {exc}"})
        return
    # Eviction or no persistence can lose jobs; too few replicas refuse every durable write.
    warn_about_redis(scripts.redis, log, scripts.policy.wait_replicas)
