"""The fleet registry heartbeat: one record per supervisor in Redis, read by the gateway's /stats
and /workers; and the host's quiet state, which the heartbeat settles.

Not the handler registry (workerd.handler_registry). The record expires on its own when heartbeats
stop, so a supervisor that dies without leaving drops out within a few intervals. It names the
queues the host serves and the job types it runs: a worker that leaves a job of a type it
does not run asks here whether a live host will take it (:func:`hosts_running`; routing in
docs/QUEUES.md).

Quiet (the host claims nothing more until resumed) is set by a signal, which the supervisor
applies at once and reports with an immediate heartbeat, or by ``POST /workers/<name>/quiet``,
which leaves a request in the record that the next heartbeat (within INTERVAL) applies.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Iterable, Sequence

import redis

from shared.engine.replies import text
from shared.engine.scripts import Scripts
from workerd.children import WORKER, Roster
from workerd.slots import SlotState

log = logging.getLogger(__name__)

INTERVAL = 2.0  # seconds between heartbeats: how late an API quiet or resume takes effect
TTL_INTERVALS = 5  # a record outlives this many missed heartbeats


class RegistryHeartbeat:
    """Writes {host, pid, workers, busy, queues, types, plan, procs, quiet} under the
    supervisor's name every INTERVAL seconds, and owns the host's quiet state."""

    def __init__(
        self,
        roster: Roster,
        scripts: Scripts,
        *,
        name: str,
        queues: Sequence[str],
        types: Iterable[str],
        plan: str = "",
        interval: float = INTERVAL,
        quiet: bool = False,
    ) -> None:
        self.roster = roster
        self.scripts = scripts
        self.name = name
        self.interval = interval
        self.next_beat = 0.0
        # Comma-separated: neither a queue name nor a job type can hold a comma. `plan` is
        # WORKER_QUEUES as the host serves it (weights and all), for GET /workers.
        self.serves = {
            "queues": ",".join(queues),
            "types": ",".join(sorted(types)),
            "plan": plan or ",".join(queues),
        }
        self.quiet = quiet
        self.quiet_by_signal = False  # a signal set `quiet` since the last heartbeat

    def signalled(self, quiet: bool, signal_name: str) -> None:
        """Apply a quiet (SIGTSTP) or resume (SIGCONT) now, and report it at the next tick."""
        if quiet != self.quiet:
            _log_change(quiet, signal_name)
        self.quiet, self.quiet_by_signal = quiet, True
        self.next_beat = 0.0  # a request waiting in the record must not outlive this word

    def tick(self, now: float) -> None:
        """Heartbeat when due: live workers, how many run a job; apply an API quiet request."""
        if now < self.next_beat:
            return
        self.next_beat = now + self.interval
        live = self.roster.up(WORKER)
        # One entry per job thread (WORKER_THREADS): each runs its own job, under one pid.
        slots = [
            (child, index, state)
            for child in live
            for index, state in self.roster.slot_states(child)
        ]
        states = [(child.pid, state) for child, _, state in slots]
        workers = [child.worker_id(index) for child, index, _ in slots]
        busy = sum(1 for _, s in states if s is not None and s.job_id)
        fields: dict[str, str | int] = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "workers": len(states),
            "busy": busy,
            "procs": processes_json(states, time.time(), time.monotonic(), workers),
            **self.serves,
        }
        # The registry is informational; an outage is logged by the loops it stops.
        with contextlib.suppress(redis.RedisError):
            ttl_ms = int(self.interval * TTL_INTERVALS * 1000)
            beat = self.scripts.heartbeat(
                self.name,
                fields,
                ttl_ms=ttl_ms,
                quiet=self.quiet,
                quiet_by_signal=self.quiet_by_signal,
            )
            self.quiet_by_signal = False
            if beat.quiet != self.quiet:
                _log_change(beat.quiet, "api")
                self.quiet = beat.quiet
                self.next_beat = now  # report it back at once: the record drops the request

    def leave(self) -> None:
        """Remove the record at a clean exit (not at a reload: the same name comes back)."""
        with contextlib.suppress(redis.RedisError):  # else the record expires on its own
            self.scripts.heartbeat(self.name, {}, ttl_ms=1, leaving=True)


def processes_json(
    states: Sequence[tuple[int, SlotState | None]],
    wall_now: float,
    monotonic_now: float,
    workers: Sequence[str] = (),
) -> str:
    """Return the record's ``procs``: each worker process, its current job, when it started it
    and when it last beat, as compact JSON (shared.read.hosts reads it). With WORKER_THREADS,
    one entry per job thread; `workers` (when given, one per state) names the worker id each
    claims under (``claimed_by``).

    The slots hold monotonic times (immune to clock steps); the record holds epoch ms, as seen
    from this host's clock now. A job id, type and queue name are not a payload: fine to show.
    A slot being written at this instant is left out until the next heartbeat.
    """

    def epoch_ms(monotonic: float) -> int:
        return int((wall_now - (monotonic_now - monotonic)) * 1000)

    procs = []
    names = list(workers) or [None] * len(states)
    for (pid, state), worker in zip(states, names, strict=True):
        if state is None:
            continue
        running = state.job_id is not None
        procs.append(
            {
                "pid": pid,
                **({"worker": worker} if worker else {}),
                "job_id": state.job_id,
                "type": (state.job_type or None) if running else None,
                "queue": (state.queue or None) if running else None,
                "busy_since_ms": epoch_ms(state.job_started) if running else None,
                "beat_ms": epoch_ms(state.heartbeat),
            }
        )
    return json.dumps(procs, separators=(",", ":"))


def _log_change(quiet: bool, cause: str) -> None:
    event = "supervisor_quiet" if quiet else "supervisor_resumed"
    log.info(event, extra={"cause": cause})


def hosts_running(scripts: Scripts, queue: str, job_type: str) -> list[str]:
    """Return the live workerd hosts (registry names) that serve `queue` and run `job_type`.

    Two round trips (the registry's names, then one pipelined read of their records), made
    only when a worker has left a job (at most once per queue every few seconds per worker).
    A host whose record expired counts as gone, as in /stats.
    """
    client, keys = scripts.redis, scripts.keys
    names = [text(name) or "" for name in client.zrange(keys.workers, 0, -1)]
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.hmget(keys.worker(name), "queues", "types")
    found = []
    for name, (queues, types) in zip(names, pipe.execute(), strict=True):
        if queues is None or types is None:
            continue
        if queue in queues.decode().split(",") and job_type in types.decode().split(","):
            found.append(name)
    return found
