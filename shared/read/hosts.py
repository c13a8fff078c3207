"""The workerd hosts in the registry, as the API lists them (read-only; the records are written
by each supervisor's heartbeat, workerd/duties/fleet_heartbeat.py, and heartbeat.lua).

Each record also lists the host's worker processes (``procs``, JSON): pid, current job (id,
type, queue), when it started that job and when the process last beat, as its supervisor
saw them at its last heartbeat (every 2 s).

A host's registry name is its supervisor's ``<hostname>-<pid>``: what ``POST
/workers/<name>/quiet`` takes. Two round trips: the registry zset, then every record (pipelined);
a record already expired (a host gone silent) is left out.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import redis

from shared.engine.keys import Keys
from shared.model.queues import parse_worker_queues

# A hostname's characters and the pid: what the API accepts as a registry name.
HOST_NAME_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,255}")


@dataclass(frozen=True)
class WorkerProcess:
    """One worker process of a host, as its supervisor last reported it."""

    pid: int
    job_id: str | None  # the job it runs; None: idle
    job_type: str | None
    queue: str | None
    busy_since_ms: int | None  # when it started that job (the host's clock)
    beat_ms: int | None  # its last heartbeat (the host's clock)
    # The worker id its jobs are claimed under (a job thread's, with WORKER_THREADS); None
    # from a workerd that did not say.
    worker: str | None = None


@dataclass(frozen=True)
class WorkerHost:
    """One workerd host's registry record."""

    name: str  # the registry name, <hostname>-<pid>
    host: str
    pid: int | None
    workers: int  # live worker processes
    busy: int  # of them, running a job
    quiet: bool  # claims nothing more until resumed (SIGTSTP, or the API)
    quiet_requested: bool | None  # an API request the host has not applied yet, if any
    worker_queues: str  # WORKER_QUEUES as the host serves it
    last_seen_ms: int
    processes: list[WorkerProcess] = field(default_factory=list)

    @property
    def queues(self) -> list[str]:
        """Return the names of the queues the host serves, in its order."""
        try:
            return list(parse_worker_queues(self.worker_queues).names)
        except ValueError:  # a record from before queues were recorded
            return []


def is_host_name(name: str) -> bool:
    """Tell whether `name` could be a registry name (the API refuses others with 400)."""
    return HOST_NAME_PATTERN.fullmatch(name) is not None


def list_hosts(client: redis.Redis, keys: Keys) -> list[WorkerHost]:
    """Return every host whose record has not expired, by name."""
    names = sorted(name.decode() for name in client.zrange(keys.workers, 0, -1))
    return [host for host in read_hosts(client, keys, names) if host is not None]


def read_hosts(client: redis.Redis, keys: Keys, names: list[str]) -> list[WorkerHost | None]:
    """Return the records of these hosts (None for one that has none), one round trip."""
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.hgetall(keys.worker(name))
    return [
        _host(name, raw) if raw else None for name, raw in zip(names, pipe.execute(), strict=True)
    ]


def _host(name: str, raw: dict[bytes, bytes]) -> WorkerHost:
    def text(field: str) -> str:
        return raw.get(field.encode(), b"").decode()

    def number(field: str) -> int:
        value = text(field)
        return int(value) if value.isdigit() else 0

    requested = raw.get(b"quiet_request")
    return WorkerHost(
        name=name,
        host=text("host"),
        pid=number("pid") or None,
        workers=number("workers"),
        busy=number("busy"),
        quiet=text("quiet") == "1",
        quiet_requested=None if requested is None else requested == b"1",
        worker_queues=text("plan") or text("queues"),
        last_seen_ms=number("last_seen"),
        processes=parse_processes(raw.get(b"procs")),
    )


def parse_processes(raw: bytes | None) -> list[WorkerProcess]:
    """Return the processes a record's ``procs`` lists; none for a record without (an older
    workerd) or one that is not what workerd writes (an edit by hand: left out, not a 500)."""
    if not raw:
        return []
    try:
        items = json.loads(raw)
    except ValueError:
        return []
    if not isinstance(items, list):
        return []
    return [process for item in items if (process := _process(item)) is not None]


def _process(item: Any) -> WorkerProcess | None:
    if not isinstance(item, dict) or type(item.get("pid")) is not int:
        return None

    def optional(name: str, kind: type) -> Any:
        value = item.get(name)
        return value if type(value) is kind else None

    return WorkerProcess(
        pid=item["pid"],
        job_id=optional("job_id", str),
        job_type=optional("type", str),
        queue=optional("queue", str),
        busy_since_ms=optional("busy_since_ms", int),
        beat_ms=optional("beat_ms", int),
        worker=optional("worker", str),
    )
