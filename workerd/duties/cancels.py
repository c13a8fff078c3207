"""Stopping the workers whose job's cancel was requested: SIGTERM now, SIGKILL after a grace.

Lease renewal tells of a request (renew.lua answers CANCEL_ASKED for the job, in the call the
supervisor makes anyway): no polling of its own. The request goes into the worker's slot
first (workerd.slots.Control), so the worker's SIGTERM handler knows this signal means "stop
this job" (JobCanceled raised in the handler) and not "finish it, then exit". A worker still
running that same execution's handler once WORKER_CANCEL_GRACE is over is killed; its reaping
releases the job, and release_worker.lua ends it canceled (workerd.duties.release). One whose
handler has returned is left to write its outcome (Slot.handler_returned times that write).
"""

from __future__ import annotations

import logging
import signal
from dataclasses import dataclass

from workerd.children import Child, Roster
from workerd.slots import SlotState

log = logging.getLogger(__name__)

KILL_REASON = "cancel"  # Child.kill_reason of a worker killed past the grace


@dataclass(frozen=True)
class Stopping:
    """A worker asked to stop its job: which execution, and when the grace ends."""

    started: float  # the execution's start (its name in the slot)
    deadline: float  # monotonic
    job_id: str


class Cancels:
    """Signals the workers whose job is asked to stop, and kills those that do not."""

    def __init__(self, roster: Roster, *, grace: float) -> None:
        self.roster = roster
        self.grace = grace
        # (pid, slot) -> the execution asked to stop in that slot (a job thread's, with
        # WORKER_THREADS: the process's other threads go on with their jobs)
        self.stopping: dict[tuple[int, int], Stopping] = {}

    def request(self, child: Child, index: int, state: SlotState, now: float) -> None:
        """Ask `child` to stop the job its slot `index` shows (once per execution)."""
        asked = self.stopping.get((child.pid, index))
        if asked is not None and asked.started == state.job_started:
            return  # signalled already: renewals keep saying so until the job ends
        control = self.roster.table.slot(index).control
        if control is None or child.kill_reason is not None or not state.job_id:
            return
        control.request_cancel(state.job_started)  # before the signal, which it explains
        self.stopping[(child.pid, index)] = Stopping(
            state.job_started, now + self.grace, state.job_id
        )
        log.info(
            "cancel_signaled",
            extra={"child": child.name, "job_id": state.job_id, "grace_s": self.grace},
        )
        self.roster.spawner.kill(child.pid, signal.SIGTERM)

    def tick(self, now: float) -> None:
        """Kill each worker still running its canceled job past the grace; forget the rest."""
        for (pid, index), asked in list(self.stopping.items()):
            child = self.roster.children.get(pid)
            if child is None or child.kill_reason is not None:
                # gone (its reaping releases the job), or killed already
                del self.stopping[(pid, index)]
                continue
            state = self.roster.table.slot(index).read()
            if state is None:
                continue  # mid-write: next tick
            if state.job_started != asked.started:
                del self.stopping[(pid, index)]  # it stopped the job (or finished it first)
                continue
            if state.writing_outcome:
                # Its handler has returned (stopped by the cancel, or finished first): the
                # grace is for the handler. The outcome's write, which waits out a Redis
                # outage, is timed by its own limit (the watchdog); killed here, a finished job
                # would end canceled and a threaded process's other jobs would go back. Kept
                # (not signalled again by the renewals) until the slot moves on.
                continue
            if now >= asked.deadline:
                log.warning(
                    "child_killed",
                    extra={
                        "child": child.name,
                        "reason": "cancel grace over",
                        "job_id": asked.job_id,
                        "grace_s": self.grace,
                    },
                )
                self.roster.kill(child, KILL_REASON, culprit=index)
                del self.stopping[(pid, index)]
