"""gunicorn settings for the gateway: ``gunicorn -c deploy/gunicorn.conf.py 'gateway:create_app()'``.

Environment: TASKFORGE_BIND_HOST (default 0.0.0.0) and PORT (Heroku) else PORT_PRODUCER else
8080 say where to listen; WEB_CONCURRENCY worker processes; GUNICORN_THREADS threads per
worker; PROMETHEUS_MULTIPROC_DIR (default: a fresh directory under the temp dir, removed when
gunicorn exits). Command-line flags still override anything set here.

``python deploy/gunicorn.conf.py`` prints the address gunicorn would bind (bin/run shows it).
"""

from __future__ import annotations

import faulthandler
import ipaddress
import logging
import os
import socket
from typing import Any

# Standard library only (no prometheus_client, see below): safe to import this early.
from shared.settings.config import VARIABLES, ConfigError

_BIND_HOST = next(v for v in VARIABLES if v.env == "TASKFORGE_BIND_HOST")
_EVENTS_STREAMS = next(v for v in VARIABLES if v.env == "TASKFORGE_EVENTS_STREAMS")

# --- where to listen ------------------------------------------------------------------------


def _port() -> int:
    for name in ("PORT", "PORT_PRODUCER"):
        value = os.environ.get(name, "").strip()
        if value:
            if not value.isdigit() or not 1 <= int(value) <= 65535:
                raise SystemExit(f"gunicorn.conf.py: {name}={value!r} is not a port (1..65535)")
            return int(value)
    return 8080


def _host() -> str:
    # Parsed as workerd parses it (an IP address or a hostname; default 0.0.0.0, which a
    # platform's router or a container's port mapping needs). bin/run sets 127.0.0.1.
    try:
        return _BIND_HOST.value(os.environ.get("TASKFORGE_BIND_HOST", "").strip(), [])
    except ConfigError as exc:
        raise SystemExit(f"gunicorn.conf.py: {exc}") from None


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _events_streams() -> int:
    # The gateway reads it too (its bound on open GET /events streams); parsed the same way.
    try:
        return _EVENTS_STREAMS.value(os.environ.get("TASKFORGE_EVENTS_STREAMS", "").strip(), [])
    except ConfigError as exc:
        raise SystemExit(f"gunicorn.conf.py: {exc}") from None


def _count(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    if not value.isdigit() or int(value) < 1:
        raise SystemExit(f"gunicorn.conf.py: {name}={value!r} is not a count (1 or more)")
    return int(value)


PORT = _port()
bind = [_address(_host(), PORT)]

if __name__ == "__main__":
    # gunicorn loads this file as "__config__", never as "__main__". bin/run asks here, so
    # the address it announces is the one computed above, not a copy of this logic.
    print(bind[0])
    raise SystemExit(0)

# --- Prometheus multiprocess mode -----------------------------------------------------------
# prometheus_client picks its value storage when first imported, so the directory must be in
# the environment before anything imports it: here, in the config body, before gunicorn loads
# the logger class or the app. This body runs again on every reload (SIGHUP), and a reload
# must not forget the counters of running workers: a reload finds the directory in the
# environment, and shared.obs.multiproc remembers (across reloads) whether this process made it.
#
# A PROMETHEUS_MULTIPROC_DIR set by the user is theirs: wiped at start, kept at exit. Without
# one, each start gets a fresh directory of its own (so two gateways on one port never empty
# each other's), removed on exit.
from shared.obs.multiproc import (  # noqa: E402
    MULTIPROC_ENV,
    is_private_multiprocess_dir,
    prepare_multiprocess_dir,
    private_multiprocess_dir,
    remove_private_multiprocess_dir,
)

METRICS_DIR = os.environ.get(MULTIPROC_ENV, "").strip() or str(
    private_multiprocess_dir(f"taskforge-gateway-{PORT}-")
)
prepare_multiprocess_dir(METRICS_DIR, wipe=False)

# Only now may prometheus_client be imported (shared.obs.metrics does). Importing here, not in
# child_exit, matters too: gunicorn runs child_exit from its SIGCHLD handler, which can
# interrupt another import halfway. gateway.app (Flask) is imported here for the same reason,
# and so that its workers leave the open-gateway warning to when_ready below.
from gateway import app as gateway_app  # noqa: E402
from gateway import worker_signals  # noqa: E402
from gateway.body import MAX_BODY_BYTES  # noqa: E402
from gateway.events_api import watch_worker  # noqa: E402
from gateway.server import install_json_errors  # noqa: E402
from shared.engine.redis_checks import refuse_cluster_node_behind_plain_url  # noqa: E402
from shared.obs.metrics import mark_dead  # noqa: E402
from shared.settings.config import Settings  # noqa: E402

gateway_app.leave_open_warning_to_server()

# --- workers --------------------------------------------------------------------------------
# gateway.http_worker: gunicorn's gthread, except that the main thread reads each request head
# itself (non-blocking, within 10 s of the connection's accept), so an idle or slow client
# holds a socket, never a thread, and only a complete head reaches a thread. The body and the
# answer are still read and written by that thread: a client trickling a body holds it for as
# long as it trickles (a buffering proxy removes that: docs/DEPLOYMENT.md, "Connections").
# Redis connections do not grow with threads: gateway/app.py caps its pool per worker.
worker_class = "gateway.http_worker.HeadReadingWorker"
workers = _count("WEB_CONCURRENCY", 2)
# An open GET /events stream, or a GET /jobs/<id>?wait= waiting, holds a thread for as long as
# it lasts; the gateway serves at most TASKFORGE_EVENTS_STREAMS of them per process (503
# beyond), and each gets a thread of its own here, so GUNICORN_THREADS threads still answer
# everything else with all of them open.
threads = _count("GUNICORN_THREADS", 32) + _events_streams()
# Open connections per worker (waiting for a head, idle between requests, or being served).
# At the cap the worker closes the one that has waited longest without a complete head; it
# never stops accepting. Lowered to the open-files limit (less 256) if that is smaller: the
# worker raises its soft limit to the hard one, which the systemd unit sets to 65536.
worker_connections = 10_000

# Connections the kernel queues before the worker accepts them (capped by the kernel's
# net.core.somaxconn, 4096 on current Linux): a flood of thousands of connects at once
# overflows a short queue, and a real client whose connect is dropped retries after a second.
backlog = 4096

# --- limits and timeouts --------------------------------------------------------------------
limit_request_line = 4094  # bytes of "POST /path?query HTTP/1.1"
limit_request_fields = 50  # headers per request
limit_request_field_size = 8190  # bytes per header (a bearer token fits many times)
# Bodies are limited to 1 MiB by the app, which refuses a larger Content-Length unread.
timeout = 30  # a worker silent this long (stuck) is killed and replaced
graceful_timeout = 25  # after SIGTERM: Heroku sends SIGKILL 30 s after its SIGTERM
keepalive = 5  # seconds an idle keep-alive connection is kept
max_requests = 20_000  # replace workers now and then: a slow leak never grows unbounded
max_requests_jitter = 2_000  # ... and not all at once
if os.path.isdir("/dev/shm"):
    # The heartbeat file is touched constantly; on a disk-backed /tmp a slow fsync can make
    # the master think a busy worker hung (gunicorn's own advice for containers).
    worker_tmp_dir = "/dev/shm"

# --- logs -----------------------------------------------------------------------------------
# One JSON line per request and per gunicorn message, on stdout, in the shared log schema.
logger_class = "gateway.server.JsonLogger"
accesslog = "-"
errorlog = "-"
loglevel = os.environ.get("LOG_LEVEL", "info").strip().lower() or "info"
proc_name = "taskforge-gateway"


# --- hooks ----------------------------------------------------------------------------------
def on_starting(server: Any) -> None:
    """Wipe the metrics directory of a previous run; answer gunicorn's own errors in JSON."""
    # A fresh private directory is empty; wiping it would only recreate it with laxer modes.
    prepare_multiprocess_dir(METRICS_DIR, wipe=not is_private_multiprocess_dir(METRICS_DIR))
    install_json_errors()
    try:
        settings = Settings.from_env(os.environ)
    except ConfigError:
        return  # every worker refuses to boot and says why
    # Here, in the master: a worker exiting for it would only be forked again.
    refuse_cluster_node_behind_plain_url(settings)


def when_ready(server: Any) -> None:
    """Say once per start, naming the address, when anyone beyond this host may call the API."""
    try:
        if Settings.from_env(os.environ).api_token is not None:
            return
    except ConfigError:
        return  # every worker refuses to boot and says why; no second message here
    exposed = [address for lnr in server.LISTENERS if (address := _beyond_loopback(lnr.sock))]
    if exposed:
        logging.getLogger("gateway").warning(
            "config_warning",
            extra={"warning": gateway_app.AUTH_DISABLED, "address": ", ".join(exposed)},
        )


def _beyond_loopback(sock: socket.socket) -> str | None:
    """Return the bound address of a TCP listener not on loopback, else None."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return None  # a unix socket: only this host can connect
    host, port = sock.getsockname()[:2]
    return None if ipaddress.ip_address(host).is_loopback else _address(host, port)


def on_exit(server: Any) -> None:
    """Remove the metrics directory this gunicorn made for itself (a user's stays)."""
    remove_private_multiprocess_dir()


def worker_exit(server: Any, worker: Any) -> None:
    """Log the worker's departure in the shared schema."""
    logging.getLogger("gateway").info("gateway_stopped", extra={"worker_pid": worker.pid})


def child_exit(server: Any, worker: Any) -> None:
    """Forget a dead worker's live gauges (its counters stay in the totals)."""
    mark_dead(worker.pid)


def pre_fork(server: Any, worker: Any) -> None:
    """Hold a stop signal sent to the worker before its own handlers are in (the worker
    class's init_signals takes it): gunicorn's boot would lose it and wait graceful_timeout
    for that worker (gateway.worker_signals)."""
    worker_signals.hold_across_fork()


def post_worker_init(worker: Any) -> None:
    """Let open event streams end as soon as the worker stops (SIGTERM, or recycling); start
    the fleet view now, so the first enqueue already has warnings to give."""
    watch_worker(lambda: worker.alive)
    gateway_app.start_fleet_view(worker.wsgi)
    # A fatal signal (a C extension's SIGSEGV) prints every thread's Python stack to stderr,
    # beside gunicorn's "Worker was sent SIGSEGV!" line.
    faulthandler.enable()


def pre_request(worker: Any, req: Any) -> None:
    """Close the connection after a body the app may refuse unread (over 1 MiB, or chunked).

    With keep-alive, gunicorn would otherwise read and discard the rest of such a body before
    the next request on the connection: up to its full size, in a thread that serves no one.
    """
    for name, value in req.headers:
        if name == "TRANSFER-ENCODING" or (
            name == "CONTENT-LENGTH" and value.isdigit() and int(value) > MAX_BODY_BYTES
        ):
            req.force_close()
            return
