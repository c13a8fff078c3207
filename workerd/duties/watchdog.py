"""The watchdog: kills a worker past its job's timeout and any child gone silent outside a job,
and drains a worker one of whose job threads is stuck between jobs.

It reads the slots the children write (no Redis). A timed-out worker's job is remembered on
the child, so that its reaping fails the job as a timeout (duties/release.py) and the job's
own line, job_timed_out, comes once, with that outcome.

A job thread between jobs beats at every step (a 1 s BLPOP at most when idle; 0.5 s at the
alone gate; after each try of a write that waits out a Redis outage, workerd.acks), so one
that has not beaten for STUCK_FACTOR x `silence_timeout` while a sibling between jobs has is
stuck by a bug of ours, and its process runs a thread short for good. Killing the process at
once would take its siblings' running jobs, whose only fault is to share it: it is drained
instead (they finish, up to `drain_grace`, and claim nothing more), then killed once none
runs, the stuck thread never ending; a job still running at the grace's end goes back
uncounted. A thread that beats again meanwhile was slow, not stuck: the drain goes on alone.
"""

from __future__ import annotations

import logging

from workerd.children import Child, Roster, StuckThread
from workerd.slots import SlotState

log = logging.getLogger(__name__)

# A thread between jobs is stuck when it has not beaten for this many times the silence
# timeout while a sibling has: more than silence asks, as one thread's idle wait (a 1 s
# BLPOP) may cross a small WORKER_HEARTBEAT_TIMEOUT while a sibling has just beaten.
STUCK_FACTOR = 2


class Watchdog:
    """Kills children past their job's timeout, or silent for `silence_timeout` seconds, and
    drains (then kills) one with a job thread stuck between jobs."""

    def __init__(self, roster: Roster, *, silence_timeout: float, drain_grace: float) -> None:
        self.roster = roster
        self.silence_timeout = silence_timeout
        self.drain_grace = drain_grace

    def tick(self, now: float) -> None:
        """Kill each child that is over its time; each is killed once.

        A job's timeout is its own slot's (one per job thread). Silence is the process's: a
        child is silent when none of its slots between jobs has beaten for `silence_timeout`
        (one thread beating tells the process lives; a slot running a job is timed by it).
        One slot between jobs that has not beaten while another has: that thread is stuck,
        and its process is drained, then killed (the module's docstring).
        """
        for child in list(self.roster.children.values()):
            if child.kill_reason is not None:
                continue
            states = self.roster.slot_states(child)
            if self._timed_out(child, states, now):
                continue
            if child.stuck is not None:
                self._drain_or_kill_stuck(child, child.stuck, states, now)
                continue
            idle_beats = [(s.heartbeat, i) for i, s in states if s is not None and not s.job_id]
            if not idle_beats:
                continue
            newest, _ = max(idle_beats)
            oldest, stuck = min(idle_beats)
            if now - newest > self.silence_timeout:
                log.error("child_silent", extra={"child": child.name, "silent_s": now - newest})
                self.roster.kill(child, "silent")
            elif now - oldest > STUCK_FACTOR * self.silence_timeout:
                log.error(
                    "child_thread_stuck",
                    extra={
                        "child": child.name,
                        "worker_id": child.worker_id(stuck),
                        "silent_s": now - oldest,
                        "grace_s": self.drain_grace,
                    },
                )
                child.stuck = StuckThread(stuck, oldest, now + self.drain_grace)
                self.roster.drain(child)

    def _drain_or_kill_stuck(
        self,
        child: Child,
        stuck: StuckThread,
        states: list[tuple[int, SlotState | None]],
        now: float,
    ) -> None:
        """A child drained for a stuck thread: killed once no sibling runs a job (the stuck
        one never lets the process exit), or at the grace's end; left to its drain if the
        thread beat again (slow, not stuck: it may even run a job, which is not to blame)."""
        state = dict(states).get(stuck.slot)
        if state is not None and (state.heartbeat > stuck.beat or state.job_id):
            log.warning("child_thread_unstuck", extra={"child": child.name})
            child.stuck = None
            return
        # A slot read mid-write (None) may be starting a job: wait a tick.
        running = any(s is None or s.job_id for i, s in states if i != stuck.slot)
        if now >= stuck.deadline or not running:
            self.roster.kill(child, "stuck", culprit=stuck.slot)

    def _timed_out(
        self, child: Child, states: list[tuple[int, SlotState | None]], now: float
    ) -> bool:
        """Kill `child` if one of its slots' jobs is past its timeout; say whether it was."""
        for index, state in states:
            if state is None or not state.job_id:
                continue
            if state.job_timeout > 0 and now - state.job_started > state.job_timeout:
                child.killed_job = state
                log.warning(
                    "child_killed",
                    extra={
                        "child": child.name,
                        "reason": "timeout",
                        "job_id": state.job_id,
                        "timeout_s": state.job_timeout,
                    },
                )
                self.roster.kill(child, "timeout", culprit=index)
                return True
        return False
