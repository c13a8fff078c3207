"""A worker process: claim → run the handler → complete or fail → claim again.

While there is work, completing a job and claiming the next is one Redis call (with
WORKER_BATCH=N, completing up to N jobs and claiming the next N: workerd.batching). With no work
the process blocks on its queues' wake-up lists (BLPOP, 1 s) instead of polling; on one queue
with that queue's claim sent behind the BLPOP, which Redis runs as soon as a hint lands. An idle
worker costs about two Redis commands a second (one on several queues).

Several queues (WORKER_QUEUES): which queue each claim asks, which are skipped (empty, paused,
set aside on a cluster, left to other hosts) and how the worker waits idle is the
ClaimPlanner's to say (workerd.claim_plan, on the clock this process is given); this process
does the Redis calls and the sleeping it decides. A complete claims the next job in the same
call only when the job's queue comes first in the next order. A claim takes only the job types
this host runs (workerd.routing). Running the handler is workerd.execution's; writing its
outcome, retried through an outage, workerd.acks's. The supervisor, not this process, renews
the lease of the running job: a handler that holds the GIL for minutes cannot starve its own
lease.

Quiet (the supervisor's flag in shared memory, read before every claim): the worker finishes
its job, claims nothing more, not even with the complete, gives back a next job already
claimed, and waits without touching Redis, so it takes no wake-up hint another host's idle
worker should have.

Cancelling the running job (docs/JOBS.md): the supervisor writes the request in this
process's slot (workerd.slots.Control), then sends SIGTERM. The handler's
``job.cancel_requested()`` reads that word; a SIGTERM that comes with a request raises
JobCanceled inside the handler (unless it asked: it stops by itself), one without is the
usual "finish the job, then exit". The job then ends canceled (cancel_running.lua).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from types import FrameType

import redis

from shared.connect.redis_conn import MASTER_DOWN, is_cluster
from shared.engine import lifecycle
from shared.engine.engine_types import BatchAck, Code, NotRunnable, QueuePaused
from shared.engine.history import Actor
from shared.engine.scripts import Scripts, new_request_id
from shared.engine.scripts.job_scripts import PendingAck, PendingClaim
from shared.model.jobs import Job, wall_clock_ms
from shared.obs import metrics, tracing
from shared.settings.config import Settings
from workerd.ack_flusher import AckFlusher
from workerd.acks import (
    Acknowledger,
    Completion,
    acknowledge_span,
    span_attributes,
)
from workerd.backoff import Backoff
from workerd.batching import Batch, Finished, batch_size, by_queue
from workerd.children import StopOnSignal
from workerd.claim_plan import ClaimPlanner, ClaimTimings
from workerd.duties.fleet_heartbeat import hosts_running
from workerd.execution import Execution, Outcome, run_handler
from workerd.handler_registry import JobCanceled, registered_types
from workerd.idle_wait import pop_hint, pop_hint_then_claim
from workerd.prefetch import READ_LATE, InFlight, LateRead, RunTimes
from workerd.routing import Routing
from workerd.slots import Slot

log = logging.getLogger(__name__)
tracing.configure(tracing.WORKER)

# Claims on one queue at most per claim, each refusal adding a type no live host runs (routing).
TAKE_TRIES = 3
# A claim of one queue, as _claim_from makes it: (queue, runnable, request id, first sent).
ClaimCall = Callable[[str, frozenset[str] | None, str, float], Job | NotRunnable | None]
# Seconds a finished job's outcome may take to be written (at least: a job whose timeout is
# longer gets that) before the watchdog kills its worker: long enough to wait out a Redis
# outage (the write retries until Redis answers), yet a write that never lands (an error that
# does not clear while the supervisor renews the lease) ends as a job stuck that long would.
# An untimed job (timeout 0) writes untimed.
OUTCOME_WRITE_LIMIT = 600.0
# How often (s) a worker's loop asks whether its supervisor is still its parent. Linux
# SIGKILLs a worker whose supervisor dies (children.die_with_parent): this is the fallback,
# and asking before every job was one system call in nine a job made.
PARENT_CHECK_EVERY = 0.5


class WorkerProcess(StopOnSignal):
    """Runs jobs one at a time until told to stop, recycled, or orphaned."""

    # The flusher's deadlines kept by a thread of its own; a job thread's by its process's
    # main thread, polling them all (workerd.worker_threads: one wake for the process).
    FLUSHER_POLLED = False

    def __init__(
        self,
        settings: Settings,
        scripts: Scripts,
        slot: Slot,
        worker_id: str,
        parent_pid: int,
        *,
        quiet: Callable[[bool], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        timings: ClaimTimings | None = None,
    ) -> None:
        self.settings = settings
        self.scripts = scripts
        self.slot = slot
        self.worker_id = worker_id
        self.parent_pid = parent_pid
        # time.monotonic, not the clock given for the planner: a test's fake one may never move.
        self.parent_clock = time.monotonic
        self.parent_checked_at = -PARENT_CHECK_EVERY
        self.stopping = False
        self.exit_reason = ""
        self.jobs_done = 0
        self.next_job: Job | None = None
        # Whether next_job came from an idle wait's claim (not with a completion): no backlog.
        self.next_job_woke = False
        self.sleep = sleep
        self.routing = Routing(
            registered_types(),
            lambda queue, job_type: hosts_running(scripts, queue, job_type),
            worker_id=worker_id,
            clock=clock,
        )
        # Workers start apart on a cluster's wake lists (pid).
        self.planner = ClaimPlanner(
            settings.worker_queues,
            self.routing,
            clock=clock,
            timings=timings,
            first_turn=os.getpid(),
        )
        # The host's quiet request and the lock held from reading it to the claim's reply
        # (workerd.slots.ClaimFence: once /health says quiet, no claim of this host answers).
        # A test's stand-in slot has none: `quiet` is then its flag, and nothing is locked.
        fence = getattr(slot, "fence", None)
        self.fence: AbstractContextManager[object] = fence or contextlib.nullcontext()
        self._read_quiet = quiet or (fence.quiet if fence else (lambda previous: previous))
        self.quiet = False
        self.backoff = Backoff("worker", redis_url=settings.redis_url, sleep=sleep)
        self.acks = Acknowledger(
            scripts,
            self.routing,
            self.backoff,
            parent_alive=self._parent_alive,
            beat_if_idle=slot.beat_if_idle,
        )
        self.execution: Execution | None = None  # the handler running now, if any
        # WORKER_BATCH (workerd.batching): the batch in hand, None when off. It replaces holding.
        size = batch_size(settings, scripts, worker_id)
        self.batch = Batch(size) if size > 1 else None
        # WORKER_PREFETCH (workerd.prefetch): the call sent and not yet read, each type's run
        # times, and the age past which a held job is handed back rather than run.
        # Only on one Redis (or a Sentinel's master) without durable mode: a completion sent
        # ahead is a bare EVALSHA, with no WAIT after it and no cluster routing.
        self.prefetch = (
            settings.worker_prefetch
            and self.batch is None
            and not scripts.policy.wait_replicas
            and not is_cluster(scripts.redis)
        )
        # When a job runs past a deadline: sends the completions waiting (a batch's ack delay)
        # or reads the call in flight (a held job past READ_LATE). Its thread starts with the
        # first armed job; none with neither mode. Its clock reads this module's `time` at
        # each call, as the rest of the worker does (the tests swap it for one they move).
        self.flusher = (
            AckFlusher(self._flush_done, lambda: time.monotonic(), polled=self.FLUSHER_POLLED)
            if self.batch or self.prefetch
            else None
        )
        self.inflight: InFlight | None = None
        # An idle wait on one queue sends that queue's claim behind its BLPOP (_wait_then_claim).
        # Not with WORKER_BATCH (its claims take several jobs), nor on a cluster (each command
        # goes to its own key's master: the BLPOP and the claim cannot share a write).
        self.claims_behind_wait = self.batch is None and not is_cluster(scripts.redis)
        self.run_times = RunTimes()
        self.hold_limit = settings.visibility_timeout / 2
        # When the claim of the job about to start was first sent (monotonic), and each
        # queue's last claim: (request id, first sent). A repeat gets the first send's jobs.
        self.claimed_at: float | None = None
        self.claims_sent: dict[str, tuple[str, float]] = {}
        self.cancels_seen = slot.control.cancels_sent() if slot.control is not None else 0

    def install_signals(self) -> None:
        """As every child; SIGTERM also carries the supervisor's cancels (_on_sigterm)."""
        super().install_signals()
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def _request_stop(self, signum: int, frame: FrameType | None) -> None:
        """SIGTERM/SIGINT: finish the current job, then exit (and say which signal)."""
        super()._request_stop(signum, frame)
        self.exit_reason = f"signal {signal.Signals(signum).name}"

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        """Stop the running handler if this SIGTERM carries a cancel of its job; else (or
        also, for a drain) finish the job, then exit.

        The supervisor counts each cancel it sends in the slot before signalling: a count
        unchanged since the last SIGTERM means a plain one (a drain, or systemd's to the whole
        group). Two pending signals are delivered once, so a drain is also told by its flag.
        """
        control = self.slot.control
        sent = control.cancels_sent() if control is not None else self.cancels_seen
        cancel, self.cancels_seen = sent != self.cancels_seen, sent
        if not cancel or (control is not None and control.drain_requested()):
            self._request_stop(signum, frame)
        running = self.execution
        if (
            cancel
            and running is not None
            and running.armed
            and not running.asked
            and running.requested()
        ):
            running.armed = False  # once: the handler then unwinds
            raise JobCanceled()

    def run(self) -> int:
        """Loop until stopped; return the process exit code (0: a clean exit)."""
        metrics.ACTIVE_WORKERS.set(1)
        log.info("worker_started", extra={"worker_id": self.worker_id})
        try:
            while self.keep_going():
                self.step()
            self._hand_back_unstarted_job()
        finally:
            if self.flusher is not None:
                self.flusher.close()
            # Also when a bug ends the run (child_crashed, then os._exit): no SIGKILL, so what
            # it held (its last jobs' counts) is written, as before holding.
            metrics.flush_job_writes()
        log.info("worker_stopped", extra={"worker_id": self.worker_id, "reason": self.exit_reason})
        tracing.shutdown()
        return 0

    def _parent_alive(self) -> bool:
        return os.getppid() == self.parent_pid

    def keep_going(self) -> bool:
        """Tell whether to run another step: not stopping, parent alive, not due for recycling."""
        if self._parent_gone():
            self.stopping, self.exit_reason = True, "supervisor gone"
        elif self._due_for_recycling():
            self.stopping = True
        return not self.stopping

    def _parent_gone(self) -> bool:
        """Tell whether the supervisor is gone, asking at most every PARENT_CHECK_EVERY."""
        now = self.parent_clock()
        if now - self.parent_checked_at < PARENT_CHECK_EVERY:
            return False
        self.parent_checked_at = now
        return not self._parent_alive()

    def step(self) -> None:
        """Run one job if one is claimable, else wait (bounded) for a wake-up hint."""
        self.slot.beat()
        planner = self.planner
        try:
            # The quiet check and the claim it lets through, as one (a call in flight that
            # claims holds the lock already: workerd.prefetch).
            with contextlib.nullcontext() if self._fence_in_flight() else self.fence:
                quiet = self._is_quiet()
                # A job that came with a completion means a backlog: only then is one claimed
                # ahead (a worker fed job by job from idle would find the queue empty).
                backlog = self.next_job is not None and not self.next_job_woke
                job = None if quiet else self._claim_if_due()
            if quiet:
                self._hand_back_unstarted_job()
                planner.claim_now = True  # resumed: claim at once, not at the next hint
                # No BLPOP: a hint taken here would be lost to others.
                self.sleep(planner.timings.quiet_wait)
                return
            if job is None:
                # Idle: one BLPOP a second, and a claim behind it (one queue) or when a hint
                # says there is work (several).
                planner.claim_now = self._wait_for_work()
            else:
                if self.prefetch and backlog:
                    self._claim_ahead(job)
                self.next_job = self._execute(job)
            self.backoff.succeeded()
        except redis.RedisError as exc:
            planner.claim_now = True
            self.backoff.wait(exc)

    def _claim_if_due(self) -> Job | None:
        """Return the job claimed with the last completion, else claim one if it is time."""
        self._recheck_paused()
        job, self.next_job = self.next_job, None
        self.next_job_woke = False
        if job is None and self.planner.claim_now:
            job = self._claim()
        return job

    def _claim(self) -> Job | None:
        """Claim from the first queue of the next order that has a job; None when none has."""
        for queue, request_id in self.planner.retries():  # repeat what raised
            job = self._claim_from(queue, request_id)
            if job is not None:
                return job
        for queue in self.planner.next_order():
            job = self._claim_from(queue, new_request_id())
            if job is not None:
                return job
        return None

    def _claim_from(self, queue: str, request_id: str, call: ClaimCall | None = None) -> Job | None:
        """Claim from one queue: its first job, if this host runs its type (or no host does).

        None when the queue is empty (skipped a while), paused (dropped until a re-check finds
        it resumed) or starts with a job another live host runs (left to it). `call` makes the
        first claim (an idle wait's, _claim_behind_wait); _claim_call makes the others.
        """
        retry = self.planner.claim_retry
        claim = call or self._claim_call
        for _ in range(TAKE_TRIES):
            # Kept until the call answers: one that raised may have reached Redis (reply lost).
            retry[queue] = request_id
            sent_at = self._claim_sent_at(queue, request_id)
            runnable = self.routing.runnable(queue)
            try:
                job = claim(queue, runnable, request_id, sent_at)
            except QueuePaused:
                retry.pop(queue, None)
                self.planner.found_paused(queue)
                return None
            except MASTER_DOWN as exc:
                if not is_cluster(self.scripts.redis):
                    raise  # one Redis: nothing else to claim from; the step backs off
                self.planner.set_aside(queue, exc)  # its claim kept for a repeat
                return None
            retry.pop(queue, None)
            if not isinstance(job, NotRunnable):
                if job is None:
                    self.planner.found_empty(queue)
                else:
                    self.claimed_at = sent_at
                return job
            if not self.routing.take(job):
                return None  # left to a host that runs it
            request_id, claim = new_request_id(), self._claim_call
        return None

    def _claim_sent_at(self, queue: str, request_id: str) -> float:
        """Return when the claim `request_id` on `queue` was first sent (now, if this is it):
        a repeat after a lost reply gets the jobs the first send claimed, aged from it."""
        first = self.claims_sent.get(queue)
        if first is None or first[0] != request_id:
            first = self.claims_sent[queue] = (request_id, time.monotonic())
        return first[1]

    def _claim_call(
        self, queue: str, runnable: frozenset[str] | None, request_id: str, sent_at: float
    ) -> Job | NotRunnable | None:
        """One claim on `queue`: a job, or with WORKER_BATCH a batch whose first job is
        returned and the rest taken in hand (aged from `sent_at`)."""
        if self.batch is None:
            return self.scripts.claim(
                self.worker_id, queue=queue, runnable=runnable, request_id=request_id
            )
        got = self.scripts.claim_batch(
            self.worker_id,
            self._batch_count(),
            queue=queue,
            runnable=runnable,
            request_id=request_id,
        )
        if isinstance(got, NotRunnable) or not got:
            return got or None
        self.batch.hold(got[1:], sent_at)
        return got[0]

    def _recheck_paused(self) -> None:
        """Once in a while, ask whether the paused queues still are (one pipelined round trip)."""
        queues = self.planner.paused_to_recheck()
        if not queues:
            return
        pipe = self.scripts.redis.pipeline(transaction=False)
        for queue in queues:
            pipe.exists(self.scripts.q(queue).paused)
        for queue, still in zip(queues, pipe.execute(), strict=True):
            if not still:
                self.planner.resumed(queue)

    def _is_quiet(self) -> bool:
        """Read the supervisor's quiet flag (shared memory: no system call)."""
        self.quiet = self._read_quiet(self.quiet)
        return self.quiet

    def _wait_for_work(self) -> bool:
        """Wait as the planner says; return whether to claim (a hint came, or it is time)."""
        metrics.flush_job_writes()  # idle: the last jobs' figures need not wait for the flusher
        wait = self.planner.idle_wait()
        if not wait.queues:
            self.sleep(wait.sleep)
            return wait.claim_after
        if (
            len(wait.queues) == 1
            and self.claims_behind_wait
            and self.inflight is None
            and not self.planner.claim_retry
        ):
            self._wait_then_claim(wait.queues[0])
            return False  # it claimed already, behind the wait
        hint = pop_hint(self.scripts, self.planner, wait.queues)
        if hint is not None and self._is_quiet():
            # Quieted while blocked: the hint is for a worker that will claim (another host's).
            self.scripts.redis.lpush(hint.wake, hint.value)
        return self.planner.waited(hint.queue if hint is not None else None)

    def _wait_then_claim(self, queue: str) -> None:
        """Wait for a hint on `queue` with its claim sent behind the BLPOP (_claim_from with
        _claim_behind_wait). A job it claimed is taken in hand (next_job) for the next step.

        Redis runs the claim as soon as the BLPOP is served, so a job enqueued for an idle
        worker starts without a round trip of its own after the wake-up (0.3-0.4 ms between
        idle processes on a 2-core VM: bench.latency_parts). A wait that ends without a hint
        claims too: in place of the planner's claim every `claim_anyway_every` waits, one
        EVALSHA a wait (MGET, ZPOPMIN and DEL inside it).
        The claim may have run at any moment of the wait, so the job's age counts from the
        wait's start (claimed_at: a job held past `hold_limit` is handed back, not run), and
        the wait lasts at most a quarter of that limit, so a job it claimed looks too old only
        after a stall of the process. With the default 30 s lease that is the usual 1 s wait.
        The claim lock is held for the whole wait (workerd.slots.ClaimFence), so once /health
        says quiet no claim of this host answers, as for any claim; a quiet request made
        meanwhile settles when the wait ends, within `wake_timeout`.
        """
        fence = self._claim_fence()
        if fence is None:  # told to claim nothing meanwhile: the next step sees why
            return
        with fence:
            job = self._claim_from(queue, new_request_id(), self._claim_behind_wait)
        if job is not None:
            self.next_job, self.next_job_woke = job, True

    def _claim_behind_wait(
        self, queue: str, runnable: frozenset[str] | None, request_id: str, sent_at: float
    ) -> Job | NotRunnable | None:
        """_claim_call for an idle wait: the claim sent behind its BLPOP (_wait_then_claim)."""
        try:
            hint, claim = pop_hint_then_claim(
                self.scripts,
                min(self.planner.timings.wake_timeout, self.hold_limit / 4),
                queue,
                self.worker_id,
                runnable,
                request_id,
            )
            self.planner.waited(hint.queue if hint is not None else None)
            return claim.result()
        except redis.RedisError:
            # The claim may have run and its reply been lost (a Redis restart while idle):
            # repeated at once with its request id, still under the lock, so a job it took is
            # in hand before any quiet (claim.lua answers with it). Failing again, the step
            # backs off and the next claim repeats it.
            return self._claim_call(queue, runnable, request_id, sent_at)

    def _hand_back_unstarted_job(self) -> int:
        """Requeue the jobs claimed for this worker that it will not run (it is stopping):
        the next job in hand, and one a call still in flight claimed (read first). Return how
        many it handed back."""
        held = self._settle()
        self.claimed_at = None  # neither job in hand will start
        job, self.next_job, self.next_job_woke = self.next_job, None, False
        unstarted: list[Job | None] = [job, held]
        if self.batch is not None:
            self._send_done(0)  # the completions waiting first: those jobs did run
            unstarted.extend(self.batch.take_hand())
        jobs = [each for each in unstarted if each is not None]
        for each in jobs:
            self._hand_back(each)
        return len(jobs)

    def _hand_back(self, job: Job) -> Code | None:
        """Requeue one job claimed for this worker and never started (uncounted); return
        release's code (DONE: it went back), or None if Redis stayed out of reach."""
        for _ in range(3):
            try:
                released = self.scripts.release(
                    job.id, job.token, drained=True, queue=job.queue, actor=Actor.WORKER
                )
                if released.code is Code.DONE:
                    lifecycle.record(
                        lifecycle.Outcome.HANDED_BACK, job.id, job.type, queue=job.queue
                    )
                return released.code
            except redis.RedisError as exc:
                self.backoff.wait(exc)
        # Still unreachable: the lease expires and a scheduler recovers the job.
        return None

    def _say_too_old(self, job: Job, age: float, release: Code | None, more: int = 0) -> None:
        """Log that `job`, claimed `age` seconds ago (past half its lease), went back unrun
        with `more` jobs claimed with or after it: the one sign of a stall (a frozen host, a
        paused VM) this side gives. `release`: the hand-back's code. STALE_TOKEN mostly means a
        scheduler recovered the job meanwhile (or a repeat of a release whose reply was lost);
        None, that Redis stayed out of reach (the lease runs out instead)."""
        released = "unreachable" if release is None else release.name.lower()
        metrics.count_claim_too_old(released, job.queue)
        log.warning(
            "claim_too_old",
            extra={
                "job_id": job.id,
                "queue": job.queue,
                "claimed_s_ago": round(age, 3),
                "release": released,
                "more": more,
            },
        )

    def _execute(self, job: Job) -> Job | None:
        """Run one claimed job and record its outcome; return the next job if one was claimed.

        A job claimed past half its lease ago is handed back instead (None returned): its
        lease is renewed only once it runs, so the process stalled between the claim and now
        (SIGSTOP, a paused VM) and a scheduler may have recovered the job meanwhile and
        another worker run it (docs/RELIABILITY.md, scenario 4)."""
        if self._too_old_to_start(job):
            return None
        timeout = job_timeout(job, self.settings)
        started_at = self.slot.start_job(job.id, job.token, timeout, job.queue, job.type)
        self.execution = Execution(started_at, self.slot.control)
        eligible_at = int(job.extra["eligible_at"]) if "eligible_at" in job.extra else None
        metrics.observe_queue_wait(job.type, job.queue, eligible_at, job.started_at)
        # Built only while tracing is on (None when off: no span would carry them).
        trace, attributes = job.extra.get("traceparent"), span_attributes(job)
        # The claim span covers the queue wait: claimable → claimed, on Redis's clock.
        lifecycle.record(
            lifecycle.Outcome.CLAIMED,
            job.id,
            job.type,
            queue=job.queue,
            attempt=job.attempts,
            trace=trace,
            attributes=None if attributes is None else {"taskforge.recoveries": job.recoveries},
            start_ms=eligible_at,
            end_ms=job.started_at,
            priority=job.priority,
            worker_id=self.worker_id,
        )
        # The job's first INFO line (job_claimed is DEBUG): what the claim knew, and its wait.
        lifecycle.record(
            lifecycle.Outcome.STARTED,
            job.id,
            job.type,
            queue=job.queue,
            attempt=job.attempts,
            worker_id=self.worker_id,
            priority=job.priority,
            queue_wait_ms=metrics.queue_wait_ms(eligible_at, job.started_at),
        )
        armed = self.flusher is not None and self._arm_flusher()  # neither mode: no call
        started = time.perf_counter()
        with tracing.span("task.execute", trace, attributes) as span:
            outcome = run_handler(job, self.settings.result_max_bytes, self.execution)
            # Before anything that may wait on Redis (the flusher's read, the outcome's write).
            self.slot.handler_returned(outcome_write_limit(timeout))
            asked_to_stop = self.execution.requested()
            self.execution = None
            if armed:
                assert self.flusher is not None
                self.flusher.disarm()
            if outcome.canceled:
                tracing.outcome(span, "canceled")
            else:
                tracing.outcome(span, "succeeded" if outcome.ok else "failed")
            if not outcome.ok and not outcome.canceled:
                tracing.failed(span, outcome.error_kind)
        duration = time.perf_counter() - started
        metrics.observe_handler(job.type, job.queue, duration)
        if self.prefetch or self.batch is not None:
            self.run_times.observe(job.type, duration)
        fields: dict[str, object] = {"duration_ms": round(duration * 1000, 3)}
        if outcome.ok and asked_to_stop:
            fields["cancel_requested"] = True  # it completed first, if its completion lands
        self.jobs_done += 1  # before recording: the last job before recycling claims no next
        next_job = self._record(job, outcome, fields, attributes)
        self.slot.beat()  # not busy: what taskforge_busy_workers counts (workerd.obs_server)
        return next_job

    def _too_old_to_start(self, job: Job) -> bool:
        """Hand `job` back (with the rest of its batch) if its claim was first sent more than
        half its lease ago; tell whether it was. Asked once a claim: once the slot shows the
        job its lease is renewed (a thread's job waiting to run alone asks before it waits)."""
        claimed_at, self.claimed_at = self.claimed_at, None
        if claimed_at is None:
            return False
        age = time.monotonic() - claimed_at
        if age <= self.hold_limit:
            return False
        release = self._hand_back(job)
        # And what came with it or after it: the rest of its batch (as old), a claim sent
        # ahead of it (read now: left unread, it would keep its job and the claim lock).
        more = self._hand_back_unstarted_job()
        self._say_too_old(job, age, release, more)
        return True

    def _record(
        self,
        job: Job,
        outcome: Outcome,
        fields: dict[str, object],
        attributes: dict[str, object] | None,
    ) -> Job | None:
        """Write the outcome to Redis, retrying through an outage; return the next job."""
        if self.batch is not None:
            return self._record_batched(job, outcome, fields)
        held = self._settle()
        if held is not None:
            return self._record_holding(job, outcome, fields, held, attributes)
        with contextlib.ExitStack() as fenced:
            fenced.enter_context(self.fence)  # the quiet check and the claim with the complete
            claim_next = None if self._stop_claiming() else self.worker_id
            # Claim in the same call only from the queue the next claim would try first.
            if (
                claim_next is not None
                and outcome.ok
                and not self.planner.complete_claims_from(job.queue)
            ):
                claim_next = None
            if claim_next is None or not outcome.ok:
                fenced.close()  # this write claims nothing: the fence need not wait for it
            self.planner.claim_now = True
            sent_at = time.monotonic()  # a job it claims holds its lease from about then
            with acknowledge_span(job, attributes):
                ack = self.acks.write(job, outcome, fields, claim_next)
        if ack is not None and ack.paused:
            self.planner.found_paused(job.queue)
        next_job = ack.next_job if ack is not None else None
        if isinstance(next_job, NotRunnable):
            # The queue's next job is not this host's type: the next claim asks the queue again
            # and decides (workerd.routing), so that decision is made in one place.
            return None
        if claim_next is not None and outcome.ok:
            self.planner.completed(job.queue, claimed_next=next_job is not None)
        if next_job is not None:
            self.claimed_at = sent_at
        return next_job

    # Holding the next job (WORKER_PREFETCH, workerd.prefetch) ----------------------------------

    def _fence_in_flight(self) -> bool:
        """Tell whether a call in flight holds the claim lock (it claims)."""
        inflight = self.inflight
        return inflight is not None and inflight.claims and inflight.late is None

    def _stop_claiming(self) -> bool:
        """Tell whether this worker claims nothing now: stopping, due for recycling or quiet."""
        return self.stopping or self._due_for_recycling() or self._is_quiet()

    def _claim_fence(self) -> contextlib.ExitStack | None:
        """Take the claim lock for a call that claims and is read later; None (the lock given
        back) when this worker must claim nothing now."""
        fence = contextlib.ExitStack()
        fence.enter_context(self.fence)
        if self._stop_claiming():
            fence.close()
            return None
        return fence

    def _write_without_claim(self, job: Job, outcome: Outcome, fields: dict[str, object]) -> None:
        """Write `job`'s outcome the sure way (retried through an outage), claiming nothing."""
        ack = self.acks.write(job, outcome, fields, None)
        if ack is not None and ack.paused:
            self.planner.found_paused(job.queue)

    def _claim_ahead(self, job: Job) -> None:
        """Before running a short job with nothing in hand or in flight, send a claim for the
        next one, read when this job ends (a burst's first job: then each completion claims)."""
        if (
            self.inflight is not None
            or self.next_job is not None
            or not self.run_times.short(job.type)
            or not self.planner.complete_claims_from(job.queue)
        ):
            return
        fence = self._claim_fence()
        if fence is None:
            return
        request_id = new_request_id()
        try:
            sent = self.scripts.claim_begin(
                self.worker_id,
                queue=job.queue,
                runnable=self.routing.runnable(job.queue),
                request_id=request_id,
            )
        except redis.RedisError:
            fence.close()
            self.planner.claim_retry[job.queue] = request_id  # the next claim repeats it
            return
        self.inflight = InFlight(sent, job.queue, time.monotonic(), True, fence=fence)

    def _record_holding(
        self,
        job: Job,
        outcome: Outcome,
        fields: dict[str, object],
        held: Job,
        attributes: dict[str, object] | None,
    ) -> Job | None:
        """Write `job`'s outcome with its next job, `held`, in hand: a completion is sent (and,
        behind a short job, claims the one after) and `held` returned to start at once; a
        failure or cancel is written as ever. Stopping, quiet or recycling: `held` is kept as
        the next job, which the step then hands back."""
        if not outcome.ok or self._stop_claiming():
            # Stopping or quiet: the step hands `held` back (it becomes the next job).
            with acknowledge_span(job, attributes):
                self._write_without_claim(job, outcome, fields)
            return held
        fence = (
            self._claim_fence()
            if self.run_times.short(held.type)
            and held.queue == job.queue
            and self.planner.complete_claims_from(job.queue)
            else None
        )
        claims = fence is not None
        self.planner.claim_now = True
        sent_ms = None if attributes is None else wall_clock_ms()  # its acknowledge span's start
        try:
            sent = self.scripts.complete_begin(
                job.id,
                job.token,
                outcome.result_json,
                claim_next_for=self.worker_id if claims else None,
                queue=job.queue,
                runnable=self.routing.runnable(job.queue),
                holding=held.id,
            )
        except redis.RedisError:
            if fence is not None:
                fence.close()
            # Not sent, or sent in part: written the sure way (same token, repeat-safe).
            with acknowledge_span(job, attributes, sent_ms):
                self._write_without_claim(job, outcome, fields)
            return held
        self.inflight = InFlight(
            sent,
            job.queue,
            time.monotonic(),
            claims,
            job,
            outcome,
            fields,
            held.id,
            fence or contextlib.ExitStack(),
            attributes=attributes,
            sent_ms=sent_ms,
        )
        return held

    def _settle(self) -> Job | None:
        """Read the call in flight, if any; return the job it claimed, if still young enough to
        run (one held past half its lease is handed back: its lease is not renewed while held)."""
        inflight, self.inflight = self.inflight, None
        if inflight is None:
            return None
        try:
            # Read already by the flusher while the job before ran long (:meth:`_read_late`).
            claimed = self._read(inflight) if inflight.late is None else inflight.late.result()
        finally:
            inflight.fence.close()
        if claimed is None:
            return None
        age = inflight.age()
        if age > self.hold_limit:
            self._say_too_old(claimed, age, self._hand_back(claimed))
            return None
        self.claimed_at = inflight.sent_at  # checked again as it starts (_execute)
        return claimed

    def _read(self, inflight: InFlight) -> Job | None:
        """Return the job `inflight` claimed, having recorded the completion it carried."""
        if isinstance(inflight.sent, PendingClaim):
            return self._read_claim(inflight, inflight.sent)
        job, outcome = inflight.job, inflight.outcome
        assert job is not None and outcome is not None and isinstance(inflight.sent, PendingAck)
        with acknowledge_span(job, inflight.attributes, inflight.sent_ms):
            try:
                ack = inflight.sent.result()
                self.acks.log_completion(job, ack, inflight.fields)
            except redis.RedisError:
                # It may have landed, and claimed: the sure write, with the same token and
                # worker id, is answered as the first was (complete.lua), the claimed job too.
                claim_for = self.worker_id if inflight.claims else None
                written = self.acks.write(
                    job, outcome, inflight.fields, claim_for, inflight.holding
                )
                if written is None:
                    return None  # the supervisor is gone
                ack = written
        if ack.paused:
            self.planner.found_paused(inflight.queue)
        claimed = ack.next_job
        if inflight.claims:
            self.planner.completed(inflight.queue, claimed_next=isinstance(claimed, Job))
        return claimed if isinstance(claimed, Job) else None

    def _read_claim(self, inflight: InFlight, sent: PendingClaim) -> Job | None:
        """Return the job a claim sent ahead got (None: the queue was empty or paused)."""
        try:
            claimed = sent.result()
        except QueuePaused:
            self.planner.found_paused(inflight.queue)
            return None
        except redis.RedisError:
            # Its claim may have landed: repeated now with its request id, which answers with
            # the job it claimed (claim.lua); still failing, the next claim repeats it.
            try:
                claimed = self.scripts.claim(
                    self.worker_id,
                    queue=inflight.queue,
                    runnable=self.routing.runnable(inflight.queue),
                    request_id=sent.request_id,
                )
            except QueuePaused:
                self.planner.found_paused(inflight.queue)
                return None
            except redis.RedisError:
                self.planner.claim_retry[inflight.queue] = sent.request_id
                return None
        if claimed is None:
            self.planner.found_empty(inflight.queue)
        return claimed if isinstance(claimed, Job) else None

    # Batched claims and acknowledgements (WORKER_BATCH, workerd.batching) ----------------------

    def _record_batched(self, job: Job, outcome: Outcome, fields: dict[str, object]) -> Job | None:
        """Keep a success's completion to send with the batch's; write a failure or cancel at
        once, after the completions waiting. Return the next job in hand to run, having sent
        the completions first when the next job calls for it (workerd.batching, the bounds)
        and claimed the next batch with them when the hand is empty."""
        batch = self.batch
        assert batch is not None
        now = time.monotonic()
        self.planner.claim_now = True
        if outcome.ok:
            batch.done.append(Finished(job, outcome.result_json, fields, now))
        else:
            self._send_done(0)
            self._write_without_claim(job, outcome, fields)
        if self._stop_claiming():
            # Here, not at the next step: a quiet (or memory) that passes by then would leave
            # these jobs in hand under the next claim's.
            self._give_back_batch()
            return None
        if batch.must_send(self.run_times, now):
            if not batch.hand:
                return self._send_done_and_claim(job.queue)
            self._send_done(0)
        return self._next_in_hand()

    def _next_in_hand(self) -> Job | None:
        """Return the next job in hand to start; none when the hand has waited past half its
        lease (aged now, after any send that waited out an outage): it all goes back."""
        batch = self.batch
        assert batch is not None
        now = time.monotonic()
        if batch.held_too_long(self.hold_limit, now):
            # held_too_long: the hand is not empty (and sending the completions leaves it).
            first, age = batch.hand[0], now - batch.claimed_at
            releases = self._give_back_batch()
            self._say_too_old(first, age, releases[0], len(releases) - 1)
            return None
        return batch.hand.popleft() if batch.hand else None

    def _give_back_batch(self) -> list[Code | None]:
        """Send the completions waiting (those jobs did run), then hand back the jobs in hand;
        return each hand-back's code."""
        assert self.batch is not None
        self._send_done(0)
        return [self._hand_back(unstarted) for unstarted in self.batch.take_hand()]

    def _arm_flusher(self) -> bool:
        """Before a job starts: have the completions waiting sent, or the call in flight read,
        at its deadline if the job still runs then (workerd.ack_flusher); tell whether any
        waits."""
        assert self.flusher is not None
        if self.batch is not None:
            deadline = self.batch.deadline()
        else:
            inflight = self.inflight
            deadline = None if inflight is None else inflight.sent_at + READ_LATE
        if deadline is None:
            return False
        self.flusher.arm(deadline)
        return True

    def _flush_done(self) -> None:
        """The flusher's (its thread, the main one running a job): send the completions
        waiting, claiming nothing; holding, read the call in flight."""
        if self.batch is not None:
            self._send_done(0)
        else:
            self._read_late()

    def _read_late(self) -> None:
        """The flusher's, while a held job runs past READ_LATE: read the call in flight now,
        recording the completion it carried and giving back the claim lock, rather than when
        the job ends (workerd.prefetch); the main thread takes what it claimed (:meth:`_settle`)."""
        inflight = self.inflight
        if inflight is None or inflight.late is not None:
            return
        late = inflight.late = LateRead()
        try:
            late.claimed = self._read(inflight)
        except BaseException as exc:  # the main thread raises it where it would have read
            late.error = exc
        finally:
            inflight.fence.close()

    def _send_done_and_claim(self, queue: str) -> Job | None:
        """Send the completions waiting and, with those of `queue`, claim the next batch from
        it if it comes first in the next order."""
        with contextlib.ExitStack() as fenced:
            fenced.enter_context(self.fence)  # the quiet check and the claim with the complete
            claims = not self._stop_claiming() and self.planner.complete_claims_from(queue)
            if not claims:
                fenced.close()
            # The jobs it claims are aged from the first send, not from a repeat's reply.
            sent_at = time.monotonic()
            ack = self._send_done(self._batch_count() if claims else 0, queue)
        if not claims or ack is None or ack.paused:
            return None
        if ack.claimed:
            self.planner.completed(queue, claimed_next=True)
            assert self.batch is not None
            self.batch.hold(ack.claimed[1:], sent_at)
            return ack.claimed[0]
        if ack.refused is None:
            self.planner.completed(queue, claimed_next=False)
        # Refused: the next claim asks the queue again and decides (workerd.routing).
        return None

    def _send_done(self, count: int, queue: str | None = None) -> BatchAck | None:
        """Send the completions waiting, one call per queue, claiming up to `count` next jobs of
        `queue` with its completions (0: none); record how each ended. Return that call's
        answer: None when none of `queue` waited, or the supervisor is gone."""
        assert self.batch is not None and self.flusher is not None
        with self.flusher.lock:  # not while a flush is in progress (workerd.ack_flusher)
            done = self.batch.take_done()
            if not done:
                return None
            queue = queue or done[-1].job.queue
            answer = None
            groups = by_queue(done, queue)
            written = 0  # groups whose call answered
            try:
                for group_queue, group in groups:
                    entries = [(f.job, f.result_json, f.fields) for f in group]
                    sent_ms = wall_clock_ms()  # the completions' acknowledge spans start here
                    ack = self._send_group(
                        entries, count if group_queue == queue else 0, group_queue
                    )
                    # Written: a bug recording them must not put them back, as a repeat is
                    # answered DONE (same token) and would be recorded and counted again.
                    written += 1
                    self._record_group(entries, ack, group_queue, sent_ms)
                    if group_queue == queue:
                        answer = ack
            except Exception:
                # Not a Redis error (_send_group waits those out): a bug. The completions not
                # written wait again, first, in their order and with their ages, so the next
                # send (or the flusher's retry) writes them, rather than their leases running out.
                unsent = {id(f) for _, group in groups[written:] for f in group}
                self.batch.done[:0] = [f for f in done if id(f) in unsent]
                raise
            return answer

    def _send_group(self, entries: list[Completion], count: int, queue: str) -> BatchAck | None:
        """Send completions of `queue`'s jobs, claiming up to `count` next ones (0: none)."""
        return self.acks.write_batch(
            self.worker_id,
            entries,
            count=count,
            queue=queue,
            # A flush claims nothing: no routing read (the flusher's thread must not touch it).
            runnable=self.routing.runnable(queue) if count else None,
        )

    def _record_group(
        self, entries: list[Completion], ack: BatchAck | None, queue: str, sent_ms: int
    ) -> None:
        """Record how the completions _send_group wrote (sent at `sent_ms`) ended."""
        if ack is None:
            return
        self.acks.record_batch(entries, ack, sent_ms)
        if ack.paused:
            self.planner.found_paused(queue)

    def _batch_count(self) -> int:
        """Return how many jobs a batched claim asks for: the batch size, fewer when recycling
        (WORKER_MAX_JOBS) is nearer."""
        assert self.batch is not None
        limit = self.settings.worker_max_jobs
        if not limit:
            return self.batch.size
        return max(1, min(self.batch.size, limit - self.jobs_done))

    def _due_for_recycling(self) -> bool:
        reason = recycling_reason(self.settings, self.jobs_done)
        if reason:
            self.exit_reason = reason
        return bool(reason)


def job_timeout(job: Job, settings: Settings) -> float:
    """Return how long `job`'s handler may run: its own timeout, else TASK_DEFAULT_TIMEOUT
    (0: untimed)."""
    return job.timeout or settings.default_job_timeout


def outcome_write_limit(timeout: float) -> float:
    """Return how long a job's outcome write may take once its handler has returned
    (Slot.handler_returned), given the job's timeout: OUTCOME_WRITE_LIMIT, or the timeout if
    longer; 0 (untimed) for an untimed job."""
    return max(timeout, OUTCOME_WRITE_LIMIT) if timeout > 0 else 0.0


def recycling_reason(settings: Settings, jobs_done: int) -> str:
    """Return why a worker process that ran `jobs_done` jobs is due for replacement
    (WORKER_MAX_JOBS, WORKER_MAX_RSS_MB), or "" when it is not."""
    limit = settings.worker_max_jobs
    if limit and jobs_done >= limit:
        return f"recycled after {jobs_done} jobs"
    rss_limit = settings.worker_max_rss_mb
    if rss_limit and resident_mb() > rss_limit:
        return f"recycled at {resident_mb():.0f} MB resident"
    return ""


def resident_mb() -> float:
    """Return this process's resident memory in MiB (Linux /proc)."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
