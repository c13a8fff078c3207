"""The observability server process: /health, /ready and /metrics on PORT_WORKER.

A child of the supervisor, so a slow scrape never delays the supervisor's loop. It serves one
request at a time (scrapes and probes are rare and short), reads the supervisor's status from
shared memory, and reads queue depths from Redis at scrape time. /health also says which
queues this host serves (WORKER_QUEUES), so a probe of one host shows its routing.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import redis
from prometheus_client.core import GaugeMetricFamily

from shared.connect.redis_conn import is_cluster, primary_named
from shared.engine import durable
from shared.engine.cluster_health import check_masters
from shared.engine.scripts import Scripts
from shared.model.queues import QueuePlan
from shared.obs.log import unavailable_text
from shared.obs.metrics import BUSY_WORKERS_NAME
from shared.read import state_gauges
from workerd.children import StopOnSignal
from workerd.slots import Slot, SlotTable

log = logging.getLogger(__name__)

# The supervisor publishes its status every tick; older than this means it is stuck or gone.
STATUS_FRESH_SECONDS = 5.0
StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class _QuietHandler(WSGIRequestHandler):
    """Keep wsgiref's per-request lines off stdout: logs there are JSON, one schema."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class ObservabilityApp:
    """A tiny WSGI app: three read-only endpoints, JSON or Prometheus text."""

    def __init__(self, scripts: Scripts, table: SlotTable, plan: QueuePlan) -> None:
        self.scripts = scripts
        self.table = table
        self.plan = plan
        self.busy = BusyWorkers(table)

    def __call__(self, environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
        path, method = environ.get("PATH_INFO", ""), environ.get("REQUEST_METHOD", "GET")
        routes = {"/health": self.health, "/ready": self.ready, "/metrics": self.metrics}
        if path not in routes:
            return _json(start, 404, {"error": "not found"})
        if method not in ("GET", "HEAD"):
            return _json(start, 405, {"error": "method not allowed"}, [("Allow", "GET, HEAD")])
        return routes[path](start)

    def health(self, start: StartResponse) -> Iterable[bytes]:
        """Answer 200 when Redis answers; either way, name the queues this host serves and
        say whether it is quiet (claims nothing)."""
        queues, quiet = queues_served(self.plan), self.table.quiet()
        try:
            self.scripts.redis.ping()
        except redis.RedisError as exc:
            body = {"status": "unavailable", "redis": "unreachable", "queues": queues}
            body["reason"] = unavailable_text(exc)
            return _json(start, 503, {**body, "quiet": quiet})
        body = {
            "status": "ok",
            "redis": "ok",
            **primary_named(self.scripts.redis),
            "queues": queues,
        }
        return _json(start, 200, {**body, "quiet": quiet})

    def ready(self, start: StartResponse) -> Iterable[bytes]:
        """Answer 200 when Redis answers, scripts are loaded, and the children are up."""
        if is_cluster(self.scripts.redis):
            return self._cluster_ready(start)
        wanted = self.scripts.policy.wait_replicas
        try:
            self.scripts.redis.ping()
            self.scripts.ensure_loaded()  # reloads them after a Redis restart
            # Durable mode: fewer replicas than wanted leaves workerd ready (it claims and
            # runs jobs), but no completion counts until one confirms it: said here.
            replicas = durable.replicas_body(self.scripts.redis, wanted) if wanted else None
        except redis.RedisError as exc:
            body = {"status": "not ready", "redis": "unreachable", "reason": unavailable_text(exc)}
            return _json(start, 503, body)
        status, problems = self._children_problems()
        if status is None or problems:
            return _json(start, 503, {"status": "not ready", "redis": "ok", "problems": problems})
        # Quiet is not "not ready": the host is up, it only claims nothing (its own choice).
        body = {
            "status": "ready",
            "redis": "ok",
            **primary_named(self.scripts.redis),
            "quiet": status.quiet,
        }
        if replicas is not None:
            body["replicas"] = replicas
        return _json(start, 200, body)

    def _cluster_ready(self, start: StartResponse) -> Iterable[bytes]:
        """On a cluster: ready while at least one master answers, naming those that do not
        (their queues wait; the workers serve the others), 503 when none answers."""
        masters = check_masters(self.scripts)
        if not masters.answering:
            body = {"status": "not ready", "redis": "unreachable", "reason": masters.reason()}
            return _json(start, 503, {**body, "masters_down": masters.down})
        status, problems = self._children_problems()
        redis_state = "degraded" if masters.down else "ok"
        if status is None or problems:
            body = {"status": "not ready", "redis": redis_state, "problems": problems}
            return _json(start, 503, {**body, **masters.body()})
        body = {"status": "ready", "redis": redis_state, **masters.body(), "quiet": status.quiet}
        if masters.replicas is not None:
            body["replicas"] = masters.replicas
        return _json(start, 200, body)

    def _children_problems(self) -> tuple[Any, list[str]]:
        """Return the supervisor's status and what keeps its children from serving."""
        status = self.table.status()
        problems = []
        if status is None or time.monotonic() - status.heartbeat > STATUS_FRESH_SECONDS:
            problems.append("supervisor not responding")
        else:
            if not status.scheduler_alive:
                problems.append("scheduler not running")
            if status.live_workers < 1:
                problems.append("no worker process running")
        return status, problems

    def metrics(self, start: StartResponse) -> Iterable[bytes]:
        """Answer Prometheus text: every child's counters plus queue depths read now."""
        try:
            # Stats, then limits; this host's busy workers from its slots.
            body, content_type = state_gauges.scrape(self.scripts, extra=[self.busy])
        except redis.RedisError:
            return _json(start, 503, {"error": "redis unavailable"})
        start("200 OK", [("Content-Type", content_type), ("Content-Length", str(len(body)))])
        return [body]


class BusyWorkers:
    """taskforge_busy_workers, counted at scrape time: the slots that show a running job.

    A worker writes its slot when a job starts and ends anyway (the supervisor renews leases
    and enforces timeouts from it), so the count costs a job nothing; a gauge the worker set
    cost two metric-file writes per job. Only workers' slots ever show a job, and a dead
    worker's slot is cleared when the supervisor reaps it.
    """

    def __init__(self, table: SlotTable) -> None:
        self.table = table

    def count(self) -> int:
        """Return how many slots show a running job now (a torn reading counts as idle)."""
        states = (self.table.slot(index).read() for index in range(self.table.count))
        return sum(1 for state in states if state is not None and state.job_id)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Yield the gauge."""
        yield GaugeMetricFamily(
            BUSY_WORKERS_NAME,
            "Workers (job threads) of this supervisor running a job.",
            value=self.count(),
        )


def queues_served(plan: QueuePlan) -> dict[str, Any]:
    """Return the WORKER_QUEUES plan as JSON: its mode, its queues in order, their weights."""
    weights = None
    if plan.weights is not None:
        weights = dict(zip(plan.names, plan.weights, strict=True))
    mode = "weighted" if plan.weighted else "strict"
    return {"mode": mode, "names": list(plan.names), "weights": weights}


def _json(
    start: StartResponse, status: int, body: dict[str, Any], headers: list[tuple[str, str]] = ()
) -> Iterable[bytes]:
    reasons = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}
    data = json.dumps(body).encode()
    start(
        f"{status} {reasons[status]}",
        [("Content-Type", "application/json"), ("Content-Length", str(len(data))), *headers],
    )
    return [data]


class _WSGIServer6(WSGIServer):
    address_family = socket.AF_INET6


def _server_class(host: str) -> type[WSGIServer]:
    try:
        ipv6 = ipaddress.ip_address(host).version == 6
    except ValueError:
        ipv6 = False  # a hostname: wsgiref resolves it for IPv4
    return _WSGIServer6 if ipv6 else WSGIServer


def bind(host: str, port: int, *, inherited_fd: int | None = None) -> WSGIServer:
    """Bind the listening socket in the supervisor, before forking: a port in use fails start-up.

    With `inherited_fd` (a reload: the socket came through exec) the server adopts that socket
    instead, so the port stays bound across the reload and no probe is refused meanwhile.
    """
    server_class = _server_class(host)
    if inherited_fd is None:
        server = make_server(host, port, _unavailable, server_class, _QuietHandler)
    else:
        server = server_class((host, port), _QuietHandler, bind_and_activate=False)
        server.socket.close()
        server.socket = socket.socket(fileno=inherited_fd)
        server.socket.set_inheritable(False)
        server.server_address = server.socket.getsockname()
        server.server_name, server.server_port = host, server.server_address[1]
        server.setup_environ()
        server.set_app(_unavailable)
    server.timeout = 0.5
    return server


def listens_beyond_loopback(server: WSGIServer) -> bool:
    """Tell whether the server's socket is reachable from other machines (not 127.x or ::1)."""
    return not ipaddress.ip_address(server.socket.getsockname()[0]).is_loopback


def _unavailable(_environ: dict[str, Any], start: StartResponse) -> Iterable[bytes]:
    return _json(start, 503, {"error": "starting"})


class ObservabilityServer(StopOnSignal):
    """Serves the app on the inherited socket until SIGTERM or until the supervisor is gone."""

    def __init__(self, server: WSGIServer, app: ObservabilityApp, slot: Slot, parent_pid: int):
        self.server = server
        self.server.set_app(app)
        self.slot = slot
        self.parent_pid = parent_pid
        self.stopping = False

    def run(self) -> int:
        """Serve until stopped or orphaned; return the exit code."""
        while not self.stopping and os.getppid() == self.parent_pid:
            self.slot.beat()
            self.server.handle_request()
        self.server.server_close()
        return 0
