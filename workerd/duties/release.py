"""Giving back the job of a worker that is gone: requeued, dead past the recovery cap, or failed
when the supervisor killed it for its timeout.

A death is seen at once (SIGCHLD), so the job goes back to pending without waiting out its
lease. What is owed is queued first and sent on the next tick; a Redis outage keeps it queued,
and if Redis stays away past the final window at exit, the lease expires and a scheduler
recovers the job anyway.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import redis

from shared.engine.engine_types import Code
from shared.engine.history import Actor
from shared.engine.lifecycle import Outcome, record
from shared.engine.scripts import Scripts
from shared.model.queues import DEFAULT_QUEUE
from shared.obs.log import error_text
from workerd.children import Child
from workerd.duties.cancels import KILL_REASON as CANCEL_KILL
from workerd.slots import SlotState

log = logging.getLogger(__name__)

RETRY_PAUSE = 0.1  # seconds between attempts inside the final window at exit
# What failing a timed-out job did; anything else (stale, gone): it was no longer ours.
TIMED_OUT = {Code.RETRYING: Outcome.TIMED_OUT_RETRYING, Code.DEAD: Outcome.TIMED_OUT_DEAD}


@dataclass
class OrphanedJob:
    """A job whose worker is gone and whose fate still has to reach Redis."""

    job_id: str
    token: int
    # "worker died", "drain" (shutdown), "cancel" (killed for it), "timeout", "sibling" (a job
    # thread's whose process was killed for another thread's job: given back uncounted) or
    # "isolate" (one of several jobs a threaded process died running, for no known cause:
    # given back uncounted, marked to run alone)
    action: str
    timeout: float = 0.0
    queue: str = DEFAULT_QUEUE  # the timed-out job's
    # How long its handler ran when it had returned and its outcome's write timed out; None
    # when the handler itself ran out of time.
    ran: float | None = None
    # The dead worker's id, for every action but "timeout": whatever it still holds goes back.
    # job_id then names the job its slot showed running ('' for none): the only one the action
    # applies to (any other it held never started: uncounted), and the one a line names if
    # Redis never answers.
    claimed_by: str = ""


class Release:
    """Queues the jobs of dead workers and sends their fate to Redis."""

    def __init__(
        self,
        scripts: Scripts,
        *,
        redis_url: str,
        queues: Sequence[str] = (DEFAULT_QUEUE,),
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.scripts = scripts
        self.redis_url = redis_url  # redacted
        self.queues = tuple(queues)  # every queue this host's workers serve
        self.clock = clock
        self.sleep = sleep
        self.owed: list[OrphanedJob] = []

    def on_worker_died(
        self,
        child: Child,
        states: Sequence[tuple[int, SlotState | None]],
        *,
        draining: bool,
    ) -> None:
        """Queue the fate of what a dead worker held: a timed-out job fails, the rest goes back.

        `states`: each of its slots (one per job thread) as last read. A process killed for one
        thread's job (timeout, lost lease, cancel past its grace) ends that job as today; the
        jobs of its other threads died for no fault of their own and go back uncounted.
        """
        killed = child.killed_job
        if killed is not None and killed.job_id and child.kill_reason == "timeout":
            # A slot beats only as its handler returns (Slot.handler_returned): a later beat
            # than the start means the outcome's write was what ran out of time.
            ran = killed.heartbeat - killed.job_started
            self.owed.append(
                OrphanedJob(
                    killed.job_id,
                    killed.token,
                    "timeout",
                    killed.job_timeout,
                    killed.queue,
                    ran=ran if ran > 0 else None,
                )
            )
        blamed = _blamed(child, states, draining)
        for index, state in states:
            self.owed.append(self._orphan(child, index, state, draining, blamed))

    def _orphan(
        self,
        child: Child,
        index: int,
        state: SlotState | None,
        draining: bool,
        blamed: Blame,
    ) -> OrphanedJob:
        """Return what one thread's worker id still holds, to give back.

        Whatever it holds is found in Redis by its id in one call: the job its slot showed,
        and one it claimed inside a claim or a complete its slot never showed. Only the slot's
        job takes the action; one the slot never showed never started and goes back uncounted
        (release_worker.lua). After a lost lease the slot's job is someone else's and is not
        found under this worker, so none is named and nothing held counts; after a timeout the
        job has failed first (owed in order) and is not found either. The slot's job id also
        names the job if Redis never answers.
        """
        culprit = blamed.everyone or index in blamed.slots
        lost = child.kill_reason == "lease lost" and culprit
        shown = state.job_id if state is not None and not lost else ""
        action = "drain" if draining else "worker died"
        if child.kill_reason == CANCEL_KILL and culprit:
            action = "cancel"  # its job ends canceled, not requeued (release_worker.lua)
        elif blamed.isolate and culprit:
            action = "isolate"
        elif not culprit and not draining:
            action = "sibling"
        return OrphanedJob(shown or "", 0, action, claimed_by=child.worker_id(index))

    def tick(self, now: float) -> None:
        """Send what is owed; stop at the first Redis error and keep the rest for later."""
        while self.owed:
            try:
                self._apply(self.owed[0])
            except redis.RedisError:
                return  # the children log the outage; the next tick tries again
            self.owed.pop(0)

    def settle(self, deadline: float) -> None:
        """At exit: keep trying until `deadline`, then give up on each job with a log line.

        A worker whose slot showed no job most likely held none: it gets one try inside the
        window (a claim whose reply its slot never showed goes back at once if Redis answers)
        and is then let go without a line, as its lease would recover such a claim anyway;
        an error naming no job would only alarm. Only a job known to be held is retried and,
        if Redis never answers, named in the line."""
        while self.owed:
            orphan = self.owed[0]
            if not orphan.job_id and self.clock() >= deadline:
                self.owed.pop(0)  # the window is spent (Redis refused the others): no try
                continue
            try:
                self._apply(orphan)
            except redis.RedisError as exc:
                if not orphan.job_id:
                    self.owed.pop(0)  # no job known held: nothing to name, nothing to retry
                    continue
                if self.clock() < deadline:
                    self.sleep(RETRY_PAUSE)
                    continue
                log.error(
                    "requeue_abandoned",
                    extra={
                        "job_id": orphan.job_id,
                        "redis": self.redis_url,
                        "error": error_text(exc),
                        "note": "its lease will expire and a scheduler recovers it",
                    },
                )
            self.owed.pop(0)

    def _apply(self, orphan: OrphanedJob) -> None:
        if orphan.action == "timeout":
            self._fail_timed_out(orphan)
            return
        # Whatever the dead worker still holds, found by its id in one engine call.
        drained = orphan.action in ("drain", "sibling")
        released = self.scripts.release_worker(
            orphan.claimed_by,
            running=orphan.job_id,
            drained=drained,
            queues=self.queues,
            canceling=orphan.action == "cancel",
            isolate=orphan.action == "isolate",
        )
        for job in released:
            # Any job but the slot's was held unstarted: given back as a drain gives it.
            action = orphan.action if job.job_id == orphan.job_id or drained else "unstarted"
            _report_release(job.job_id, action, job.code, job.job_type, job.queue)

    def _fail_timed_out(self, orphan: OrphanedJob) -> None:
        if orphan.ran is None:
            error = f"Timeout: timed out after {orphan.timeout:g}s; its worker was killed"
        else:
            error = (
                f"Timeout: its handler returned after {orphan.ran:.3f}s, but its outcome was not "
                f"written within {orphan.timeout - orphan.ran:g}s; its worker was killed"
            )
        result = self.scripts.fail(
            orphan.job_id, orphan.token, error, queue=orphan.queue, actor=Actor.SUPERVISOR
        )
        # fail answers with the type: no read of our own. The one line about the timeout.
        if result.code is Code.CANCELED:
            record(
                Outcome.CANCELED_RUNNING,
                orphan.job_id,
                result.job_type,
                queue=orphan.queue,
                stopped="timeout",
                timeout_s=orphan.timeout,
                confirmation=result.confirmation,
            )
            return
        record(
            TIMED_OUT.get(result.code, Outcome.TIMED_OUT_STALE),
            orphan.job_id,
            result.job_type,
            queue=orphan.queue,
            result=result.code.name.lower(),
            timeout_s=orphan.timeout,
            confirmation=result.confirmation,
        )


@dataclass(frozen=True)
class Blame:
    """Which of a dead worker's slots held the job its death is blamed on."""

    slots: frozenset[int] = frozenset()
    everyone: bool = False  # one job at a time, or no job shown: every slot as it always was
    isolate: bool = False  # several jobs, none known to blame: each is marked to run alone


def _blamed(child: Child, states: Sequence[tuple[int, SlotState | None]], draining: bool) -> Blame:
    """Tell which jobs a worker's death is blamed on.

    Killed by the supervisor for one job (timeout, lost lease, cancel past its grace): that
    job. A death nobody can attribute (a signal it did not send: a segfault, the OOM killer;
    or gone silent): with one job thread, or one job shown, or a job running alone in its
    process (workerd.worker_threads), that job counts a recovery, as ever; with several jobs
    running, none is blamed, and each goes back uncounted, marked to run alone. The others
    (a thread between jobs, or inside a claim) died for no fault of their own.
    """
    if child.culprit is not None:
        return Blame(frozenset({child.culprit}))
    if child.threads == 1 or draining:
        return Blame(everyone=True)
    running = {i: s for i, s in states if s is not None and s.job_id}
    alone = {i for i, s in running.items() if s.alone}
    if alone:
        return Blame(frozenset(alone))
    if len(running) > 1:
        return Blame(frozenset(running), isolate=True)
    return Blame(frozenset(running), everyone=not running)


def _report_release(job_id: str, action: str, code: Code, job_type: str | None, queue: str) -> None:
    """Record a release; a stale or finished job was not ours to release: silence."""
    if code is Code.DONE:
        outcome = (
            Outcome.RELEASED
            if action in ("drain", "sibling", "isolate", "unstarted")
            else Outcome.RECOVERED
        )
        record(outcome, job_id, job_type, queue=queue, reason=action)
    elif code is Code.DEAD:
        record(Outcome.RECOVERY_CAP, job_id, job_type, queue=queue, reason="recovery cap")
    elif code is Code.CANCELED:
        stopped = "sigkill" if action == "cancel" else "lost"
        record(Outcome.CANCELED_RUNNING, job_id, job_type, queue=queue, stopped=stopped)
