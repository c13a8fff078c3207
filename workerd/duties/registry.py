"""The fleet registry heartbeat: one record per supervisor in Redis, read by the gateway's /stats.

Not the handler registry (workerd.registry). The record expires on its own when heartbeats
stop, so a supervisor that dies without leaving drops out within a few intervals.
"""

from __future__ import annotations

import contextlib
import os
import socket

import redis

from shared.scripts import Scripts
from workerd.children import WORKER, Roster

INTERVAL = 2.0  # seconds between heartbeats
TTL_INTERVALS = 5  # a record outlives this many missed heartbeats


class RegistryHeartbeat:
    """Writes {host, pid, workers, busy} under the supervisor's name every INTERVAL seconds."""

    def __init__(
        self, roster: Roster, scripts: Scripts, *, name: str, interval: float = INTERVAL
    ) -> None:
        self.roster = roster
        self.scripts = scripts
        self.name = name
        self.interval = interval
        self.next_beat = 0.0

    def tick(self, now: float) -> None:
        """Heartbeat when due: live workers and how many of them run a job."""
        if now < self.next_beat:
            return
        self.next_beat = now + self.interval
        live = self.roster.up(WORKER)
        busy = sum(1 for c in live if (s := self.roster.state(c)) is not None and s.job_id)
        fields: dict[str, str | int] = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "workers": len(live),
            "busy": busy,
        }
        # The registry is informational; an outage is logged by the loops it stops.
        with contextlib.suppress(redis.RedisError):
            ttl_ms = int(self.interval * TTL_INTERVALS * 1000)
            self.scripts.heartbeat(self.name, fields, ttl_ms=ttl_ms)

    def leave(self) -> None:
        """Remove the record at a clean exit (not at a reload: the same name comes back)."""
        with contextlib.suppress(redis.RedisError):  # else the record expires on its own
            self.scripts.heartbeat(self.name, {}, ttl_ms=1, leaving=True)
