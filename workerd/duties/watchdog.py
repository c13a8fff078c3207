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
        """Kill each child that is over its time; each is killed once."""
        for child in list(self.roster.children.values()):
            state = self.roster.state(child)
            if state is None or child.kill_reason is not None:
                continue
            if state.job_id:
                if state.job_timeout > 0 and now - state.job_started > state.job_timeout:
                    child.killed_job = (state.job_id, state.token, state.job_timeout, state.queue)
                    log.warning(
                        "child_killed",
                        extra={
                            "child": child.name,
                            "reason": "timeout",
                            "job_id": state.job_id,
                            "timeout_s": state.job_timeout,
                        },
                    )
                    self.roster.kill(child, "timeout")
            elif now - state.heartbeat > self.silence_timeout:
                log.error(
                    "child_silent", extra={"child": child.name, "silent_s": now - state.heartbeat}
                )
                self.roster.kill(child, "silent")
