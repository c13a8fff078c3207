"""The watchdog: kills a worker past its job's timeout and any child gone silent outside a job.

It reads the slots the children write (no Redis). A timed-out worker's job is remembered on
the child, so that its reaping fails the job as a timeout (duties/release.py) and the job's
own line, job_timed_out, comes once, with that outcome.
"""

from __future__ import annotations

import logging

from workerd.children import Roster

log = logging.getLogger(__name__)


class Watchdog:
    """Kills children past their job's timeout, or silent for `silence_timeout` seconds."""

    def __init__(self, roster: Roster, *, silence_timeout: float) -> None:
        self.roster = roster
        self.silence_timeout = silence_timeout

    def tick(self, now: float) -> None:
        """Kill each child that is over its time; each is killed once.

        A job's timeout is its own slot's (one per job thread). Silence is the process's: a
        child is silent when none of its slots between jobs has beaten for `silence_timeout`
        (one thread beating tells the process lives; a slot running a job is timed by it).
        """
        for child in list(self.roster.children.values()):
            if child.kill_reason is not None:
                continue
            idle_beats: list[float] = []
            for index, state in self.roster.slot_states(child):
                if state is None:
                    continue
                if not state.job_id:
                    idle_beats.append(state.heartbeat)
                elif state.job_timeout > 0 and now - state.job_started > state.job_timeout:
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
                    break
            else:
                if idle_beats and now - max(idle_beats) > self.silence_timeout:
                    log.error(
                        "child_silent",
                        extra={"child": child.name, "silent_s": now - max(idle_beats)},
                    )
                    self.roster.kill(child, "silent")
