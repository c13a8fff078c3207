"""Readiness: the supervisor's status for /ready (in shared memory) and systemd's notify messages.

READY=1 goes out once, when every worker and the scheduler are up and Redis has answered;
STOPPING=1 or RELOADING=1 when a drain begins, after which READY=1 is never sent by this image.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from workerd import sd_notify as notify
from workerd.children import SCHEDULER, WORKER, Roster
from workerd.duties.script_loading import ScriptLoader

log = logging.getLogger(__name__)


class Readiness:
    """Publishes the supervisor's status every tick and tells systemd about each change."""

    def __init__(
        self,
        roster: Roster,
        loader: ScriptLoader,
        *,
        worker_count: int,
        reloaded: bool,
        send: Callable[[str], bool] = notify.notify,
        quiet: Callable[[], bool] = lambda: False,
    ) -> None:
        self.roster = roster
        self.quiet = quiet  # the host's quiet state, published with the rest for its workers
        self.loader = loader
        self.worker_count = worker_count
        self.reloaded = reloaded  # this image was started by a reload: said in supervisor_ready
        self.send = send
        self.ready_sent = False
        self.draining = False

    def tick(self, now: float) -> None:
        """Publish live workers, scheduler, scripts and quiet; send READY=1 once all are up."""
        live, scheduler_up = self.publish()
        up = live == self.worker_count and scheduler_up and self.loader.loaded
        if up and not self.ready_sent and not self.draining:
            self.ready_sent = True
            self.send(f"READY=1\nSTATUS={live} workers running")
            log.info("supervisor_ready", extra={"workers": live, "reloaded": self.reloaded})

    def publish(self) -> tuple[int, bool]:
        """Publish the status now (a quiet change must reach the workers before their next
        claim); return live workers and whether the scheduler is up."""
        live = len(self.roster.up(WORKER))
        scheduler_up = bool(self.roster.up(SCHEDULER))
        self.roster.table.publish_status(live, scheduler_up, self.loader.loaded, self.quiet())
        return live, scheduler_up

    def on_stopping(self) -> None:
        """A shutdown drain began (SIGTERM/SIGINT)."""
        self.draining = True
        self.send("STOPPING=1")

    def on_reloading(self) -> None:
        """A reload's drain began: systemd waits for the new image's READY=1."""
        self.draining = True
        # MONOTONIC_USEC lets systemd (v253+) match this reload to the READY=1 that ends it.
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self.send(f"RELOADING=1\nMONOTONIC_USEC={usec}")
