"""Holding the next job (WORKER_PREFETCH=on, the default): a worker starts its next job while the reply to
the last completion is still on its way.

Without it a worker's cycle is run → complete (claiming the next job) → wait for the reply →
run. With it, a worker whose next job is already in hand sends the completion (which claims the
one after) and starts the job in hand at once; it reads the reply when that job ends, by which
time it has long arrived. So a busy worker never waits for Redis between jobs: on a machine
where Redis and the workers share the cores, the completion's work runs beside the next job
instead of before it.

What holding costs, and its bounds (docs/WORKERD.md, "Holding the next job"):

- Only in a backlog: a worker claims ahead when its job came with the last completion (it went
  from job to job without waiting), so a worker fed one job at a time from idle pays no claim
  that would find the queue empty.
- A held job is claimed (processing, its lease running, attempt counted) while its worker runs
  the one before, so it waits that long although another worker may be idle. A worker holds
  only behind a job whose type usually runs shorter than SHORT_JOB in this process (an average
  over its recent runs; a type never seen is not short), so that wait is normally under
  SHORT_JOB.
- Its lease is not renewed while held (the supervisor renews the job a slot shows running): a
  held job older than half the lease when its turn comes is handed back, not run, and one
  held past its whole lease (the job before it hung) has been recovered by a scheduler, which
  counts one recovery against it; it is not run twice (its claim's token is stale by then).
- A worker that dies gives its held job back uncounted (release_worker.lua: only the job its
  slot showed running counts).
- The claim lock (workerd.slots.ClaimFence) is held from sending a completion that claims to
  reading its reply, so once the host reports quiet, no claim of it answers, as without
  holding; quiet then waits for the running job's end, at most about READ_LATE.
- A held job that runs past READ_LATE (a short type running long, or hung until its timeout's
  SIGKILL) has the call in flight read meanwhile by the worker's flusher thread
  (workerd.ack_flusher, armed as each held job starts): the completion it carried is logged and
  counted then, not at that job's end (nor never, should the job be killed), and the claim
  lock goes back.

Only on one Redis (or a Sentinel's master) without durable mode: on a Cluster, or where each
completion must be confirmed by replicas (TASKFORGE_WAIT_REPLICAS), the worker waits for each
reply as with the setting off.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

from shared.engine.scripts.job_scripts import PendingAck, PendingClaim
from shared.model.jobs import Job
from workerd.execution import Outcome

# A job type whose runs in this process average under this many seconds is "short": only behind
# such a job does a worker hold its next one, so a held job waits about this long at most.
SHORT_JOB = 0.1
# Weight of the newest run in a type's average: one long run makes the type long at once.
NEWEST_RUN_WEIGHT = 0.3
# Seconds after its send past which a call in flight is read by the worker's flusher thread
# (workerd.ack_flusher) if the held job still runs: the job before it has its job_completed
# line and counts then, not at the held job's end (nor never, should the held job be killed),
# and the claim lock goes back. A held job is of a short type, so it seldom runs this long.
READ_LATE = SHORT_JOB


@dataclass
class InFlight:
    """A call sent and not yet read: a completion (which may claim the next job) or a claim."""

    sent: PendingAck | PendingClaim
    queue: str
    sent_at: float  # monotonic; a job it claimed has held its lease since about then
    claims: bool  # whether the call claims a job for this worker
    job: Job | None = None  # the completed job (None: a bare claim)
    outcome: Outcome | None = None
    fields: dict[str, object] = field(default_factory=dict)
    holding: str = ""  # the job in hand while it is in flight: a repeat never answers with it
    # The claim lock, held from the send to the read when the call claims.
    fence: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    late: LateRead | None = None  # read by the flusher while the held job ran long
    # The completion's task.acknowledge span (None, None when tracing is off): its job's span
    # attributes, and when the call was sent (wall-clock ms), the span's start.
    attributes: dict[str, object] | None = None
    sent_ms: int | None = None

    def age(self) -> float:
        """Seconds since the call was sent."""
        return time.monotonic() - self.sent_at


@dataclass
class LateRead:
    """What the flusher's read of a call in flight gave: the job it claimed, or the error
    the read raised (a bug: the main thread raises it where it would have read)."""

    claimed: Job | None = None
    error: BaseException | None = None

    def result(self) -> Job | None:
        """Return the job claimed; raise the read's error."""
        if self.error is not None:
            raise self.error
        return self.claimed


class RunTimes:
    """Each job type's recent handler time in this process, to tell which types are short."""

    def __init__(self) -> None:
        self._average: dict[str, float] = {}

    def observe(self, job_type: str, seconds: float) -> None:
        """Add one run of `job_type` that took `seconds`."""
        before = self._average.get(job_type)
        self._average[job_type] = (
            seconds if before is None else before + NEWEST_RUN_WEIGHT * (seconds - before)
        )

    def short(self, job_type: str) -> bool:
        """Tell whether `job_type`'s runs average under SHORT_JOB (False when never seen)."""
        average = self._average.get(job_type)
        return average is not None and average < SHORT_JOB
