"""workerd hosts: list them, quiet one (it claims nothing more), resume one.

A request is left in the host's registry record; its supervisor applies it at its next registry
heartbeat (within 2 s), hence 202. The host's `quiet` shows what it runs with; a request it has
not applied yet shows as `quiet_requested`. SIGTSTP and SIGCONT do the same on the host itself.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from gateway import inputs
from gateway.actions import fleet_actions as actions
from gateway.context import gateway
from gateway.http_errors import ApiError
from gateway.routes import route
from shared.model.jobs import format_ms
from shared.read.hosts import WorkerHost, WorkerProcess, is_host_name, list_hosts, read_hosts

bp = Blueprint("workers", __name__)


def host_json(host: WorkerHost) -> dict[str, Any]:
    """Return one host as GET /workers lists it."""
    return {
        "name": host.name,
        "host": host.host,
        "pid": host.pid,
        "workers": host.workers,
        "busy": host.busy,
        "quiet": host.quiet,
        "quiet_requested": host.quiet_requested,
        "queues": host.queues,
        "worker_queues": host.worker_queues,
        "last_seen": format_ms(host.last_seen_ms),
        "processes": [process_json(process) for process in host.processes],
    }


def process_json(process: WorkerProcess) -> dict[str, Any]:
    """Return one worker process as GET /workers lists it: its current job, if it runs one.

    An idle process lists no job field at all rather than nulls, so whatever follows a
    process's job_id (a client, the document's inferred links) never meets a null id.
    """
    job = {
        "job_id": process.job_id,
        "type": process.job_type,
        "queue": process.queue,
        "busy_since": format_ms(process.busy_since_ms),
    }
    doc: dict[str, Any] = {"pid": process.pid, "last_heartbeat": format_ms(process.beat_ms)}
    if process.worker is not None:
        doc["worker"] = process.worker
    if process.job_id is not None:
        doc.update((name, value) for name, value in job.items() if value is not None)
    return doc


@route(bp, "GET", "/workers")
def list_workers() -> dict[str, Any]:
    """Return every live workerd host: its workers and what each runs, quiet, its queues."""
    gw = gateway()
    return {"hosts": [host_json(host) for host in list_hosts(gw.redis, gw.keys)]}


def _ask(name: str, quiet: bool) -> tuple[dict[str, Any], int]:
    if not is_host_name(name):
        raise ApiError(400, f"bad workerd host name {name[:64]!r}: expected <hostname>-<pid>")
    gw = gateway()
    actions.quiet_host(gw, name, quiet, by=inputs.asked_by())
    (host,) = read_hosts(gw.redis, gw.keys, [name])
    if host is None:  # it left (or expired) just now
        raise ApiError(404, "workerd host not found")
    return host_json(host), 202


@route(bp, "POST", "/workers/<name>/quiet")
def quiet(name: str) -> tuple[dict[str, Any], int]:
    """Ask a host to finish its running jobs and claim nothing more: 202."""
    return _ask(name, True)


@route(bp, "POST", "/workers/<name>/resume")
def resume(name: str) -> tuple[dict[str, Any], int]:
    """Ask a quiet host to claim again: 202."""
    return _ask(name, False)
